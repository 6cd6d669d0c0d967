// CPU kernels of the Tree Ensemble Layer: conditional forward pass (Algorithm 1
// of Hazimeh et al. 2020) that records each sample's fractional tree, and the
// conditional backward pass over that record (Algorithm 2, Theorem 1).
//
// Backward formulation. For internal node i reached with probability P(i),
// write h(v) = sum over reachable leaves l below v of P(l)/P(v) <dL/dT, o_l>.
// Then dL/dt_i = P(i) S'(t_i) (h(left) - h(right)) and
// h(i) = S(t_i) h(left) + (1 - S(t_i)) h(right). This equals Theorem 1's
// mu_1 * sum_g(left) - mu_2 * sum_g(right) without dividing by S or 1 - S, so it
// stays exact where S is tiny. Hard-routing nodes drop out (Definition 1): a
// child reached with probability 1 passes h through unchanged.
#include <map>
#include <mutex>
#include <vector>

#include "common.h"

namespace keras_trees {

using ::tensorflow::errors::InvalidArgument;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

namespace {

template <typename T>
struct Record {
  int32_t index;  // internal node i >= 0, or -(leaf + 1)
  T v0;           // internal: P(i) * S'(t_i); leaf: P(l)
  T v1;           // internal: S(t_i); leaf: 0
};

// Walks one tree for one sample. Appends the post-order fractional tree to
// `records` when it is not null, adds the tree's output to `out`, and returns
// the number of records written.
template <typename T>
int64_t WalkTree(const T* x, const T* w, const T* b, const T* o, T gamma,
                 int64_t num_internal, int64_t p, int64_t k, T* out,
                 std::vector<Record<T>>* records) {
  struct Frame {
    int64_t node;
    T prob;
    T s;
    T ds;
    int state;
  };
  Frame stack[kMaxDepth + 2];
  int top = 0;
  stack[0] = {0, T(1), T(0), T(0), 0};
  int64_t written = 0;
  while (top >= 0) {
    Frame& f = stack[top];
    if (f.node >= num_internal) {  // leaf
      const int64_t leaf = f.node - num_internal;
      Axpy(f.prob, o + leaf * k, out, k);
      if (records) records->push_back({static_cast<int32_t>(-(leaf + 1)), f.prob, T(0)});
      ++written;
      --top;
      continue;
    }
    if (f.state == 0) {
      const T t = Dot(w + f.node * p, x, p) + b[f.node];
      T s, ds;
      SmoothStep(t, gamma, &s, &ds);
      if (s >= T(1)) {  // hard left: not in the fractional tree
        f.node = 2 * f.node + 1;
        continue;
      }
      if (!(s > T(0))) {  // hard right (NaN routes right as well)
        f.node = 2 * f.node + 2;
        continue;
      }
      f.s = s;
      f.ds = ds;
      f.state = 1;
      stack[top + 1] = {2 * f.node + 1, f.prob * s, T(0), T(0), 0};
      ++top;
    } else if (f.state == 1) {
      f.state = 2;
      stack[top + 1] = {2 * f.node + 2, f.prob * (T(1) - f.s), T(0), T(0), 0};
      ++top;
    } else {
      if (records) records->push_back({static_cast<int32_t>(f.node), f.prob * f.ds, f.s});
      ++written;
      --top;
    }
  }
  return written;
}

}  // namespace

template <typename T>
class SoftTreeEnsembleOp : public OpKernel {
 public:
  explicit SoftTreeEnsembleOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("with_trace", &with_trace_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& w = ctx->input(1);
    const Tensor& b = ctx->input(2);
    const Tensor& o = ctx->input(3);
    const Tensor& g = ctx->input(4);
    KT_REQUIRE_RANK(ctx, x, 2, "x", "[batch, input_dim]");
    KT_REQUIRE_RANK(ctx, w, 3, "node_weights", "[num_trees, 2**depth - 1, input_dim]");
    KT_REQUIRE_RANK(ctx, o, 3, "leaf_weights", "[num_trees, 2**depth, units]");
    OP_REQUIRES(ctx, g.dims() == 0,
                InvalidArgument("gamma must be a scalar, got shape ", g.shape().DebugString()));
    const int64_t batch = x.dim_size(0), p = x.dim_size(1);
    const int64_t trees = w.dim_size(0), num_internal = w.dim_size(1);
    const int64_t k = o.dim_size(2);
    const int depth = DepthFromInternalNodes(num_internal);
    OP_REQUIRES(ctx, depth >= 1 && depth <= kMaxDepth,
                InvalidArgument("node_weights.shape[1] must be 2**depth - 1 with 1 <= depth <= ",
                                kMaxDepth, ", got ", num_internal));
    OP_REQUIRES(ctx, w.dim_size(2) == p,
                InvalidArgument("node_weights.shape[2] (", w.dim_size(2),
                                ") must equal the input dimension x.shape[1] (", p, ")"));
    OP_REQUIRES(ctx, b.dims() == 2 && b.dim_size(0) == trees && b.dim_size(1) == num_internal,
                InvalidArgument("node_bias must have shape [", trees, ", ", num_internal,
                                "], got ", b.shape().DebugString()));
    OP_REQUIRES(ctx, o.dim_size(0) == trees && o.dim_size(1) == num_internal + 1,
                InvalidArgument("leaf_weights must have shape [", trees, ", ", num_internal + 1,
                                ", units], got ", o.shape().DebugString()));
    const T gamma = g.scalar<T>()();
    OP_REQUIRES(ctx, std::isfinite(gamma) && gamma > T(0),
                InvalidArgument("gamma must be a finite number > 0, got ", gamma));
    const T* xd = x.flat<T>().data();
    OP_REQUIRES(ctx, AllFinite(xd, x.NumElements()),
                InvalidArgument("x contains NaN or Inf; the tree ensemble needs finite inputs"));

    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({batch, k}), &out));
    Tensor* offsets = nullptr;
    const int64_t pairs = with_trace_ ? batch * trees + 1 : 0;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({pairs}), &offsets));
    T* od = out->flat<T>().data();
    std::fill(od, od + batch * k, T(0));
    const T* wd = w.flat<T>().data();
    const T* bd = b.flat<T>().data();
    const T* ld = o.flat<T>().data();

    // Rough cost per sample: a dot product per level per tree plus a leaf update.
    const int64_t cost = trees * (depth * (2 * p + 20) + 2 * k) * 4;

    if (!with_trace_) {
      ParallelFor(ctx, batch, cost, [&](int64_t begin, int64_t end) {
        for (int64_t s = begin; s < end; ++s) {
          for (int64_t m = 0; m < trees; ++m) {
            WalkTree<T>(xd + s * p, wd + m * num_internal * p, bd + m * num_internal,
                        ld + m * (num_internal + 1) * k, gamma, num_internal, p, k, od + s * k,
                        nullptr);
          }
        }
      });
      Tensor* unused = nullptr;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({0}), &unused));
      OP_REQUIRES_OK(ctx, ctx->allocate_output(3, TensorShape({0, 2}), &unused));
      return;
    }

    // Each shard fills one buffer (allocated once per shard, never per sample);
    // buffers are concatenated in sample order, so the trace is deterministic.
    int64_t* off = offsets->flat<int64_t>().data();
    off[0] = 0;
    std::mutex mu;
    std::map<int64_t, std::vector<Record<T>>> chunks;
    ParallelFor(ctx, batch, cost, [&](int64_t begin, int64_t end) {
      std::vector<Record<T>> recs;
      recs.reserve((end - begin) * trees * 4);
      for (int64_t s = begin; s < end; ++s) {
        for (int64_t m = 0; m < trees; ++m) {
          off[s * trees + m + 1] =
              WalkTree<T>(xd + s * p, wd + m * num_internal * p, bd + m * num_internal,
                          ld + m * (num_internal + 1) * k, gamma, num_internal, p, k,
                          od + s * k, &recs);
        }
      }
      std::lock_guard<std::mutex> lock(mu);
      chunks.emplace(begin, std::move(recs));
    });
    for (int64_t i = 1; i < pairs; ++i) off[i] += off[i - 1];
    const int64_t total = off[pairs - 1];
    Tensor* index = nullptr;
    Tensor* value = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({total}), &index));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, TensorShape({total, 2}), &value));
    int32_t* id = index->flat<int32_t>().data();
    T* vd = value->flat<T>().data();
    int64_t pos = 0;
    for (auto& chunk : chunks) {
      for (const Record<T>& r : chunk.second) {
        id[pos] = r.index;
        vd[2 * pos] = r.v0;
        vd[2 * pos + 1] = r.v1;
        ++pos;
      }
    }
  }

 private:
  bool with_trace_;
};

