// Conditional forward and backward passes of the Tree Ensemble Layer.
//
// Backward formulation. For internal node i reached with probability P(i),
// write h(v) = sum over reachable leaves l below v of P(l)/P(v) <dL/dT, o_l>.
// Then dL/dt_i = P(i) S'(t_i) (h(left) - h(right)) and
// h(i) = S(t_i) h(left) + (1 - S(t_i)) h(right). This equals Theorem 1's
// mu_1 * sum_g(left) - mu_2 * sum_g(right) without dividing by S or 1 - S, so it
// stays exact where S is tiny. Hard-routing nodes drop out (Definition 1): a
// child reached with probability 1 passes h through unchanged.
#include "core/tree_ensemble.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <vector>

namespace keras_trees {

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
      portable::SmoothStep(t, gamma, &s, &ds);
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
bool SoftTreeEnsembleForward(const SoftTreeDims& d, const T* x, const T* node_weights,
                             const T* node_bias, const T* leaf_weights, T gamma, T* output,
                             const TraceOutput<T>* trace, const ParallelFor& parallel_for) {
  const int64_t batch = d.batch, p = d.input_dim, trees = d.trees;
  const int64_t num_internal = d.num_internal, k = d.units;
  std::fill(output, output + batch * k, T(0));
  // One (sample, tree) pair: walk the tree, add to the sample's output.
  auto walk = [&](int64_t s, int64_t m, std::vector<Record<T>>* records) {
    return WalkTree<T>(x + s * p, node_weights + m * num_internal * p,
                       node_bias + m * num_internal, leaf_weights + m * (num_internal + 1) * k,
                       gamma, num_internal, p, k, output + s * k, records);
  };
  // Rough cost per sample: a dot product per level per tree plus a leaf update.
  const int64_t cost = trees * (d.depth * (2 * p + 20) + 2 * k) * 4;

  if (trace == nullptr) {
    parallel_for(batch, cost, [&](int64_t begin, int64_t end) {
      for (int64_t s = begin; s < end; ++s) {
        for (int64_t m = 0; m < trees; ++m) walk(s, m, nullptr);
      }
    });
    return true;
  }

  // Each shard fills one buffer (allocated once per shard, never per sample);
  // buffers are concatenated in sample order, so the trace is deterministic.
  const int64_t pairs = batch * trees + 1;
  int64_t* off = trace->offsets;
  off[0] = 0;
  std::mutex mu;
  std::map<int64_t, std::vector<Record<T>>> chunks;
  parallel_for(batch, cost, [&](int64_t begin, int64_t end) {
    std::vector<Record<T>> recs;
    recs.reserve((end - begin) * trees * 4);
    for (int64_t s = begin; s < end; ++s) {
      for (int64_t m = 0; m < trees; ++m) off[s * trees + m + 1] = walk(s, m, &recs);
    }
    std::lock_guard<std::mutex> lock(mu);
    chunks.emplace(begin, std::move(recs));
  });
  for (int64_t i = 1; i < pairs; ++i) off[i] += off[i - 1];
  int32_t* id = nullptr;
  T* vd = nullptr;
  if (!trace->allocate(off[pairs - 1], &id, &vd)) return false;
  int64_t pos = 0;
  for (auto& chunk : chunks) {
    for (const Record<T>& r : chunk.second) {
      id[pos] = r.index;
      vd[2 * pos] = r.v0;
      vd[2 * pos + 1] = r.v1;
      ++pos;
    }
  }
  return true;
}

template <typename T>
bool SoftTreeEnsembleBackward(const SoftTreeDims& d, const T* grad_output, const T* x,
                              const T* node_weights, const T* leaf_weights,
                              const int64_t* trace_offsets, const int32_t* trace_index,
                              const T* trace_value, T* workspace, T* grad_x,
                              T* grad_node_weights, T* grad_node_bias, T* grad_leaf_weights,
                              const ParallelFor& parallel_for) {
  const int64_t batch = d.batch, p = d.input_dim, trees = d.trees;
  const int64_t num_internal = d.num_internal, num_leaves = num_internal + 1, k = d.units;
  const int64_t* off = trace_offsets;
  const int32_t* id = trace_index;
  const T* vd = trace_value;
  const int64_t total = off[batch * trees];
  T* coeff = workspace;

  // Phase 1, parallel over samples: evaluate each fractional tree bottom-up,
  // write dL/dx and keep dL/dt_i per internal record for phase 2.
  std::atomic<bool> bad{false};
  const int64_t mean_recs = batch * trees > 0 ? total / (batch * trees) + 1 : 1;
  // Heap position q lies in the subtree of position a (q's ancestors by q = (q - 1) / 2).
  auto in_subtree = [](int64_t q, int64_t a) {
    while (q > a) q = (q - 1) / 2;
    return q == a;
  };
  parallel_for(batch, trees * mean_recs * (p + k) * 3, [&](int64_t begin, int64_t end) {
    T stack[kMaxDepth + 2];
    int64_t position[kMaxDepth + 2];  // the heap position of each stack entry's record
    for (int64_t s = begin; s < end; ++s) {
      T* gxs = grad_x != nullptr ? grad_x + s * p : nullptr;
      if (gxs != nullptr) std::fill(gxs, gxs + p, T(0));
      const T* gys = grad_output + s * k;
      for (int64_t m = 0; m < trees; ++m) {
        const T* wm = node_weights + m * num_internal * p;
        const T* lm = leaf_weights + m * num_leaves * k;
        int top = -1;
        for (int64_t r = off[s * trees + m]; r < off[s * trees + m + 1]; ++r) {
          const int32_t idx = id[r];
          if (idx < 0) {
            const int64_t leaf = -static_cast<int64_t>(idx) - 1;
            if (leaf >= num_leaves || top + 1 > kMaxDepth) { bad = true; return; }
            stack[++top] = Dot(gys, lm + leaf * k, k);
            position[top] = num_internal + leaf;
            coeff[r] = vd[2 * r];
          } else {
            if (idx >= num_internal || top < 1) { bad = true; return; }
            // A trace of trees of this depth: the two records below internal
            // node idx lie under its left and its right child (a node that
            // sends every sample one way is left out of the trace).
            if (!in_subtree(position[top - 1], 2 * int64_t{idx} + 1) ||
                !in_subtree(position[top], 2 * int64_t{idx} + 2)) {
              bad = true;
              return;
            }
            const T hr = stack[top--];
            const T hl = stack[top];
            const T c = vd[2 * r] * (hl - hr);
            const T sv = vd[2 * r + 1];
            coeff[r] = c;
            if (gxs != nullptr) Axpy(c, wm + idx * p, gxs, p);
            stack[top] = sv * hl + (T(1) - sv) * hr;
            position[top] = idx;
          }
        }
        if (top != 0 && off[s * trees + m + 1] > off[s * trees + m]) { bad = true; return; }
      }
    }
  });
  if (bad) return false;

  // Phase 2, parallel over (tree, column block): scatter parameter gradients
  // in sample order, so sums are identical on every run and thread count.
  const int64_t blocks = std::max<int64_t>(
      1, std::min<int64_t>((parallel_for.num_threads + trees - 1) / trees,
                           std::max<int64_t>(1, std::min(p, k) / 8)));
  const int64_t items = trees * blocks;
  parallel_for(items, mean_recs * batch * (p + k) / blocks + 1, [&](int64_t begin, int64_t end) {
    for (int64_t it = begin; it < end; ++it) {
      const int64_t m = it / blocks, blk = it % blocks;
      const int64_t p0 = p * blk / blocks, p1 = p * (blk + 1) / blocks;
      const int64_t k0 = k * blk / blocks, k1 = k * (blk + 1) / blocks;
      T* gwm = grad_node_weights + m * num_internal * p;
      T* gom = grad_leaf_weights + m * num_leaves * k;
      T* gbm = grad_node_bias + m * num_internal;
      for (int64_t n = 0; n < num_internal; ++n) {
        std::fill(gwm + n * p + p0, gwm + n * p + p1, T(0));
      }
      for (int64_t l = 0; l < num_leaves; ++l) {
        std::fill(gom + l * k + k0, gom + l * k + k1, T(0));
      }
      if (blk == 0) std::fill(gbm, gbm + num_internal, T(0));
      for (int64_t s = 0; s < batch; ++s) {
        const T* xs = x + s * p;
        const T* gys = grad_output + s * k;
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
  return true;
}

#define KT_INSTANTIATE_SOFT_TREE(T)                                                          \
  template bool SoftTreeEnsembleForward<T>(const SoftTreeDims&, const T*, const T*, const T*, \
                                           const T*, T, T*, const TraceOutput<T>*,            \
                                           const ParallelFor&);                               \
  template bool SoftTreeEnsembleBackward<T>(const SoftTreeDims&, const T*, const T*, const T*, \
                                            const T*, const int64_t*, const int32_t*, const T*, \
                                            T*, T*, T*, T*, T*, const ParallelFor&);

KT_INSTANTIATE_SOFT_TREE(float)
KT_INSTANTIATE_SOFT_TREE(double)
#undef KT_INSTANTIATE_SOFT_TREE

}  // namespace keras_trees
