// Loss-augmented inference, exact and fast (see core/loss_augmented.h).
//
// Notation: a sample at internal node i with split value v goes right iff
// v > 0. Following direction s in {-1 (left), +1 (right)} at i adds
// s * v - |v| to g^T v - h^T v (0 when s agrees with sgn(v), -2|v| otherwise):
// left adds -v - |v|, right adds v - |v| (LeftCost / RightCost, the same
// floating-point expressions as the keras.ops reference).
#include "core/loss_augmented.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

namespace keras_trees {

namespace {

template <typename T>
KT_HOST_DEVICE inline T LeftCost(T v) { return -v - std::abs(v); }
template <typename T>
KT_HOST_DEVICE inline T RightCost(T v) { return v - std::abs(v); }

// Candidate leaf `c` with `score` replaces the current best unless it is worse;
// ties keep the h leaf, otherwise the smallest leaf index.
template <typename T>
KT_HOST_DEVICE inline void Consider(int64_t c, T score, int64_t h_leaf, int64_t* best,
                                    T* best_score) {
  if (score > *best_score ||
      (score == *best_score && *best != h_leaf && c < *best)) {
    *best = c;
    *best_score = score;
  }
}

}  // namespace

template <typename T, typename TL>
bool LossAugmentedInference(const LossAugmentedDims& d, bool log_loss, bool fast, const T* x,
                            const T* split_weights, const T* split_bias, const T* leaf_values,
                            const TL* labels, int32_t* g_leaf, int32_t* h_leaf, T* score,
                            const ParallelFor& parallel_for) {
  const int64_t batch = d.batch, p = d.input_dim, num_internal = d.num_internal;
  const int64_t num_leaves = num_internal + 1, k = d.classes;
  const int depth = d.depth;
  if (batch == 0) return true;
  std::atomic<bool> finite{true};  // a flag, not a float: the results stay deterministic

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
  const bool precompute = log_loss && (!fast || num_leaves <= batch * (depth + 1));
  if (precompute) {
    lse.resize(num_leaves);
    parallel_for(num_leaves, 8 * k + 20, [&](int64_t begin, int64_t end) {
      for (int64_t j = begin; j < end; ++j) lse[j] = row_lse(leaf_values + j * k);
    });
  }
  auto leaf_loss = [&](int64_t sample, int64_t leaf) -> T {
    const T* row = leaf_values + leaf * k;
    if (log_loss) {
      const T l = precompute ? lse[leaf] : row_lse(row);
      return l - row[static_cast<int64_t>(labels[sample])];
    }
    const TL* target = labels + sample * k;
    T s = 0;
    for (int64_t c = 0; c < k; ++c) {
      const T diff = row[c] - static_cast<T>(target[c]);
      s += diff * diff;
    }
    return s;
  };
  auto split_value = [&](const T* xs, int64_t node) -> T {
    return Dot(split_weights + node * p, xs, p) + split_bias[node];
  };

  if (fast) {
    // Eq. 13: the h path (d dot products), then for each level the leaf
    // reached by flipping that bit and following sgn(v) below (d - level - 1
    // more dot products): O(d**2 p) per sample.
    const int64_t cost =
        (depth * (depth + 1) / 2) * (2 * p + 8) + (depth + 1) * (log_loss ? 20 * k : 3 * k);
    parallel_for(batch, cost, [&](int64_t begin, int64_t end) {
      std::vector<int64_t> path(depth);
      std::vector<T> values(depth);
      bool shard_finite = true;
      for (int64_t s = begin; s < end; ++s) {
        const T* xs = x + s * p;
        int64_t node = 0;
        for (int level = 0; level < depth; ++level) {
          const T v = split_value(xs, node);
          shard_finite &= std::isfinite(v);
          path[level] = node;
          values[level] = v;
          node = v > T(0) ? 2 * node + 2 : 2 * node + 1;
        }
        const int64_t h = node - num_internal;
        int64_t best = h;
        T best_score = leaf_loss(s, h);
        for (int level = 0; level < depth; ++level) {
          const T v = values[level];
          const bool right = v > T(0);
          // flip: go the other way at path[level]
          T margin = right ? LeftCost(v) : RightCost(v);
          int64_t n = right ? 2 * path[level] + 1 : 2 * path[level] + 2;
          while (n < num_internal) {
            const T u = split_value(xs, n);
            shard_finite &= std::isfinite(u);
            margin += u > T(0) ? RightCost(u) : LeftCost(u);  // agreeing: adds exactly 0
            n = u > T(0) ? 2 * n + 2 : 2 * n + 1;
          }
          const int64_t leaf = n - num_internal;
          Consider(leaf, margin + leaf_loss(s, leaf), h, &best, &best_score);
        }
        g_leaf[s] = static_cast<int32_t>(best);
        h_leaf[s] = static_cast<int32_t>(h);
        score[s] = best_score;
      }
      if (!shard_finite) finite.store(false, std::memory_order_relaxed);
    });
    return finite.load();
  }

  // Exact (Eq. 10-12): every split value (O(2**d p)), then the path margin of
  // every node top-down in heap order and the score of every leaf.
  const int64_t num_positions = 2 * num_internal + 1;
  const int64_t cost = num_internal * (2 * p + 8) + num_leaves * (log_loss ? 4 : 3 * k);
  parallel_for(batch, cost, [&](int64_t begin, int64_t end) {
    std::vector<T> margin(num_positions);
    bool shard_finite = true;
    for (int64_t s = begin; s < end; ++s) {
      const T* xs = x + s * p;
      margin[0] = T(0);
      int64_t h_node = 0;
      for (int64_t i = 0; i < num_internal; ++i) {
        const T v = split_value(xs, i);
        shard_finite &= std::isfinite(v);
        margin[2 * i + 1] = margin[i] + LeftCost(v);
        margin[2 * i + 2] = margin[i] + RightCost(v);
        if (i == h_node) h_node = v > T(0) ? 2 * i + 2 : 2 * i + 1;
      }
      const int64_t h = h_node - num_internal;
      int64_t best = h;
      T best_score = leaf_loss(s, h);
      for (int64_t j = 0; j < num_leaves; ++j) {
        if (j == h) continue;
        Consider(j, margin[num_internal + j] + leaf_loss(s, j), h, &best, &best_score);
      }
      g_leaf[s] = static_cast<int32_t>(best);
      h_leaf[s] = static_cast<int32_t>(h);
      score[s] = best_score;
    }
    if (!shard_finite) finite.store(false, std::memory_order_relaxed);
  });
  return finite.load();
}

#define KT_INSTANTIATE_LOSS_AUGMENTED(T, TL)                                                    \
  template bool LossAugmentedInference<T, TL>(const LossAugmentedDims&, bool, bool, const T*,   \
                                              const T*, const T*, const T*, const TL*, int32_t*, \
                                              int32_t*, T*, const ParallelFor&);

KT_INSTANTIATE_LOSS_AUGMENTED(float, int32_t)
KT_INSTANTIATE_LOSS_AUGMENTED(double, int32_t)
KT_INSTANTIATE_LOSS_AUGMENTED(float, float)
KT_INSTANTIATE_LOSS_AUGMENTED(double, double)
#undef KT_INSTANTIATE_LOSS_AUGMENTED

}  // namespace keras_trees
