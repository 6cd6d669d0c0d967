"""A private loopback network for the tests that start multi-worker TensorFlow clusters.

TensorFlow's gRPC server listens on its ``TF_CONFIG`` port on every interface
(``0.0.0.0``). The tests' workers therefore run in a network namespace of
their own that holds a loopback interface and nothing else (Linux user and
network namespaces: ``unshare -rn``, entered with ``nsenter``): there
``0.0.0.0`` is that loopback alone, which nothing outside the namespace
reaches. Where namespaces are not available (another OS, a kernel or
container that forbids them, no util-linux), the workers run on the
machine's own loopback as before, with a warning saying that their ports are
open on every interface while the test runs.
"""

import shutil
import subprocess
import sys
import warnings

# Run inside the new namespaces: bring the loopback interface up (it starts
# down; SIOCGIFFLAGS / SIOCSIFFLAGS with IFF_UP), say so, then hold the
# namespaces open until killed.
_HOLDER = r"""
import fcntl, socket, struct, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
request = struct.pack("16sH14x", b"lo", 0)
flags = struct.unpack("16sH14x", fcntl.ioctl(s, 0x8913, request))[1]
fcntl.ioctl(s, 0x8914, struct.pack("16sH14x", b"lo", flags | 0x1))
print("ready", flush=True)
sys.stdin.read()  # until the test closes the pipe or kills the holder
"""


class PrivateLoopback:
    """A network namespace holding only a loopback interface, kept open while
    this object lives (``close()`` ends it). ``prefix`` runs a command inside
    it (its child processes stay there too); ``[]`` where namespaces are not
    available (``reason`` says why)."""

    def __init__(self):
        self.holder, self.reason, self.prefix = None, None, []
        unshare, nsenter = shutil.which("unshare"), shutil.which("nsenter")
        if not (unshare and nsenter):
            self.reason = "unshare or nsenter (util-linux) not found"
        else:
            try:
                self.holder = subprocess.Popen([unshare, "-rn", sys.executable, "-c", _HOLDER], stdin=subprocess.PIPE,
                                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                if self.holder.stdout.readline().strip() == "ready":
                    self.prefix = [nsenter, "-t", str(self.holder.pid), "-U", "-n", "--preserve-credentials"]
                    probe = subprocess.run([*self.prefix, "true"], capture_output=True, text=True, timeout=30)
                    if probe.returncode != 0:
                        self.reason = f"nsenter failed: {probe.stderr.strip()}"
                else:
                    self.holder.kill()
                    self.reason = f"unshare -rn failed: {self.holder.communicate()[1].strip()[-500:]}"
            except OSError as error:
                self.reason = f"unshare -rn failed: {error}"
        if self.reason:
            self.close()
            self.prefix = []
            warnings.warn(f"the multi-worker test runs its TensorFlow workers on this machine's loopback, their "
                          f"ports open on every interface while it runs: no private network namespace "
                          f"({self.reason})", stacklevel=2)

    def close(self):
        if self.holder is not None and self.holder.poll() is None:
            self.holder.kill()
            self.holder.wait(timeout=30)
        self.holder = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def listening_interfaces(prefix):
    """The network interfaces visible to a process run with ``prefix`` (``/proc/net/dev``)."""
    out = subprocess.run([*prefix, "cat", "/proc/net/dev"], capture_output=True, text=True, check=True).stdout
    return sorted(line.split(":")[0].strip() for line in out.splitlines()[2:] if ":" in line)
