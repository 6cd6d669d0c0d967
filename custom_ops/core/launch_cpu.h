// The CPU executors of the kernel pipelines (core/pipeline.h): every body over
// the core's parallel-for (ranges of items on the framework's thread pool),
// block bodies one block per item, scratch memory from the heap, and a stable
// sort. Running a pipeline on GpuEmulationExecutor is the exact emulation of
// the same pipeline on the GPU (the same bodies, the same arithmetic, the same
// orders and the same chunk plan), which the test suite checks on every CI
// run; CpuExecutor spends no scratch on wider chunks (chunking never changes
// the results). The CPU kernels themselves keep their SIMD engines (core/*.cc).
#ifndef KERAS_TREES_CORE_LAUNCH_CPU_H_
#define KERAS_TREES_CORE_LAUNCH_CPU_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "core/common.h"
#include "core/check_modes.h"
#include "core/pipeline.h"

namespace keras_trees {

template <int64_t WideScratchBytes>
class BasicCpuExecutor {
 public:
  // Scratch a pipeline may spend to give its walks more parallel items.
  static constexpr int64_t kWideScratchBytes = WideScratchBytes;

  explicit BasicCpuExecutor(ParallelFor parallel_for) : parallel_for_(std::move(parallel_for)) {}

  template <class Body>
  void For(int64_t n, const Body& body) {
    parallel_for_(n, 50, [&body](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) body(i);
    });
  }

  // One call per item stands for the lanes of a GPU lane group (the
  // portable group functions compute every lane's share in that call).
  template <class Body>
  void ForGroups(int64_t n, int /*width*/, const Body& body) {
    For(n, body);
  }

  // Each block on one thread of the parallel-for, its phases in order, in each
  // phase its threads in order, the block's shared memory on the heap (a
  // thread pool's stacks may be small).
  template <class Body>
  void ForBlocks(int64_t n, const Body& body) {
    For(n, [&body](int64_t block) {
      std::unique_ptr<typename Body::Shared> shared(new typename Body::Shared());
      const int phases = body.Phases();
      for (int phase = 0; phase < phases; ++phase) {
        for (int t = 0; t < Body::kThreads; ++t) body(phase, block, t, *shared);
      }
    });
  }

  template <typename T>
  T* Scratch(int64_t n) {
    buffers_.emplace_back(new char[std::max<int64_t>(n, 1) * sizeof(T)]);
    return reinterpret_cast<T*>(buffers_.back().get());
  }

  // Stable: equal keys keep the order of their input positions (what the
  // GPU's radix sort gives).
  void SortPairs(const int32_t* keys_in, int32_t* keys_out, const int32_t* values_in,
                 int32_t* values_out, int64_t n, int /*key_bits*/) {
    std::vector<int64_t> order(n);
    std::iota(order.begin(), order.end(), int64_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [keys_in](int64_t a, int64_t b) { return keys_in[a] < keys_in[b]; });
    for (int64_t p = 0; p < n; ++p) {
      keys_out[p] = keys_in[order[p]];
      values_out[p] = values_in[order[p]];
    }
  }

  void CopyToHost(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }

  // The call's message now; the GPU's emulation, with
  // KERAS_TREES_GPU_CHECKS=deferred, keeps it for the next call and returns
  // the one an earlier call left (core/check_modes.h).
  std::string Finish(const unsigned long long* status, int words, const gpu_checks::Message& message) {
    std::string own = message(status, reinterpret_cast<const double*>(status + words));  // host memory
    if (WideScratchBytes == 0 || !gpu_checks::EmulationDefers()) return own;
    gpu_checks::Pending& pending = gpu_checks::EmulatedDevice();
    std::string earlier = pending.Take();
    pending.Set(std::move(own));
    return earlier;
  }

 private:
  ParallelFor parallel_for_;
  std::vector<std::unique_ptr<char[]>> buffers_;
};

// The CPU kernels' executor: no scratch spent on wider chunks, where the
// threads are few.
using CpuExecutor = BasicCpuExecutor<0>;
// The exact emulation of the GPU run: the GPU executor's chunk plan too.
using GpuEmulationExecutor = BasicCpuExecutor<kGpuWideScratchBytes>;

}  // namespace keras_trees

#endif  // KERAS_TREES_CORE_LAUNCH_CPU_H_
