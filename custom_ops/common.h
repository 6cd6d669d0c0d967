// Shared helpers for the keras-trees kernels: validation macros, the smooth-step
// activation, small dense loops and deterministic sample sharding.
#ifndef KERAS_TREES_COMMON_H_
#define KERAS_TREES_COMMON_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/util/work_sharder.h"

namespace keras_trees {

// Deepest perfect tree any kernel accepts. 2**24 leaves per tree is far beyond
// anything that fits in memory together with its split weights; the Python
// layers refuse much earlier with a memory estimate.
constexpr int kMaxDepth = 24;

// Returns the depth d of a perfect binary tree with `num_internal` = 2**d - 1
// internal nodes, or -1 when `num_internal` is not of that form.
inline int DepthFromInternalNodes(int64_t num_internal) {
  if (num_internal < 1) return -1;
  const int64_t leaves = num_internal + 1;
  if ((leaves & (leaves - 1)) != 0) return -1;
  int d = 0;
  while ((int64_t{1} << d) < leaves) ++d;
  return d;
}

// Smooth-step of Hazimeh et al. (2020), Eq. 4: 0 below -gamma/2, 1 above
// gamma/2, the cubic -2 t^3 / gamma^3 + 3 t / (2 gamma) + 1/2 in between.
// Clamped to [0, 1] so round-off near the ends never leaves the interval.
template <typename T>
inline void SmoothStep(T t, T gamma, T* s, T* ds) {
  const T half = gamma * T(0.5);
  if (t <= -half) {
    *s = T(0);
    *ds = T(0);
  } else if (t >= half) {
    *s = T(1);
    *ds = T(0);
  } else {
    const T inv = T(1) / gamma;
    const T u = t * inv;
    const T v = T(-2) * u * u * u + T(1.5) * u + T(0.5);
    *s = std::min(T(1), std::max(T(0), v));
    *ds = (T(-6) * u * u + T(1.5)) * inv;
  }
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

template <typename T>
inline bool AllFinite(const T* data, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(data[i])) return false;
  }
  return true;
}

// Runs fn(begin, end) over [0, total) on TensorFlow's intra-op thread pool.
// `cost_per_unit` is a rough count of cycles per item.
inline void ParallelFor(tensorflow::OpKernelContext* ctx, int64_t total,
                        int64_t cost_per_unit,
                        const std::function<void(int64_t, int64_t)>& fn) {
  if (total <= 0) return;
  auto* workers = ctx->device()->tensorflow_cpu_worker_threads();
  tensorflow::Shard(workers->num_threads, workers->workers, total,
                    std::max<int64_t>(cost_per_unit, 1), fn);
}

// Numerically stable softplus log(1 + exp(z)): no overflow for large |z|.
template <typename T>
inline T Softplus(T z) {
  return z > T(0) ? z + std::log1p(std::exp(-z)) : std::log1p(std::exp(z));
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

inline int NumThreads(tensorflow::OpKernelContext* ctx) {
  return ctx->device()->tensorflow_cpu_worker_threads()->num_threads;
}

}  // namespace keras_trees

#endif  // KERAS_TREES_COMMON_H_
