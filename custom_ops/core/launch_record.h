// A third executor of the kernel pipelines (core/pipeline.h): it runs no body
// and records what the same call launches on the GPU (custom_ops/cuda/launch.cuh),
// for the structural budgets of benchmarks/gpu_budget.py. The plan of a
// pipeline depends on the shapes alone (chunk sizes, launch counts, scratch),
// never on the values, so it can be read at the benchmark shapes without
// memory or a GPU; the status words read back are those of the success path
// (every word kNone).
//
// Counted as the CUDA executor spends them:
//   launches         one per For / ForGroups / ForBlocks with work (n > 0)
//   sorts            SortPairs calls (each one CUB radix sort: several kernels,
//                    memsets and its temporary storage, not counted here)
//   host_copies      CopyToHost calls with bytes > 0 (cudaMemcpyAsync)
//   syncs            CopyToHost calls (each waits for the stream); Finish is
//                    recorded as the GPU's default, deferred
//                    (core/check_modes.h): neither, its asynchronous copy of
//                    the status words to pinned memory is not waited for
//   scratch_bytes    Scratch memory, carved at 256-byte boundaries as the
//                    CUDA workspace does (without CUB's temporary storage)
//   zero_fill_bytes  the elements a pipeline::Fill body sets to zero (alone or in a Together)
//   kernels          each CUDA kernel launched (its body's type and the
//                    template it runs in, ForKernel32 / ForKernel /
//                    ForGroupsKernel / BlocksKernel as the CUDA executor picks
//                    it) with its largest grid, for the per-kernel resources
//                    that benchmarks/gpu_budget.py reads from nvcc
#ifndef KERAS_TREES_CORE_LAUNCH_RECORD_H_
#define KERAS_TREES_CORE_LAUNCH_RECORD_H_

#include <cxxabi.h>

#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <typeinfo>
#include <vector>

#include "core/check_modes.h"
#include "core/pipeline.h"

namespace keras_trees {

struct KernelLaunch {
  std::string body;      // the body's C++ type, e.g. "keras_trees::hinge::Output<float>"
  std::string launcher;  // the kernel template of cuda/launch.cuh that runs it
  int64_t blocks = 0;    // the largest grid it is launched with
  int threads = 0;       // threads per block
};

struct Plan {
  int64_t launches = 0;
  int64_t sorts = 0;
  int64_t host_copies = 0;
  int64_t syncs = 0;
  int64_t scratch_bytes = 0;
  int64_t zero_fill_bytes = 0;
  std::vector<KernelLaunch> kernels;  // in order of first launch, each once
};

class PlanRecorder {
 public:
  // The CUDA executor's (core/pipeline.h), so that the pipelines choose the
  // GPU's chunks and the recorded grids are the GPU's.
  static constexpr int64_t kWideScratchBytes = kGpuWideScratchBytes;

  static constexpr int kThreads = kGpuThreads;

  template <class Body>
  void For(int64_t n, const Body& body) {
    if (n <= 0) return;
    plan.zero_fill_bytes += ZeroBytes(n, body);
    const bool narrow = !pipeline::WideIndex<Body>::value && n <= INT32_MAX;
    Launch<Body>(narrow ? "ForKernel32" : "ForKernel", (n + kThreads - 1) / kThreads, kThreads);
  }

  template <class Body>
  void ForGroups(int64_t n, int width, const Body& /*body*/) {
    if (n <= 0) return;
    const int64_t groups_per_block = kThreads / (width > 0 ? width : 1);
    Launch<Body>("ForGroupsKernel", (n + groups_per_block - 1) / groups_per_block, kThreads);
  }

  // Block bodies: one launch of n blocks.
  template <class Body>
  void ForBlocks(int64_t n, const Body& /*body*/) {
    if (n > 0) Launch<Body>("BlocksKernel", n, Body::kThreads);
  }

  // One launch of a kernel: counted, and its body's type kept once.
  template <class Body>
  void Launch(const char* launcher, int64_t blocks, int threads) {
    ++plan.launches;
    const std::string body = TypeName<Body>();
    for (KernelLaunch& k : plan.kernels) {
      if (k.body == body && k.launcher == launcher) {
        if (blocks > k.blocks) k.blocks = blocks;
        return;
      }
    }
    plan.kernels.push_back(KernelLaunch{body, launcher, blocks, threads});
  }

  // Addresses that are never dereferenced (no body runs), distinct per buffer.
  template <typename T>
  T* Scratch(int64_t n) {
    const int64_t offset = (plan.scratch_bytes + 255) / 256 * 256;
    plan.scratch_bytes = offset + (n > 0 ? n : 1) * static_cast<int64_t>(sizeof(T));
    return reinterpret_cast<T*>(kBase + static_cast<uintptr_t>(offset));
  }

  void SortPairs(const int32_t*, int32_t*, const int32_t*, int32_t*, int64_t n, int /*key_bits*/) {
    if (n > 0) ++plan.sorts;
  }

  // The success path: every status word kNone; no message.
  std::string Finish(const unsigned long long* /*status*/, int words, const gpu_checks::Message& message) {
    std::vector<unsigned long long> host(2 * words, portable::kNone);
    return message(host.data(), reinterpret_cast<const double*>(host.data() + words));
  }

  // The success path: every status word kNone (all bits set).
  void CopyToHost(void* dst, const void* /*src*/, size_t bytes) {
    if (bytes > 0) ++plan.host_copies;
    ++plan.syncs;
    std::memset(dst, 0xFF, bytes);
  }

  Plan plan;

 private:
  static constexpr uintptr_t kBase = uintptr_t{1} << 20;

  template <class Body>
  static std::string TypeName() {
    int status = 0;
    char* name = abi::__cxa_demangle(typeid(Body).name(), nullptr, nullptr, &status);
    std::string text = status == 0 && name ? name : typeid(Body).name();
    std::free(name);
    return text;
  }

  template <class Body>
  static int64_t ZeroBytes(int64_t, const Body&) {
    return 0;
  }
  template <typename T>
  static int64_t ZeroBytes(int64_t n, const pipeline::Fill<T>& fill) {
    return fill.value == T(0) ? n * static_cast<int64_t>(sizeof(T)) : 0;
  }
  // A fill launched together with another body is counted all the same.
  template <class A, class B>
  static int64_t ZeroBytes(int64_t, const pipeline::Together<A, B>& both) {
    return ZeroBytes(both.a_items, both.a) + ZeroBytes(both.b_items, both.b);
  }
};

}  // namespace keras_trees

#endif  // KERAS_TREES_CORE_LAUNCH_RECORD_H_
