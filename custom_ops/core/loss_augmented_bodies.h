// Portable pieces of the loss-augmented inference of non-greedy trees (see
// core/loss_augmented.h for the problem, the layouts and the tie rule): the
// kernel bodies that the GPU runs (custom_ops/cuda/) and that the CPU launcher
// runs as their exact emulation (core/launch_cpu.h, and the block launcher of
// core/loss_augmented_pipeline.h). The CPU engine (core/loss_augmented.cc)
// keeps its own loops: it selects the same leaves (the same recurrences, the
// same tie rule), but its split values (a vectorized dot product) and
// log-sum-exp (std::exp/std::log) may differ from these in the last bits. See
// core/portable.h for the rules that keep the CPU emulation and the GPU
// bit-identical.
#ifndef KERAS_TREES_CORE_LOSS_AUGMENTED_BODIES_H_
#define KERAS_TREES_CORE_LOSS_AUGMENTED_BODIES_H_

#include <cstdint>

#include "core/loss_augmented.h"  // LossAugmentedDims
#include "core/portable.h"

namespace keras_trees {
namespace lai {

// Status words of one call (read back by core/loss_augmented_pipeline.h): each
// holds the smallest flat index of an offending element, or portable::kNone.
enum Status : int {
  kBadX = 0,
  kBadWeights,
  kBadBias,
  kBadLeafValues,
  kBadTargets,  // loss "squared": a target not finite
  kBadLabel,    // loss "log": a label outside [0, classes)
  kOverflow,    // the search read a split value that is not finite (set by Fast and Exact)
  kStatusWords
};

// Following the left (right) branch at a split with value v adds -v - |v|
// (v - |v|) to g^T v - h^T v: the expressions of the CPU core and the
// keras.ops reference.
template <typename T>
KT_HOST_DEVICE inline T LeftCost(T v) { return -v - portable::Abs(v); }
template <typename T>
KT_HOST_DEVICE inline T RightCost(T v) { return v - portable::Abs(v); }

// The tie rule of the CPU core as a total order on candidates (leaf, score):
// whether candidate a ranks above candidate b, given the h leaf. A leaf < 0
// is "no candidate" (ranks below everything). The CPU core scans the
// candidates from the h leaf and replaces the best only by a strictly larger
// score or, on equal scores, by a smaller index unless the best is the h
// leaf; so: an h leaf whose score is NaN is never replaced (nothing compares
// above NaN); otherwise NaN scores never win, the larger score wins, equal
// scores keep the h leaf, then the smaller index. A total order makes the
// winner independent of the order of the comparisons (the block reduction
// of the exact search combines them in a tree).
template <typename T>
KT_HOST_DEVICE inline bool Beats(int64_t a, T sa, int64_t b, T sb, int64_t h) {
  if (b < 0) return a >= 0;
  if (a < 0) return false;
  const bool a_nan = !(sa == sa), b_nan = !(sb == sb);
  if (b == h && b_nan) return false;
  if (a == h && a_nan) return true;
  if (a_nan != b_nan) return b_nan;
  if (a_nan) return a < b;
  if (sa != sb) return sa > sb;
  if ((a == h) != (b == h)) return a == h;
  return a < b;
}

// The loss of leaf `leaf` for sample `s`: log loss lse(theta_leaf) -
// theta_leaf[label] (the log-sum-exp from the table `lse` when it is not
// null, else computed here the same way), or the squared loss sum_c
// (theta_leaf[c] - target[c])**2 summed in class order.
template <typename T, typename TL>
struct LeafLoss {
  const T* leaf_values;
  const TL* labels;
  const T* lse;  // [num_leaves] or null
  int64_t classes;
  bool log_loss;

