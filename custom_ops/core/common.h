// Framework-free helpers shared by the kernel cores: the parallel-for interface,
// tree-shape helpers, the smooth-step activation and small dense loops.
//
// Nothing here (or anywhere in custom_ops/core/) may include a TensorFlow, XLA
// or CUDA header: the cores are plain C++ over raw pointers and int64 sizes,
// and each framework (custom_ops/tensorflow/, later XLA FFI and CUDA) adapts
// its tensors, errors and thread pool to them. tests/test_build.py compiles
// the cores alone to keep it that way.
#ifndef KERAS_TREES_CORE_COMMON_H_
#define KERAS_TREES_CORE_COMMON_H_

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <utility>

#include "core/portable.h"  // KT_HOST_DEVICE, kMaxDepth, DepthFromInternalNodes

namespace keras_trees {

// The error of a non-finite split value on a sample's path, of hard routing
// and loss-augmented inference (the same text as the keras.ops reference).
inline const char* kSplitValueOverflow =
    "x: a split value on the path of a sample is not finite (<w, x> + b overflows the range "
    "of the dtype of x); the inputs or the split parameters are too large: scale the inputs (e.g. "
    "standardize them) or compute in float64";


// fn(begin, end) processes the items [begin, end).
using RangeFn = std::function<void(int64_t begin, int64_t end)>;

// The parallel-for the cores run on. The framework supplies `run`, which must
// call fn over disjoint ranges covering [0, n) (in any order, on any threads)
// and return when all are done; `cost_per_unit` is a rough count of cycles per
// item to size the ranges. `num_threads` is a hint some cores use to split work
// finer than one item per tree. Results never depend on how [0, n) is split or
// on the thread count: every output element has one writer and a fixed
// summation order. An empty `run` executes serially on the calling thread.
//
// An exception thrown by fn on any thread (std::bad_alloc when a core's
// scratch memory cannot be had) is caught there, the remaining ranges are
// skipped, and the first one is rethrown on the calling thread once `run`
// returns: it never escapes into a framework's worker thread (which would
// abort the process). The adapters turn it into the framework's
// out-of-memory error (tensorflow/kernel_utils.h, xla/ffi_utils.h).
struct ParallelFor {
  std::function<void(int64_t n, int64_t cost_per_unit, const RangeFn& fn)> run;
  int num_threads = 1;

  void operator()(int64_t n, int64_t cost_per_unit, const RangeFn& fn) const {
    if (n <= 0) return;
    if (!run) {
      fn(0, n);
      return;
    }
    std::mutex mu;
    std::exception_ptr error;
    std::atomic<bool> failed{false};
    run(n, std::max<int64_t>(cost_per_unit, 1), [&](int64_t begin, int64_t end) {
      if (failed.load(std::memory_order_relaxed)) return;
      try {
        fn(begin, end);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!error) error = std::current_exception();
        failed.store(true);
      }
    });
    if (error) std::rethrow_exception(error);
  }
};

// Numerically stable softplus log(1 + exp(z)): no overflow for large |z|.
template <typename T>
KT_HOST_DEVICE inline T Softplus(T z) {
  return z > T(0) ? z + std::log1p(std::exp(-z)) : std::log1p(std::exp(z));
}

// Dot product. `omp simd` (compiled with -fopenmp-simd, no OpenMP runtime)
// lets the compiler vectorize the reduction in a fixed order, so results are
// the same on every run.
template <typename T>
inline T Dot(const T* a, const T* b, int64_t n) {
  T s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// y += alpha * x
template <typename T>
inline void Axpy(T alpha, const T* x, T* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

// Whether every value is finite. Branch-free and vectorized: x * 0 is 0 for a
// finite x and NaN for Inf or NaN, so a block's sum of them is NaN exactly when
// the block holds a non-finite value (the build has no -ffast-math, which
// would fold x * 0). About 9x faster than a std::isfinite loop with an early
// exit, so the input checks (x and every parameter on each call) stay a small
// fraction of a kernel's time.
template <typename T>
inline bool AllFinite(const T* data, int64_t n) {
  constexpr int64_t kBlock = 1024;
  for (int64_t begin = 0; begin < n; begin += kBlock) {
    const int64_t end = begin + kBlock < n ? begin + kBlock : n;
    T acc = 0;
#pragma omp simd reduction(+ : acc)
    for (int64_t i = begin; i < end; ++i) acc += data[i] * T(0);
    if (acc != acc) return false;
  }
  return true;
}

}  // namespace keras_trees

#endif  // KERAS_TREES_CORE_COMMON_H_
