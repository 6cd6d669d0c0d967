// Helpers of the TensorFlow adapter kernels: the core's parallel-for served by
// TensorFlow's intra-op thread pool, and input validation with TensorFlow
// errors. The arithmetic lives in custom_ops/core/.
#ifndef KERAS_TREES_TENSORFLOW_KERNEL_UTILS_H_
#define KERAS_TREES_TENSORFLOW_KERNEL_UTILS_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <initializer_list>

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

// Fails the op and returns from the calling function unless `t` has rank
// `rank`; the message names the argument and its layout, e.g.
// KT_REQUIRE_RANK(ctx, x, 2, "x", "[batch, input_dim]").
#define KT_REQUIRE_RANK(ctx, t, rank, name, layout)                                   \
  OP_REQUIRES(ctx, (t).dims() == (rank),                                             \
              ::tensorflow::errors::InvalidArgument(name, " must have rank ", rank, " ", \
                                                    layout, ", got shape ",           \
                                                    (t).shape().DebugString()))

// Checks shared by the hard-routing kernels (plain oblique and experts form):
// x is a finite [batch, input_dim] matrix, split parameters have
// [num_trees, 2**depth - 1, ...] leading dimensions and is_split matches them.
// Sets *depth; returns false (with the error set on ctx) otherwise.
inline bool ValidateRoutingInputs(tensorflow::OpKernelContext* ctx,
                                  const tensorflow::Tensor& x,
                                  const tensorflow::Tensor& w, int weight_rank,
                                  const tensorflow::Tensor& is_split, int* depth) {
  using ::tensorflow::errors::InvalidArgument;
  if (x.dims() != 2) {
    ctx->CtxFailure(InvalidArgument("x must have rank 2 [batch, input_dim], got shape ",
                                    x.shape().DebugString()));
    return false;
  }
  if (w.dims() != weight_rank) {
    ctx->CtxFailure(InvalidArgument(
        "split_weights must have rank ", weight_rank,
        weight_rank == 3 ? " [num_trees, 2**depth - 1, input_dim]"
                         : " [num_trees, 2**depth - 1, num_experts, input_dim]",
        ", got shape ", w.shape().DebugString()));
    return false;
  }
  const int64_t trees = w.dim_size(0), num_internal = w.dim_size(1);
  *depth = DepthFromInternalNodes(num_internal);
  if (*depth < 1 || *depth > kMaxDepth) {
    ctx->CtxFailure(InvalidArgument("split_weights.shape[1] must be 2**depth - 1 with 1 <= depth <= ",
                                    kMaxDepth, ", got ", num_internal));
    return false;
  }
  const int64_t p = x.dim_size(1);
  if (w.dim_size(weight_rank - 1) != p) {
    ctx->CtxFailure(InvalidArgument("split_weights.shape[", weight_rank - 1, "] (",
                                    w.dim_size(weight_rank - 1),
                                    ") must equal the input dimension x.shape[1] (", p, ")"));
    return false;
  }
  if (!(is_split.dims() == 2 && is_split.dim_size(0) == trees &&
        is_split.dim_size(1) == num_internal)) {
    ctx->CtxFailure(InvalidArgument("is_split must have shape [", trees, ", ", num_internal,
                                    "], got ", is_split.shape().DebugString()));
    return false;
  }
  return true;
}

// Checks that `t` has exactly the shape `dims` (error names the argument).
inline bool ValidateShape(tensorflow::OpKernelContext* ctx, const tensorflow::Tensor& t,
                          const char* name, std::initializer_list<int64_t> dims) {
  tensorflow::TensorShape want(dims);
  if (t.shape() != want) {
    ctx->CtxFailure(tensorflow::errors::InvalidArgument(name, " must have shape ",
                                                        want.DebugString(), ", got ",
                                                        t.shape().DebugString()));
    return false;
  }
  return true;
}

}  // namespace keras_trees

#endif  // KERAS_TREES_TENSORFLOW_KERNEL_UTILS_H_