  // log(sum_c exp(row[c] - m)) + m with m the row's maximum, summed in
  // class order.
  KT_HOST_DEVICE T RowLse(const T* row) const {
    T m = row[0];
    for (int64_t c = 1; c < classes; ++c) m = row[c] > m ? row[c] : m;
    T s = T(0);
    for (int64_t c = 0; c < classes; ++c) s = s + portable::Exp(row[c] - m);
    return m + portable::Log(s);
  }
  KT_HOST_DEVICE T operator()(int64_t s, int64_t leaf) const {
    const T* row = leaf_values + leaf * classes;
    if (log_loss) {
      const T l = lse != nullptr ? lse[leaf] : RowLse(row);
      return l - row[portable::InRange(labels[s], classes)];  // a bad label: kBadLabel
    }
    const TL* target = labels + s * classes;
    T sum = T(0);
    for (int64_t c = 0; c < classes; ++c) {
      const T diff = row[c] - static_cast<T>(target[c]);
      sum = sum + diff * diff;
    }
    return sum;
  }
};

// One item per leaf: the log-sum-exp table of the log loss.
template <typename T, typename TL>
struct LeafLse {
  LeafLoss<T, TL> loss;
  T* lse;
  KT_HOST_DEVICE void operator()(int64_t leaf) const { lse[leaf] = loss.RowLse(loss.leaf_values + leaf * loss.classes); }
};

// One item per sample: the smallest sample whose label lies outside
// [0, classes) goes to status[kBadLabel].
template <typename TL>
struct LabelCheck {
  const TL* labels;
  int64_t classes;
  unsigned long long* status;
  KT_HOST_DEVICE void operator()(int64_t s) const {
    const int64_t label = static_cast<int64_t>(labels[s]);
    if (label < 0 || label >= classes) portable::AtomicMin(status + kBadLabel, static_cast<unsigned long long>(s));
  }
};

// The split value <w_node, x_s> + b_node (portable::Dot: a defined order).
template <typename T>
struct SplitValues {
  const T* split_weights;
  const T* split_bias;
  int64_t input_dim;
  KT_HOST_DEVICE T operator()(const T* xs, int64_t node) const {
    return portable::Dot(split_weights + node * input_dim, xs, input_dim) + split_bias[node];
  }
};

// Fast search (Eq. 13), one thread per sample: the h path (d split values),
// then for each level in order the leaf reached by flipping that bit and
// following sgn(v) below, its margin summed down the path; the candidates
// compete by Beats, starting from the h leaf with its loss alone (the CPU
// core's loop, statement for statement). A split value read that is not
// finite sets status[kOverflow] to the smallest such sample.
template <typename T, typename TL>
struct Fast {
  LossAugmentedDims d;
  const T* x;
  SplitValues<T> split;
  LeafLoss<T, TL> loss;
  int32_t* g_leaf;
  int32_t* h_leaf;
  T* score;
  unsigned long long* status;
  KT_HOST_DEVICE void operator()(int64_t s) const {
    const T* xs = x + s * d.input_dim;
    int64_t path[kMaxDepth];
    T values[kMaxDepth];
    int64_t node = 0;
    bool finite = true;
    for (int level = 0; level < d.depth; ++level) {
      const T v = split(xs, node);
      finite = finite && portable::IsFinite(v);
      path[level] = node;
      values[level] = v;
      node = v > T(0) ? 2 * node + 2 : 2 * node + 1;
    }
    const int64_t h = node - d.num_internal;
    int64_t best = h;
    T best_score = loss(s, h);
    for (int level = 0; level < d.depth; ++level) {
      const T v = values[level];
      const bool right = v > T(0);
      T margin = right ? LeftCost(v) : RightCost(v);
      int64_t n = right ? 2 * path[level] + 1 : 2 * path[level] + 2;
      while (n < d.num_internal) {
        const T u = split(xs, n);
        finite = finite && portable::IsFinite(u);
        margin = margin + (u > T(0) ? RightCost(u) : LeftCost(u));
        n = u > T(0) ? 2 * n + 2 : 2 * n + 1;
      }
      const int64_t leaf = n - d.num_internal;
      const T candidate = margin + loss(s, leaf);
      if (Beats(leaf, candidate, best, best_score, h)) {
        best = leaf;
        best_score = candidate;
      }
    }
    g_leaf[s] = static_cast<int32_t>(best);
    h_leaf[s] = static_cast<int32_t>(h);
    score[s] = best_score;
    if (!finite) portable::AtomicMin(status + kOverflow, static_cast<unsigned long long>(s));
  }
};

// Exact search (Eq. 10-12), one block of kBlockThreads threads per sample,
// launched with ForBlocks (core/loss_augmented_pipeline.h): the body is called
// as body(phase, sample, thread, shared) for every phase in order, every
// thread of the block in each phase, with a barrier between phases (the CPU
// launcher runs a phase's threads one after the other: no thread reads what
// another writes in the same phase).
//
// The top `top` = min(depth, kTopLevels) levels live in shared memory: their
// split values, then the margins of every position down to level `top`,
// level by level (margin[child] = margin[parent] + cost, the CPU core's
// recurrence). Thread t < 2**top then owns the subtree under frontier position
// 2**top - 1 + t: it walks its 2**(depth - top) leaves in index order with the
// path's split values and margins on a stack (only the levels below the
// highest changed bit are recomputed, so each split value is computed once),
// keeping its best candidate by Beats; the block then reduces the threads'
// candidates in shared memory by halving strides. Beats is a total order, so
// the winner is the CPU core's whatever the reduction's shape. Every split
// value is computed once (phase 0 or a subtree walk); one that is not finite
// sets status[kOverflow] to the smallest such sample.
constexpr int kBlockThreads = 256;
constexpr int kTopLevels = 8;  // 2**kTopLevels == kBlockThreads frontier nodes
constexpr int kReduceRounds = 8;  // log2(kBlockThreads)

template <typename T>
struct ExactShared {
  T split[kBlockThreads - 1];       // the internal nodes of the top levels
  T margin[2 * kBlockThreads - 1];  // the positions of levels 0..top
  T best_score[kBlockThreads];
  int64_t best_leaf[kBlockThreads];
  int64_t h;
};

template <typename T, typename TL>
struct Exact {
  using Shared = ExactShared<T>;
  static constexpr int kThreads = kBlockThreads;
  LossAugmentedDims d;
  const T* x;
  SplitValues<T> split;
  LeafLoss<T, TL> loss;
  int32_t* g_leaf;
  int32_t* h_leaf;
  T* score;
  int top;  // min(depth, kTopLevels)
  unsigned long long* status;

