"""The private loopback network of the multi-worker tests (tests/distributed/loopback.py)."""

import socket
import subprocess
import sys

import pytest

from tests.distributed import loopback


def test_a_process_inside_sees_only_the_loopback_and_its_ports_are_private():
    with loopback.PrivateLoopback() as network:
        if network.reason:
            pytest.skip(f"no private network namespace here: {network.reason}")
        assert loopback.listening_interfaces(network.prefix) == ["lo"]
        # A server on 0.0.0.0 inside answers inside; the same port outside is closed.
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        server = subprocess.Popen([*network.prefix, sys.executable, "-c", f"""
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("0.0.0.0", {port})); s.listen()
print("listening", flush=True)
c = socket.create_connection(("127.0.0.1", {port})); a, _ = s.accept(); c.sendall(b"ok"); print(a.recv(2).decode())
import sys; sys.stdin.read()
"""], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert server.stdout.readline().strip() == "listening"
            assert server.stdout.readline().strip() == "ok"
            with pytest.raises(OSError):
                socket.create_connection(("127.0.0.1", port), timeout=2).close()
        finally:
            server.kill()
            server.wait()


def test_without_namespaces_it_says_so_and_runs_on_the_machine(monkeypatch):
    monkeypatch.setattr(loopback.shutil, "which", lambda name: None)
    with pytest.warns(UserWarning, match="ports open on every interface.*unshare or nsenter"):
        network = loopback.PrivateLoopback()
    assert network.prefix == [] and network.holder is None
