// CPU kernels of random hinge trees and ferns (Lay et al. 2018).
//
// Forward (Algorithm 3): each sample walks each tree from the root, going right
// when r = x[f_v] - t_v > 0, and keeps the signed margin r* of smallest
// magnitude along the path and its vertex v*. The tree outputs
// w_leaf * |r*| (Eq. 10 reduces to this because exactly one leaf term is
// non-zero). A fern uses one (feature, threshold) pair per level instead of one
// per vertex. Cost: O(depth + units) per sample and tree.
//
// Backward (Eq. 11-12): with g = dL/d(output[b, m]) and
// c = sgn(r*) <g, w_leaf> (+ dL/dr* when the margin output is used),
//   dL/dx[b, f_v*] += c,  dL/dt_v* -= c,  dL/dw_leaf += |r*| g.
// Nothing else is touched: O(units) per sample and tree, no re-traversal (the
// forward pass hands over leaf, r* and v*). grad_x is written per sample (phase
// 1, parallel over samples); grad_thresholds and grad_leaf_weights per tree
// (phase 2, parallel over trees, samples summed in order). Each output element
// has one writer and a fixed summation order, so results are identical on every
// run and for every thread count.
#include <atomic>

#include "common.h"

namespace keras_trees {

using ::tensorflow::errors::InvalidArgument;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

namespace {

struct HingeDims {
  int64_t batch = 0;     // samples
  int64_t features = 0;  // input features
  int64_t trees = 0;
  int64_t vertices = 0;  // decisions per tree: 2**depth - 1 (tree) or depth (fern)
  int64_t leaves = 0;    // 2**depth
  int64_t units = 0;
  int depth = 0;
};

// Checks the parameter tensors shared by the forward and backward kernels.
// Errors are recorded on `ctx` (callers test ctx->status()).
void ValidateParameters(OpKernelContext* ctx, bool fern, const Tensor& x, const Tensor& f,
                        const Tensor& w, HingeDims* d) {
  KT_REQUIRE_RANK(ctx, x, 2, "x", "[batch, num_features]");
  KT_REQUIRE_RANK(ctx, f, 2, "feature_indices", "[num_trees, num_vertices]");
  KT_REQUIRE_RANK(ctx, w, 3, "leaf_weights", "[num_trees, 2**depth, units]");
  d->batch = x.dim_size(0);
  d->features = x.dim_size(1);
  d->trees = f.dim_size(0);
  d->vertices = f.dim_size(1);
  d->units = w.dim_size(2);
  if (fern) {
    d->depth = static_cast<int>(std::min<int64_t>(d->vertices, kMaxDepth + 1));
    OP_REQUIRES(ctx, d->vertices >= 1 && d->vertices <= kMaxDepth,
                InvalidArgument("a fern has one threshold per level: thresholds.shape[1] is the "
                                "depth and must be in [1, ", kMaxDepth, "], got ", d->vertices));
  } else {
    d->depth = DepthFromInternalNodes(d->vertices);
    OP_REQUIRES(ctx, d->depth >= 1 && d->depth <= kMaxDepth,
                InvalidArgument("thresholds.shape[1] must be 2**depth - 1 (a perfect tree) with "
                                "1 <= depth <= ", kMaxDepth, ", got ", d->vertices));
  }
  d->leaves = int64_t{1} << d->depth;
  OP_REQUIRES(ctx, w.dim_size(0) == d->trees && w.dim_size(1) == d->leaves,
              InvalidArgument("leaf_weights must have shape [", d->trees, ", ", d->leaves,
                              ", units] for ", d->trees, (fern ? " ferns" : " trees"),
                              " of depth ", d->depth, ", got ", w.shape().DebugString()));
}

// Every feature index must address a column of x.
void ValidateFeatureIndices(OpKernelContext* ctx, const Tensor& f, const HingeDims& d) {
  const int32_t* fd = f.flat<int32_t>().data();
  const int64_t n = d.trees * d.vertices;
  for (int64_t i = 0; i < n; ++i) {
    OP_REQUIRES(ctx, fd[i] >= 0 && fd[i] < d.features,
                InvalidArgument("feature_indices[", i / d.vertices, ", ", i % d.vertices, "] = ",
                                fd[i], " is out of range: x has ", d.features,
                                " features (valid indices are 0..", d.features - 1, ")"));
  }
}

// Algorithm 3 for one perfect tree (heap order). Ties in |r| keep the vertex
// nearest the root; r = 0 goes left.
template <typename T>
inline void TraverseTree(const T* x, const T* t, const int32_t* f, int depth, int32_t* leaf,
                         T* margin, int32_t* vertex) {
  T r = x[f[0]] - t[0];
  T best = r, best_abs = std::abs(r);
  int64_t best_v = 0;
  int64_t v = 1 + (r > T(0));
  for (int i = 1; i < depth; ++i) {
    r = x[f[v]] - t[v];
    const T a = std::abs(r);
    if (a < best_abs) {
      best = r;
      best_abs = a;
      best_v = v;
    }
    v = 2 * v + 1 + (r > T(0));
  }
  *leaf = static_cast<int32_t>(v - ((int64_t{1} << depth) - 1));
  *margin = best;
  *vertex = static_cast<int32_t>(best_v);
}

// The fern variant: level i always tests (f_i, t_i).
template <typename T>
inline void TraverseFern(const T* x, const T* t, const int32_t* f, int depth, int32_t* leaf,
                         T* margin, int32_t* vertex) {
  T r = x[f[0]] - t[0];
  T best = r, best_abs = std::abs(r);
  int32_t best_v = 0;
  int64_t l = (r > T(0));
  for (int i = 1; i < depth; ++i) {
    r = x[f[i]] - t[i];
    const T a = std::abs(r);
    if (a < best_abs) {
      best = r;
      best_abs = a;
      best_v = i;
    }
    l = 2 * l + (r > T(0));
  }
  *leaf = static_cast<int32_t>(l);
  *margin = best;
  *vertex = best_v;
}

template <typename T, bool kFern>
void ForwardRange(int64_t begin, int64_t end, const HingeDims& d, const T* xd, const T* td,
                  const int32_t* fd, const T* wd, T* od, int32_t* leafd, T* margind,
                  int32_t* vertexd) {
  const int64_t k = d.units;
  // Tree-major inside the shard: one tree's vertices stay in L1 while the
  // shard's samples stream past them.
  for (int64_t m = 0; m < d.trees; ++m) {
    const T* tm = td + m * d.vertices;
    const int32_t* fm = fd + m * d.vertices;
    const T* wm = wd + m * d.leaves * k;
    for (int64_t s = begin; s < end; ++s) {
      const int64_t idx = s * d.trees + m;
      int32_t leaf, vertex;
      T margin;
      if (kFern) {
        TraverseFern(xd + s * d.features, tm, fm, d.depth, &leaf, &margin, &vertex);
      } else {
        TraverseTree(xd + s * d.features, tm, fm, d.depth, &leaf, &margin, &vertex);
      }
      leafd[idx] = leaf;
      margind[idx] = margin;
      vertexd[idx] = vertex;
      const T a = std::abs(margin);
      const T* wl = wm + leaf * k;
      T* o = od + idx * k;
      for (int64_t j = 0; j < k; ++j) o[j] = a * wl[j];
    }
  }
}

}  // namespace

template <typename T>
class HingeForestOp : public OpKernel {
 public:
  explicit HingeForestOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("fern", &fern_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& t = ctx->input(1);
    const Tensor& f = ctx->input(2);
    const Tensor& w = ctx->input(3);
    HingeDims d;
    ValidateParameters(ctx, fern_, x, f, w, &d);
    if (!ctx->status().ok()) return;
    OP_REQUIRES(ctx, t.shape() == f.shape(),
                InvalidArgument("thresholds and feature_indices must have the same shape "
                                "[num_trees, num_vertices], got ", t.shape().DebugString(),
                                " and ", f.shape().DebugString()));
    ValidateFeatureIndices(ctx, f, d);
    if (!ctx->status().ok()) return;
    const T* xd = x.flat<T>().data();
    const T* td = t.flat<T>().data();
    OP_REQUIRES(ctx, AllFinite(xd, x.NumElements()),
                InvalidArgument("x contains NaN or Inf; hinge trees need finite inputs"));
    OP_REQUIRES(ctx, AllFinite(td, t.NumElements()),
                InvalidArgument("thresholds contain NaN or Inf (did training diverge?)"));

    Tensor *out = nullptr, *leaf = nullptr, *margin = nullptr, *vertex = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({d.batch, d.trees, d.units}), &out));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({d.batch, d.trees}), &leaf));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({d.batch, d.trees}), &margin));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, TensorShape({d.batch, d.trees}), &vertex));
    const int32_t* fd = f.flat<int32_t>().data();
    const T* wd = w.flat<T>().data();
    T* od = out->flat<T>().data();
    int32_t* leafd = leaf->flat<int32_t>().data();
    T* margind = margin->flat<T>().data();
    int32_t* vertexd = vertex->flat<int32_t>().data();

    // Cycles per sample: a dependent load chain per level, then the leaf copy.
    const int64_t cost = d.trees * (d.depth * 8 + 2 * d.units + 10);
    const bool fern = fern_;
    ParallelFor(ctx, d.batch, cost, [&](int64_t begin, int64_t end) {
      if (fern) {
        ForwardRange<T, true>(begin, end, d, xd, td, fd, wd, od, leafd, margind, vertexd);
      } else {
        ForwardRange<T, false>(begin, end, d, xd, td, fd, wd, od, leafd, margind, vertexd);
      }
    });
  }

 private:
  bool fern_;
};

