// Helpers of the TensorFlow adapter kernels: the core's parallel-for served by
// TensorFlow's intra-op thread pool, and the shared input checks of
// core/checks.h raised as TensorFlow errors. The arithmetic lives in
// custom_ops/core/.
#ifndef KERAS_TREES_TENSORFLOW_KERNEL_UTILS_H_
#define KERAS_TREES_TENSORFLOW_KERNEL_UTILS_H_

#include <algorithm>
#include <cstdint>
#include <exception>
#include <functional>
#include <new>
#include <string>

#include "core/checks.h"
#include "core/common.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/util/work_sharder.h"

namespace keras_trees {

// The core's parallel-for on TensorFlow's intra-op thread pool (Shard).
inline ParallelFor CpuParallelFor(tensorflow::OpKernelContext* ctx) {
  auto* workers = ctx->device()->tensorflow_cpu_worker_threads();
  ParallelFor parallel_for;
  parallel_for.num_threads = workers->num_threads;
  parallel_for.run = [workers](int64_t n, int64_t cost_per_unit, const RangeFn& fn) {
    tensorflow::Shard(workers->num_threads, workers->workers, n, cost_per_unit, fn);
  };
  return parallel_for;
}

// Every kernel is registered as Guarded<Kernel>: its Compute runs inside a
// handler that turns a C++ exception from the core (std::bad_alloc when its
// scratch memory cannot be had, rethrown on this thread by ParallelFor from
// whichever worker hit it) into a TensorFlow error (ResourceExhaustedError in
// Python) instead of aborting the process.
template <class Kernel>
class Guarded : public Kernel {
 public:
  using Kernel::Kernel;

  void Compute(tensorflow::OpKernelContext* ctx) override {
    try {
      Kernel::Compute(ctx);
    } catch (const std::bad_alloc&) {
      ctx->CtxFailure(tensorflow::errors::ResourceExhausted(
          this->type_string(), ": out of memory for the kernel's working memory; use a smaller batch"));
    } catch (const std::exception& e) {
      ctx->CtxFailure(tensorflow::errors::Internal(this->type_string(), ": ", e.what()));
    }
  }
};

// The dimensions of a tensor, for the shared checks of core/checks.h.
inline Shape ShapeOf(const tensorflow::Tensor& t) {
  Shape s(t.dims());
  for (int i = 0; i < t.dims(); ++i) s[i] = t.dim_size(i);
  return s;
}

// Fails the op with InvalidArgument and returns from the calling function when
// a check of core/checks.h returned a message.
// (Variadic, so a check with template arguments needs no extra parentheses.)
#define KT_OP_REQUIRES_CHECK(ctx, ...)                                             \
  do {                                                                             \
    const std::string kt_message_ = (__VA_ARGS__);                                 \
    OP_REQUIRES(ctx, kt_message_.empty(), ::tensorflow::errors::InvalidArgument(kt_message_)); \
  } while (0)

}  // namespace keras_trees

#endif  // KERAS_TREES_TENSORFLOW_KERNEL_UTILS_H_