template <typename T>
class SoftTreeEnsembleGradOp : public OpKernel {
 public:
  explicit SoftTreeEnsembleGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& gy = ctx->input(0);
    const Tensor& x = ctx->input(1);
    const Tensor& w = ctx->input(2);
    const Tensor& o = ctx->input(3);
    const Tensor& offsets = ctx->input(4);
    const Tensor& index = ctx->input(5);
    const Tensor& value = ctx->input(6);
    OP_REQUIRES(ctx, x.dims() == 2 && w.dims() == 3 && o.dims() == 3 && gy.dims() == 2,
                InvalidArgument("SoftTreeEnsembleGrad: x and grad_output must have rank 2, "
                                "node_weights and leaf_weights rank 3"));
    const int64_t batch = x.dim_size(0), p = x.dim_size(1);
    const int64_t trees = w.dim_size(0), num_internal = w.dim_size(1);
    const int64_t num_leaves = num_internal + 1, k = o.dim_size(2);
    const int depth = DepthFromInternalNodes(num_internal);
    OP_REQUIRES(ctx, depth >= 1 && depth <= kMaxDepth && w.dim_size(2) == p &&
                         o.dim_size(0) == trees && o.dim_size(1) == num_leaves,
                InvalidArgument("SoftTreeEnsembleGrad: inconsistent parameter shapes"));
    OP_REQUIRES(ctx, gy.dim_size(0) == batch && gy.dim_size(1) == k,
                InvalidArgument("grad_output must have shape [", batch, ", ", k, "], got ",
                                gy.shape().DebugString()));
    OP_REQUIRES(ctx, offsets.dims() == 1 && offsets.dim_size(0) == batch * trees + 1,
                InvalidArgument("trace_offsets must have ", batch * trees + 1,
                                " entries; pass the trace of the same forward call"));
    const int64_t total = index.NumElements();
    OP_REQUIRES(ctx, value.dims() == 2 && value.dim_size(0) == total && value.dim_size(1) == 2,
                InvalidArgument("trace_value must have shape [", total, ", 2]"));
    const int64_t* off = offsets.flat<int64_t>().data();
    for (int64_t i = 0; i < batch * trees; ++i) {
      OP_REQUIRES(ctx, off[i] <= off[i + 1] && off[i + 1] - off[i] < 2 * num_leaves,
                  InvalidArgument("trace_offsets is not a trace of this tree ensemble"));
    }
    OP_REQUIRES(ctx, off[0] == 0 && off[batch * trees] == total,
                InvalidArgument("trace_offsets does not match trace_index"));

