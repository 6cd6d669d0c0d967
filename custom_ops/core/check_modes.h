// How a GPU pipeline's value checks reach the caller (host code only).
//
// A pipeline (core/*_pipeline.h) records what its checks found in status words
// on the device, with the offending values beside them (pipeline::Values),
// and ends with exec.Finish(status, words, message): `message(words, values)`
// turns them into "" or the CPU kernels' error message. Two modes, chosen by
// KERAS_TREES_GPU_CHECKS:
//
// * sync: the call copies its words to the host, waits for them, and fails
//   with its own message (the CPU kernels' behaviour);
// * deferred (the CUDA executor's default): the call never waits. Its words
//   go to pinned host memory with an asynchronous copy and an event; the
//   first message found there is raised by the next deferring call on that
//   device, or by keras_trees.ops.check_gpu_errors(), prefixed with
//   kEarlierCall. Meanwhile the bodies of a call with a bad input write NaN
//   into its float outputs, so nothing finite and wrong comes out of it.
//
// The CPU emulation of the GPU (core/launch_cpu.h GpuEmulationExecutor) keeps
// the CPU kernels' contract (sync) unless KERAS_TREES_GPU_CHECKS=deferred
// asks it to emulate the deferred mode (the tests of that mode on machines
// without a GPU).
#ifndef KERAS_TREES_CORE_CHECK_MODES_H_
#define KERAS_TREES_CORE_CHECK_MODES_H_

#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <utility>

namespace keras_trees {
namespace gpu_checks {

// Status words a deferring pipeline may record (and as many values).
constexpr int kMaxWords = 8;

// The prefix of a message raised by a later call than the one that failed.
constexpr const char* kEarlierCall =
    "an earlier keras-trees call on this GPU failed (GPU checks are deferred; KERAS_TREES_GPU_CHECKS=sync "
    "raises at the call itself): ";

// `message(words, values)`: "" or the error message of a call's status words
// and the values captured at their indices.
using Message = std::function<std::string(const unsigned long long* words, const double* values)>;

inline bool EnvIs(const char* value) {
  const char* env = std::getenv("KERAS_TREES_GPU_CHECKS");
  return env != nullptr && std::strcmp(env, value) == 0;
}

// The CUDA executor defers unless KERAS_TREES_GPU_CHECKS=sync.
inline bool DeviceDefers() { return !EnvIs("sync"); }
// The CPU emulation defers only with KERAS_TREES_GPU_CHECKS=deferred.
inline bool EmulationDefers() { return EnvIs("deferred"); }

// The first message of a deferred check that no call has raised yet (first
// error wins), per device.
class Pending {
 public:
  void Set(std::string message) {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_.empty() && !message.empty()) error_ = std::move(message);
  }
  // The pending message with kEarlierCall before it ("" if none), cleared.
  std::string Take() {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_.empty()) return "";
    std::string message = kEarlierCall + error_;
    error_.clear();
    return message;
  }

 private:
  std::mutex mu_;
  std::string error_;
};

// The emulated device's (one per process and library).
inline Pending& EmulatedDevice() {
  static Pending pending;
  return pending;
}

// Copies `message` into `buffer` (`size` bytes, NUL-terminated, truncated
// if need be) and returns its full length: the C export of a library's
// pending message (KerasTreesGpuErrors, read by keras_trees.ops.check_gpu_errors).
inline int ToBuffer(const std::string& message, char* buffer, int size) {
  if (buffer != nullptr && size > 0) {
    const size_t n = message.size() < static_cast<size_t>(size - 1) ? message.size() : static_cast<size_t>(size - 1);
    std::memcpy(buffer, message.data(), n);
    buffer[n] = '\0';
  }
  return static_cast<int>(message.size());
}

}  // namespace gpu_checks
}  // namespace keras_trees

#endif  // KERAS_TREES_CORE_CHECK_MODES_H_
