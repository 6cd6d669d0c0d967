// CPU kernel of KerasTrees>HardRouting: every sample follows one root-to-leaf
// path per tree, so a tree of depth d costs at most d dot products per sample.
// Parallel over samples; each output element is written by exactly one shard,
// so results do not depend on the thread count.
#include <algorithm>
#include <utility>
#include <vector>

#include "common.h"

namespace keras_trees {

using ::tensorflow::errors::InvalidArgument;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

// Samples routed through one tree before moving to the next (per shard).
// 512 samples of 64 float inputs are 128 KiB: with the rows of one tree
// (256 KiB at depth 10) they stay in L2.
constexpr int64_t kChunk = 512;

// Four dot products <w[q], x[q]> of length n at once.
template <typename T>
inline void Dot4(const T* const* w, const T* const* x, int64_t n, T* out) {
  const T* __restrict w0 = w[0];
  const T* __restrict w1 = w[1];
  const T* __restrict w2 = w[2];
  const T* __restrict w3 = w[3];
  const T* __restrict x0 = x[0];
  const T* __restrict x1 = x[1];
  const T* __restrict x2 = x[2];
  const T* __restrict x3 = x[3];
  T s0 = 0, s1 = 0, s2 = 0, s3 = 0;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
  for (int64_t k = 0; k < n; ++k) {
    s0 += w0[k] * x0[k];
    s1 += w1[k] * x1[k];
    s2 += w2[k] * x2[k];
    s3 += w3[k] * x3[k];
  }
  out[0] = s0;
  out[1] = s1;
  out[2] = s2;
  out[3] = s3;
}

template <typename T>
class HardRoutingOp : public OpKernel {
 public:
  explicit HardRoutingOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("with_path_values", &with_path_values_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& w = ctx->input(1);
    const Tensor& b = ctx->input(2);
    const Tensor& m = ctx->input(3);
    OP_REQUIRES(ctx, x.dims() == 2,
                InvalidArgument("x must have rank 2 [batch, input_dim], got shape ",
                                x.shape().DebugString()));
    OP_REQUIRES(ctx, w.dims() == 3,
                InvalidArgument("split_weights must have rank 3 [num_trees, 2**depth - 1, "
                                "input_dim], got shape ", w.shape().DebugString()));
    const int64_t batch = x.dim_size(0), p = x.dim_size(1);
    const int64_t trees = w.dim_size(0), num_internal = w.dim_size(1);
    const int depth = DepthFromInternalNodes(num_internal);
    OP_REQUIRES(ctx, depth >= 1 && depth <= kMaxDepth,
                InvalidArgument("split_weights.shape[1] must be 2**depth - 1 with 1 <= depth <= ",
                                kMaxDepth, ", got ", num_internal));
    OP_REQUIRES(ctx, w.dim_size(2) == p,
                InvalidArgument("split_weights.shape[2] (", w.dim_size(2),
                                ") must equal the input dimension x.shape[1] (", p, ")"));
    OP_REQUIRES(ctx, b.dims() == 2 && b.dim_size(0) == trees && b.dim_size(1) == num_internal,
                InvalidArgument("split_bias must have shape [", trees, ", ", num_internal,
                                "], got ", b.shape().DebugString()));
    OP_REQUIRES(ctx, m.dims() == 2 && m.dim_size(0) == trees && m.dim_size(1) == num_internal,
                InvalidArgument("is_split must have shape [", trees, ", ", num_internal,
                                "], got ", m.shape().DebugString()));
    const T* xd = x.flat<T>().data();
    OP_REQUIRES(ctx, AllFinite(xd, x.NumElements()),
                InvalidArgument("x contains NaN or Inf; hard routing needs finite inputs"));

    Tensor* node_t = nullptr;
    Tensor* path_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({batch, trees}), &node_t));
    const int64_t levels = with_path_values_ ? depth : 0;
    OP_REQUIRES_OK(ctx,
                   ctx->allocate_output(1, TensorShape({batch, trees, levels}), &path_t));
    int32_t* nd = node_t->flat<int32_t>().data();
    T* pd = path_t->flat<T>().data();
    const T* wd = w.flat<T>().data();
    const T* bd = b.flat<T>().data();
    const bool* md = m.flat<bool>().data();

    // Loop order for cache locality: each shard takes a range of samples and,
    // chunk by chunk, routes all of them through one tree before the next, so
    // the tree's split weights (the rows its paths visit) are reused from cache
    // by every sample of the chunk while the chunk's inputs stay in L1/L2.
    // Within a tree, samples advance level by level through a compact list of
    // those still at a split, four at a time (Dot4: independent accumulators,
    // so the CPU overlaps four dot products instead of waiting on one chain of
    // dependent FMAs; every split value goes through the same Dot4 code, so a
    // sample's result does not depend on which samples share its group).
    const int64_t chunk_size = kChunk;
    const int64_t cost = trees * depth * (2 * p + 16);
    ParallelFor(ctx, batch, cost, [&](int64_t begin, int64_t end) {
      std::vector<int32_t> node(chunk_size), active(chunk_size), next(chunk_size);
      for (int64_t c0 = begin; c0 < end; c0 += chunk_size) {
        const int64_t count = std::min(chunk_size, end - c0);
        const T* xc = xd + c0 * p;
        for (int64_t t = 0; t < trees; ++t) {
          const T* wt = wd + t * num_internal * p;
          const T* bt = bd + t * num_internal;
          const bool* mt = md + t * num_internal;
          if (levels) {
            for (int64_t i = 0; i < count; ++i) {
              std::fill_n(pd + ((c0 + i) * trees + t) * levels, levels, T(0));
            }
          }
          int64_t num_active = 0;
          for (int64_t i = 0; i < count; ++i) {
            node[i] = 0;
            if (mt[0]) active[num_active++] = static_cast<int32_t>(i);
          }
          for (int level = 0; level < depth && num_active > 0; ++level) {
            int64_t num_next = 0;
            for (int64_t j = 0; j < num_active; j += 4) {
              const int64_t valid = std::min<int64_t>(4, num_active - j);
              int32_t idx[4];
              const T* wr[4];
              const T* xr[4];
              for (int q = 0; q < 4; ++q) {
                idx[q] = active[j + std::min<int64_t>(q, valid - 1)];  // pad with the last
                wr[q] = wt + static_cast<int64_t>(node[idx[q]]) * p;
                xr[q] = xc + static_cast<int64_t>(idx[q]) * p;
              }
              T v[4];
              Dot4(wr, xr, p, v);
              for (int q = 0; q < valid; ++q) {
                const int32_t i = idx[q];
                const int32_t n = node[i];
                const T value = v[q] + bt[n];
                if (levels) pd[((c0 + i) * trees + t) * levels + level] = value;
                const int32_t child = value > T(0) ? 2 * n + 2 : 2 * n + 1;
                node[i] = child;
                if (child < num_internal && mt[child]) next[num_next++] = i;
              }
            }
            std::swap(active, next);
            num_active = num_next;
          }
          for (int64_t i = 0; i < count; ++i) nd[(c0 + i) * trees + t] = node[i];
        }
      }
    });
  }

 private:
  bool with_path_values_;
};

#define REGISTER_HARD_ROUTING(T)                                                 \
  REGISTER_KERNEL_BUILDER(Name("KerasTrees>HardRouting")                         \
                              .Device(::tensorflow::DEVICE_CPU)                  \
                              .TypeConstraint<T>("T"),                           \
                          HardRoutingOp<T>);

REGISTER_HARD_ROUTING(float);
REGISTER_HARD_ROUTING(double);

}  // namespace keras_trees