    const T* gyd = gy.flat<T>().data();
    const T* xd = x.flat<T>().data();
    const T* wd = w.flat<T>().data();
    const T* ld = o.flat<T>().data();
    const int32_t* id = index.flat<int32_t>().data();
    const T* vd = value.flat<T>().data();

    Tensor *gx = nullptr, *gw = nullptr, *gb = nullptr, *go = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &gx));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, w.shape(), &gw));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({trees, num_internal}), &gb));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, o.shape(), &go));
    T* gxd = gx->flat<T>().data();
    T* gwd = gw->flat<T>().data();
    T* gbd = gb->flat<T>().data();
    T* god = go->flat<T>().data();

    // Phase 1, parallel over samples: evaluate each fractional tree bottom-up,
    // write dL/dx and keep dL/dt_i per internal record for phase 2.
    Tensor coeff_t;
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DataTypeToEnum<T>::value,
                                           TensorShape({total}), &coeff_t));
    T* coeff = coeff_t.flat<T>().data();
    std::atomic<bool> bad{false};
    const int64_t mean_recs = batch * trees > 0 ? total / (batch * trees) + 1 : 1;
    ParallelFor(ctx, batch, trees * mean_recs * (p + k) * 3, [&](int64_t begin, int64_t end) {
      T stack[kMaxDepth + 2];
      for (int64_t s = begin; s < end; ++s) {
        T* gxs = gxd + s * p;
        std::fill(gxs, gxs + p, T(0));
        const T* gys = gyd + s * k;
        for (int64_t m = 0; m < trees; ++m) {
          const T* wm = wd + m * num_internal * p;
          const T* lm = ld + m * num_leaves * k;
          int top = -1;
          for (int64_t r = off[s * trees + m]; r < off[s * trees + m + 1]; ++r) {
            const int32_t idx = id[r];
            if (idx < 0) {
              const int64_t leaf = -static_cast<int64_t>(idx) - 1;
              if (leaf >= num_leaves || top + 1 > kMaxDepth) { bad = true; return; }
              stack[++top] = Dot(gys, lm + leaf * k, k);
              coeff[r] = vd[2 * r];
            } else {
              if (idx >= num_internal || top < 1) { bad = true; return; }
              const T hr = stack[top--];
              const T hl = stack[top];
              const T c = vd[2 * r] * (hl - hr);
              const T sv = vd[2 * r + 1];
              coeff[r] = c;
              Axpy(c, wm + idx * p, gxs, p);
              stack[top] = sv * hl + (T(1) - sv) * hr;
            }
          }
          if (top != 0 && off[s * trees + m + 1] > off[s * trees + m]) { bad = true; return; }
        }
      }
    });
    OP_REQUIRES(ctx, !bad, InvalidArgument("trace_index/trace_value are not a valid trace"));

    // Phase 2, parallel over (tree, column block): scatter parameter gradients
    // in sample order, so sums are identical on every run and thread count.
    const int64_t blocks =
        std::max<int64_t>(1, std::min<int64_t>((NumThreads(ctx) + trees - 1) / trees,
                                               std::max<int64_t>(1, std::min(p, k) / 8)));
    const int64_t items = trees * blocks;
    ParallelFor(ctx, items, mean_recs * batch * (p + k) / blocks + 1, [&](int64_t begin,
                                                                         int64_t end) {
      for (int64_t it = begin; it < end; ++it) {
        const int64_t m = it / blocks, blk = it % blocks;
        const int64_t p0 = p * blk / blocks, p1 = p * (blk + 1) / blocks;
        const int64_t k0 = k * blk / blocks, k1 = k * (blk + 1) / blocks;
        T* gwm = gwd + m * num_internal * p;
        T* gom = god + m * num_leaves * k;
        T* gbm = gbd + m * num_internal;
        for (int64_t n = 0; n < num_internal; ++n) {
          std::fill(gwm + n * p + p0, gwm + n * p + p1, T(0));
        }
        for (int64_t l = 0; l < num_leaves; ++l) {
          std::fill(gom + l * k + k0, gom + l * k + k1, T(0));
        }
        if (blk == 0) std::fill(gbm, gbm + num_internal, T(0));
        for (int64_t s = 0; s < batch; ++s) {
          const T* xs = xd + s * p;
          const T* gys = gyd + s * k;
          for (int64_t r = off[s * trees + m]; r < off[s * trees + m + 1]; ++r) {
            const int32_t idx = id[r];
            if (idx < 0) {
              const int64_t leaf = -static_cast<int64_t>(idx) - 1;
              Axpy(coeff[r], gys + k0, gom + leaf * k + k0, k1 - k0);
            } else {
              Axpy(coeff[r], xs + p0, gwm + idx * p + p0, p1 - p0);
              if (blk == 0) gbm[idx] += coeff[r];
            }
          }
        }
      }
    });
  }
};

#define REGISTER_TREE_ENSEMBLE(T)                                                         \
  REGISTER_KERNEL_BUILDER(                                                                \
      Name("KerasTrees>SoftTreeEnsemble").Device(::tensorflow::DEVICE_CPU).TypeConstraint<T>("T"), \
      SoftTreeEnsembleOp<T>);                                                             \
  REGISTER_KERNEL_BUILDER(Name("KerasTrees>SoftTreeEnsembleGrad")                        \
                              .Device(::tensorflow::DEVICE_CPU)                           \
                              .TypeConstraint<T>("T"),                                    \
                          SoftTreeEnsembleGradOp<T>);

REGISTER_TREE_ENSEMBLE(float);
REGISTER_TREE_ENSEMBLE(double);

}  // namespace keras_trees