template <typename T>
class HingeForestGradOp : public OpKernel {
 public:
  explicit HingeForestGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("fern", &fern_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& gy = ctx->input(0);
    const Tensor& gm = ctx->input(1);
    const Tensor& x = ctx->input(2);
    const Tensor& f = ctx->input(3);
    const Tensor& w = ctx->input(4);
    const Tensor& leaf = ctx->input(5);
    const Tensor& margin = ctx->input(6);
    const Tensor& vertex = ctx->input(7);
    HingeDims d;
    ValidateParameters(ctx, fern_, x, f, w, &d);
    if (!ctx->status().ok()) return;
    const TensorShape pairs({d.batch, d.trees});
    OP_REQUIRES(ctx, gy.shape() == TensorShape({d.batch, d.trees, d.units}),
                InvalidArgument("grad_output must have shape [", d.batch, ", ", d.trees, ", ",
                                d.units, "], got ", gy.shape().DebugString()));
    OP_REQUIRES(ctx, gm.shape() == pairs && leaf.shape() == pairs && margin.shape() == pairs &&
                         vertex.shape() == pairs,
                InvalidArgument("grad_margin, leaf, margin and vertex must have shape [", d.batch,
                                ", ", d.trees, "]; pass the outputs of the same forward call"));

    const T* gyd = gy.flat<T>().data();
    const T* gmd = gm.flat<T>().data();
    const int32_t* fd = f.flat<int32_t>().data();
    const T* wd = w.flat<T>().data();
    const int32_t* leafd = leaf.flat<int32_t>().data();
    const T* margind = margin.flat<T>().data();
    const int32_t* vertexd = vertex.flat<int32_t>().data();

    Tensor *gx = nullptr, *gt = nullptr, *gw = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &gx));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, f.shape(), &gt));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, w.shape(), &gw));
    T* gxd = gx->flat<T>().data();
    T* gtd = gt->flat<T>().data();
    T* gwd = gw->flat<T>().data();

    // dL/dr* per (sample, tree), shared by both phases.
    Tensor coeff_t;
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DataTypeToEnum<T>::value, pairs, &coeff_t));
    T* coeff = coeff_t.flat<T>().data();
    const int64_t k = d.units;

    // Phase 1, parallel over samples: dL/dr* and grad_x.
    std::atomic<bool> bad{false};
    ParallelFor(ctx, d.batch, d.trees * (2 * k + 12), [&](int64_t begin, int64_t end) {
      for (int64_t s = begin; s < end; ++s) {
        T* gxs = gxd + s * d.features;
        std::fill(gxs, gxs + d.features, T(0));
        for (int64_t m = 0; m < d.trees; ++m) {
          const int64_t idx = s * d.trees + m;
          const int32_t l = leafd[idx], v = vertexd[idx];
          if (l < 0 || l >= d.leaves || v < 0 || v >= d.vertices) {
            bad = true;
            return;
          }
          const int32_t feature = fd[m * d.vertices + v];
          if (feature < 0 || feature >= d.features) {
            bad = true;
            return;
          }
          const T r = margind[idx];
          const T sign = T((T(0) < r) - (r < T(0)));
          const T c = sign * Dot(gyd + idx * k, wd + (m * d.leaves + l) * k, k) + gmd[idx];
          coeff[idx] = c;
          gxs[feature] += c;
        }
      }
    });
    OP_REQUIRES(ctx, !bad,
                InvalidArgument("leaf, vertex or feature_indices out of range: pass the leaf, "
                                "margin and vertex outputs of the same forward call"));

    // Phase 2, parallel over trees: threshold and leaf gradients, samples in order.
    ParallelFor(ctx, d.trees, d.batch * (2 * k + 6) + d.leaves * k + d.vertices,
                [&](int64_t begin, int64_t end) {
                  for (int64_t m = begin; m < end; ++m) {
                    T* gtm = gtd + m * d.vertices;
                    T* gwm = gwd + m * d.leaves * k;
                    std::fill(gtm, gtm + d.vertices, T(0));
                    std::fill(gwm, gwm + d.leaves * k, T(0));
                    for (int64_t s = 0; s < d.batch; ++s) {
                      const int64_t idx = s * d.trees + m;
                      gtm[vertexd[idx]] -= coeff[idx];
                      Axpy(std::abs(margind[idx]), gyd + idx * k, gwm + leafd[idx] * k, k);
                    }
                  }
                });
  }

 private:
  bool fern_;
};

#define REGISTER_HINGE_FOREST(T)                                                            \
  REGISTER_KERNEL_BUILDER(                                                                  \
      Name("KerasTrees>HingeForest").Device(::tensorflow::DEVICE_CPU).TypeConstraint<T>("T"), \
      HingeForestOp<T>);                                                                    \
  REGISTER_KERNEL_BUILDER(Name("KerasTrees>HingeForestGrad")                               \
                              .Device(::tensorflow::DEVICE_CPU)                             \
                              .TypeConstraint<T>("T"),                                      \
                          HingeForestGradOp<T>);

REGISTER_HINGE_FOREST(float);
REGISTER_HINGE_FOREST(double);

}  // namespace keras_trees
