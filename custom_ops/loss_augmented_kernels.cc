// CPU kernel of KerasTrees>LossAugmentedInference (non-greedy trees, Norouzi et
// al. 2015, Section 6). Parallel over samples; each output element is written
// by exactly one shard, so results do not depend on the thread count.
//
// Notation: a sample at internal node i with split value v goes right iff
// v > 0. Following direction s in {-1 (left), +1 (right)} at i adds
// s * v - |v| to g^T v - h^T v (0 when s agrees with sgn(v), -2|v| otherwise):
// left adds -v - |v|, right adds v - |v| (LeftCost / RightCost, the same
// floating-point expressions as the keras.ops reference).
#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common.h"

namespace keras_trees {

using ::tensorflow::DataTypeToEnum;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::errors::InvalidArgument;

template <typename T>
inline T LeftCost(T v) { return -v - std::abs(v); }
template <typename T>
inline T RightCost(T v) { return v - std::abs(v); }

// Candidate leaf `c` with `score` replaces the current best unless it is worse;
// ties keep the h leaf, otherwise the smallest leaf index.
template <typename T>
inline void Consider(int64_t c, T score, int64_t h_leaf, int64_t* best, T* best_score) {
  if (score > *best_score ||
      (score == *best_score && *best != h_leaf && c < *best)) {
    *best = c;
    *best_score = score;
  }
}

template <typename T, typename TL>
class LossAugmentedInferenceOp : public OpKernel {
 public:
  explicit LossAugmentedInferenceOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    std::string loss;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("loss", &loss));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("fast", &fast_));
    log_loss_ = loss == "log";
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& w = ctx->input(1);
    const Tensor& b = ctx->input(2);
    const Tensor& theta = ctx->input(3);
    const Tensor& y = ctx->input(4);
    KT_REQUIRE_RANK(ctx, x, 2, "x", "[batch, input_dim]");
    KT_REQUIRE_RANK(ctx, w, 2, "split_weights", "[2**depth - 1, input_dim]");
    const int64_t batch = x.dim_size(0), p = x.dim_size(1);
    const int64_t num_internal = w.dim_size(0);
    const int depth = DepthFromInternalNodes(num_internal);
    OP_REQUIRES(ctx, depth >= 1 && depth <= kMaxDepth,
                InvalidArgument("split_weights.shape[0] must be 2**depth - 1 with 1 <= depth <= ",
                                kMaxDepth, ", got ", num_internal));
    OP_REQUIRES(ctx, w.dim_size(1) == p,
                InvalidArgument("split_weights.shape[1] (", w.dim_size(1),
                                ") must equal the input dimension x.shape[1] (", p, ")"));
    OP_REQUIRES(ctx, b.dims() == 1 && b.dim_size(0) == num_internal,
                InvalidArgument("split_bias must have shape [", num_internal, "], got ",
                                b.shape().DebugString()));
    const int64_t num_leaves = num_internal + 1;
    OP_REQUIRES(ctx, theta.dims() == 2 && theta.dim_size(0) == num_leaves && theta.dim_size(1) >= 1,
                InvalidArgument("leaf_values must have shape [", num_leaves, ", K >= 1], got ",
                                theta.shape().DebugString()));
    const int64_t k = theta.dim_size(1);
    if (log_loss_) {
      OP_REQUIRES(ctx, (DataTypeToEnum<TL>::value == ::tensorflow::DT_INT32),
                  InvalidArgument("loss='log' needs int32 class labels"));
      OP_REQUIRES(ctx, y.dims() == 1 && y.dim_size(0) == batch,
                  InvalidArgument("labels must have shape [", batch, "] for loss='log', got ",
                                  y.shape().DebugString()));
    } else {
      OP_REQUIRES(ctx, (DataTypeToEnum<TL>::value == DataTypeToEnum<T>::value),
                  InvalidArgument("loss='squared' needs targets of the same dtype as x"));
      OP_REQUIRES(ctx, y.dims() == 2 && y.dim_size(0) == batch && y.dim_size(1) == k,
                  InvalidArgument("targets must have shape [", batch, ", ", k,
                                  "] for loss='squared', got ", y.shape().DebugString()));
    }
    const T* xd = x.flat<T>().data();
    const T* wd = w.flat<T>().data();
    const T* bd = b.flat<T>().data();
    const T* td = theta.flat<T>().data();
    const TL* yd = y.flat<TL>().data();
    OP_REQUIRES(ctx, AllFinite(xd, x.NumElements()),
                InvalidArgument("x contains NaN or Inf; loss-augmented inference needs finite inputs"));
    OP_REQUIRES(ctx, AllFinite(wd, w.NumElements()) && AllFinite(bd, b.NumElements()),
                InvalidArgument("split_weights or split_bias contain NaN or Inf"));
    OP_REQUIRES(ctx, AllFinite(td, theta.NumElements()),
                InvalidArgument("leaf_values contain NaN or Inf"));
    if (log_loss_) {
      for (int64_t i = 0; i < batch; ++i) {
        const int64_t label = static_cast<int64_t>(yd[i]);
        OP_REQUIRES(ctx, label >= 0 && label < k,
                    InvalidArgument("labels[", i, "] = ", label, " is outside [0, ", k, ")"));
      }
    } else {
      OP_REQUIRES(ctx, AllFinite(yd, y.NumElements()),
                  InvalidArgument("targets contain NaN or Inf"));
    }

    Tensor *g_t = nullptr, *h_t = nullptr, *s_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({batch}), &g_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({batch}), &h_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({batch}), &s_t));
    int32_t* gd = g_t->flat<int32_t>().data();
    int32_t* hd = h_t->flat<int32_t>().data();
    T* sd = s_t->flat<T>().data();
    if (batch == 0) return;

    // Log loss of leaf j for label c is lse_j - theta[j, c]. The exact search
    // scores every leaf of every sample, so the log-sum-exp of every leaf is
    // computed once per call (O(2**d K)) and each leaf then costs O(1); the fast
    // search visits d + 1 leaves per sample and computes theirs on the fly
    // (O(d K)) when that is less work than all 2**d leaves (small batches on
    // deep trees: a training step then does not depend on 2**d). Both paths
    // use row_lse, so the results are the same either way.
    std::vector<T> lse;
    auto row_lse = [&](const T* row) -> T {
      const T m = *std::max_element(row, row + k);
      T s = 0;
      for (int64_t c = 0; c < k; ++c) s += std::exp(row[c] - m);
      return m + std::log(s);
    };
    const bool precompute = log_loss_ && (!fast_ || num_leaves <= batch * (depth + 1));
    if (precompute) {
      lse.resize(num_leaves);
      ParallelFor(ctx, num_leaves, 8 * k + 20, [&](int64_t begin, int64_t end) {
        for (int64_t j = begin; j < end; ++j) lse[j] = row_lse(td + j * k);
      });
    }
    auto leaf_loss = [&](int64_t sample, int64_t leaf) -> T {
      const T* row = td + leaf * k;
      if (log_loss_) {
        const T l = precompute ? lse[leaf] : row_lse(row);
        return l - row[static_cast<int64_t>(yd[sample])];
      }
      const TL* target = yd + sample * k;
      T s = 0;
      for (int64_t c = 0; c < k; ++c) {
        const T diff = row[c] - static_cast<T>(target[c]);
        s += diff * diff;
      }
      return s;
    };
    auto split_value = [&](const T* xs, int64_t node) -> T {
      return Dot(wd + node * p, xs, p) + bd[node];
    };

    if (fast_) {
      // Eq. 13: the h path (d dot products), then for each level the leaf
      // reached by flipping that bit and following sgn(v) below (d - level - 1
      // more dot products): O(d**2 p) per sample.
      const int64_t cost = (depth * (depth + 1) / 2) * (2 * p + 8) + (depth + 1) * (log_loss_ ? 20 * k : 3 * k);
      ParallelFor(ctx, batch, cost, [&](int64_t begin, int64_t end) {
        std::vector<int64_t> path(depth);
        std::vector<T> values(depth);
        for (int64_t s = begin; s < end; ++s) {
          const T* xs = xd + s * p;
          int64_t node = 0;
          for (int level = 0; level < depth; ++level) {
            const T v = split_value(xs, node);
            path[level] = node;
            values[level] = v;
            node = v > T(0) ? 2 * node + 2 : 2 * node + 1;
          }
          const int64_t h_leaf = node - num_internal;
          int64_t best = h_leaf;
          T best_score = leaf_loss(s, h_leaf);
          for (int level = 0; level < depth; ++level) {
            const T v = values[level];
            const bool right = v > T(0);
            // flip: go the other way at path[level]
            T margin = right ? LeftCost(v) : RightCost(v);
            int64_t n = right ? 2 * path[level] + 1 : 2 * path[level] + 2;
            while (n < num_internal) {
              const T u = split_value(xs, n);
              margin += u > T(0) ? RightCost(u) : LeftCost(u);  // agreeing: adds exactly 0
              n = u > T(0) ? 2 * n + 2 : 2 * n + 1;
            }
            const int64_t leaf = n - num_internal;
            Consider(leaf, margin + leaf_loss(s, leaf), h_leaf, &best, &best_score);
          }
          gd[s] = static_cast<int32_t>(best);
          hd[s] = static_cast<int32_t>(h_leaf);
          sd[s] = best_score;
        }
      });
      return;
    }

    // Exact (Eq. 10-12): every split value (O(2**d p)), then the path margin of
    // every node top-down in heap order and the score of every leaf.
    const int64_t num_positions = 2 * num_internal + 1;
    const int64_t cost = num_internal * (2 * p + 8) + num_leaves * (log_loss_ ? 4 : 3 * k);
    ParallelFor(ctx, batch, cost, [&](int64_t begin, int64_t end) {
      std::vector<T> margin(num_positions);
      for (int64_t s = begin; s < end; ++s) {
        const T* xs = xd + s * p;
        margin[0] = T(0);
        int64_t h_node = 0;
        for (int64_t i = 0; i < num_internal; ++i) {
          const T v = split_value(xs, i);
          margin[2 * i + 1] = margin[i] + LeftCost(v);
          margin[2 * i + 2] = margin[i] + RightCost(v);
          if (i == h_node) h_node = v > T(0) ? 2 * i + 2 : 2 * i + 1;
        }
        const int64_t h_leaf = h_node - num_internal;
        int64_t best = h_leaf;
        T best_score = leaf_loss(s, h_leaf);
        for (int64_t j = 0; j < num_leaves; ++j) {
          if (j == h_leaf) continue;
          Consider(j, margin[num_internal + j] + leaf_loss(s, j), h_leaf, &best, &best_score);
        }
        gd[s] = static_cast<int32_t>(best);
        hd[s] = static_cast<int32_t>(h_leaf);
        sd[s] = best_score;
      }
    });
  }

 private:
  bool fast_;
  bool log_loss_;
};

#define REGISTER_LOSS_AUGMENTED(T, TL)                                      \
  REGISTER_KERNEL_BUILDER(Name("KerasTrees>LossAugmentedInference")         \
                              .Device(::tensorflow::DEVICE_CPU)             \
                              .TypeConstraint<T>("T")                       \
                              .TypeConstraint<TL>("Tlabels"),               \
                          LossAugmentedInferenceOp<T, TL>);

REGISTER_LOSS_AUGMENTED(float, int32_t);
REGISTER_LOSS_AUGMENTED(double, int32_t);
REGISTER_LOSS_AUGMENTED(float, float);
REGISTER_LOSS_AUGMENTED(double, double);

}  // namespace keras_trees