  KT_HOST_DEVICE void Overflow(int64_t s) const {
    portable::AtomicMin(status + kOverflow, static_cast<unsigned long long>(s));
  }

  // 0: top split values; 1..top: top margins, one level each; top + 1: the h
  // leaf; top + 2: subtrees; then kReduceRounds reduction rounds; last: write.
  KT_HOST_DEVICE int Phases() const { return top + 3 + kReduceRounds + 1; }

  KT_HOST_DEVICE void operator()(int phase, int64_t s, int t, Shared& sh) const {
    const T* xs = x + s * d.input_dim;
    const int64_t top_internal = (int64_t{1} << top) - 1;
    if (phase == 0) {
      if (t < top_internal) {
        sh.split[t] = split(xs, t);
        if (!portable::IsFinite(sh.split[t])) Overflow(s);
      }
      if (t == 0) sh.margin[0] = T(0);
    } else if (phase <= top) {
      const int level = phase - 1;
      if (t < (int64_t{1} << level)) {
        const int64_t i = (int64_t{1} << level) - 1 + t;
        const T v = sh.split[i];
        sh.margin[2 * i + 1] = sh.margin[i] + LeftCost(v);
        sh.margin[2 * i + 2] = sh.margin[i] + RightCost(v);
      }
    } else if (phase == top + 1) {
      if (t == 0) {
        int64_t n = 0;
        while (n < d.num_internal) {
          const T v = n < top_internal ? sh.split[n] : split(xs, n);
          n = v > T(0) ? 2 * n + 2 : 2 * n + 1;
        }
        sh.h = n - d.num_internal;
      }
    } else if (phase == top + 2) {
      Subtree(s, t, xs, sh);
    } else if (phase < top + 3 + kReduceRounds) {
      const int stride = kBlockThreads >> (phase - top - 2);
      if (t < stride) {
        const int o = t + stride;
        if (Beats(sh.best_leaf[o], sh.best_score[o], sh.best_leaf[t], sh.best_score[t], sh.h)) {
          sh.best_leaf[t] = sh.best_leaf[o];
          sh.best_score[t] = sh.best_score[o];
        }
      }
    } else if (t == 0) {
      g_leaf[s] = static_cast<int32_t>(sh.best_leaf[0]);
      h_leaf[s] = static_cast<int32_t>(sh.h);
      score[s] = sh.best_score[0];
    }
  }

  // Thread t's subtree (t < 2**top): its leaves in index order.
  KT_HOST_DEVICE void Subtree(int64_t s, int t, const T* xs, Shared& sh) const {
    int64_t best = -1;
    T best_score = T(0);
    if (t < (int64_t{1} << top)) {
      const int r = d.depth - top;  // levels below the frontier
      const int64_t h = sh.h;
      int64_t node[kMaxDepth + 1];
      T value[kMaxDepth];
      T margin[kMaxDepth + 1];
      node[0] = (int64_t{1} << top) - 1 + t;
      margin[0] = sh.margin[node[0]];
      const int64_t leaves = int64_t{1} << r;
      for (int64_t j = 0; j < leaves; ++j) {
        // the highest level whose branch differs from leaf j - 1's
        int first = 0;
        if (j > 0) {
          int zeros = 0;
          while (((j >> zeros) & 1) == 0) ++zeros;
          first = r - 1 - zeros;
        }
        for (int l = first; l < r; ++l) {
          if (l > first || j == 0) {
            value[l] = split(xs, node[l]);
            if (!portable::IsFinite(value[l])) Overflow(s);
          }
          const bool right = ((j >> (r - 1 - l)) & 1) != 0;
          margin[l + 1] = margin[l] + (right ? RightCost(value[l]) : LeftCost(value[l]));
          node[l + 1] = right ? 2 * node[l] + 2 : 2 * node[l] + 1;
        }
        const int64_t leaf = node[r] - d.num_internal;
        // the h leaf scores its loss alone (the CPU core's starting point)
        const T candidate = leaf == h ? loss(s, leaf) : margin[r] + loss(s, leaf);
        if (Beats(leaf, candidate, best, best_score, h)) {
          best = leaf;
          best_score = candidate;
        }
      }
    }
    sh.best_leaf[t] = best;
    sh.best_score[t] = best_score;
  }
};

}  // namespace lai
}  // namespace keras_trees

#endif  // KERAS_TREES_CORE_LOSS_AUGMENTED_BODIES_H_
