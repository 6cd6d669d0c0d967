// Portable pieces of pruned probabilistic routing (see core/pruned_routing.h
// for the math, the kept-set rule and the layouts): the kernel bodies that the
// GPU runs (custom_ops/cuda/) and that the CPU launcher runs as their exact
// emulation (core/launch_cpu.h). The CPU engine (core/pruned_routing.cc) keeps
// its own chunked level-by-level walk and its SIMD arithmetic. See
// core/portable.h for the rules that keep CPU emulation and GPU bit-identical.
//
// One walk per (sample, tree) pair, depth first (left child first) with a
// fixed stack (at most depth + 1 frames; kMaxDepth + 2 reserved): nothing is
// allocated inside a walk, and noisy-OR splits need no expert scratch (the
// forward pass sums the experts as it goes; the backward pass recomputes each
// expert's z_k when it needs it). The backward pass walks the kept paths
// again (post order) instead of reading a trace.
//
// Kept set versus the CPU engine: the rule is the same (a child is kept iff
// its mass >= threshold or the split favours it), and the engine's noisy-OR
// splits use this header's scalar functions (LogisticPair, OneMinusExpNeg,
// portable::Softplus and portable::Logistic, the experts summed by Fma), but
// the engine's split values come from its SIMD dot products (core/short_dot.h,
// another summation order than portable::Dot) and, for oblique splits, from
// its 8-wide logistic (core/logistic8.h). A split value therefore may
// differ by a few units in the last place, so a kept-set decision can differ
// only where a child's mass lies within that rounding of `threshold`, or the
// split's logit u within it of 0. At threshold 0 every child is kept by
// both (mass >= 0), so the kept sets are identical; at a threshold > 0 every
// output still obeys the engine's bound (|output - exact| <= dropped mass *
// max |leaf value|, dropped mass < threshold * dropped subtrees), which the
// tests check next to the exact kept-set comparison on random inputs.
#ifndef KERAS_TREES_CORE_PRUNED_ROUTING_BODIES_H_
#define KERAS_TREES_CORE_PRUNED_ROUTING_BODIES_H_

#include <cstdint>

#include "core/portable.h"
#include "core/pruned_routing.h"  // PrunedRoutingDims (plain data)

namespace keras_trees {
namespace pruned {

// Status words of one call (read back by core/pruned_routing_pipeline.h).
enum Status : int {
  kBadX = 0,
  kBadWeights,
  kBadBias,
  kBadRate0,
  kBadGamma,  // oblique: gamma; noisy-OR: the steepness
  kBadExpertWeights,
  kBadLeafValues,
  kBadLabels,
  kBadSampleWeight,
  kStatusWords
};

// Stack frames reserved per walk (a walk uses at most depth + 1).
constexpr int kStackFrames = kMaxDepth + 2;

// The split inputs of either form. expert_weights null: oblique splits
// (weights [trees, ni, input_dim], bias and gamma [trees, ni]); else noisy-OR
// splits with d.experts experts (weights [trees, ni, experts, input_dim],
// bias and expert_weights [trees, ni, experts], rate0 and gamma = the
// steepness [trees, ni]).
template <typename T>
struct Splits {
  const T* weights = nullptr;
  const T* bias = nullptr;
  const T* gamma = nullptr;
  const T* expert_weights = nullptr;
  const T* rate0 = nullptr;
  bool annealed = true;
};

// right = sigmoid(u) and left = sigmoid(-u), both without cancellation.
template <typename T>
KT_HOST_DEVICE inline void LogisticPair(T u, T* right, T* left) {
  const T e = portable::Exp(-portable::Abs(u));
  const T big = T(1) / (T(1) + e);
  const T small = e * big;
  const bool positive = u >= T(0);
  *right = positive ? big : small;
  *left = positive ? small : big;
}

// 1 - exp(-s) for s >= 0 without cancellation near 0: Kahan's
// (1 - w) s / -log(w) with w = exp(-s) (the rounding of w cancels).
template <typename T>
KT_HOST_DEVICE inline T OneMinusExpNeg(T s) {
  const T w = portable::Exp(-s);
  if (s > T(0.5)) return T(1) - w;
  if (w == T(1)) return s;
  return (T(1) - w) * (s / -portable::Log(w));
}

// One evaluated split: probabilities of going right and left, its value
// (oblique: <w, x> + b; noisy-OR: the rate S) and its favoured side.
template <typename T>
struct SplitValue {
  T right;
  T left;
  T value;
  bool favours_right;
};

template <typename T>
KT_HOST_DEVICE inline SplitValue<T> Evaluate(const PrunedRoutingDims& d, const Splits<T>& sp, int64_t split,
                                             const T* xs) {
  const int64_t p = d.input_dim;
  SplitValue<T> v;
  if (sp.expert_weights == nullptr) {
    v.value = portable::Dot(sp.weights + split * p, xs, p) + sp.bias[split];
    const T u = sp.gamma[split] * v.value;
    LogisticPair(u, &v.right, &v.left);
    v.favours_right = u > T(0);
    return v;
  }
  const int64_t k = d.experts;
  T s = T(0);
  for (int64_t e = 0; e < k; ++e) {
    const T z = portable::Dot(sp.weights + (split * k + e) * p, xs, p) + sp.bias[split * k + e];
    s = portable::Fma(sp.expert_weights[split * k + e], portable::Softplus(z), s);
  }
  v.value = s;
  if (sp.annealed) {
    const T u = sp.gamma[split] * (s - sp.rate0[split]);
    LogisticPair(u, &v.right, &v.left);
    v.favours_right = u > T(0);
  } else {
    v.right = OneMinusExpNeg(s);
    v.left = portable::Exp(-s);
    v.favours_right = s > T(0.69314718055994530942);
  }
  return v;
}

// The kept walk of one (sample, tree) pair, depth first, left child first:
// on_leaf(position, mass) for every kept leaf in walk order; returns the
// visited splits and adds the dropped mass (children in walk order) to
// *dropped. A kept leaf child is handed to on_leaf as soon as nothing comes
// before it in walk order (a left child; a right child whose left sibling is
// a leaf or dropped), not pushed and popped: one loop step per split and per
// right leaf under a kept left split, fewer divergent steps on the GPU.
template <typename T, class OnLeaf>
KT_HOST_DEVICE inline int32_t WalkKept(const PrunedRoutingDims& d, const Splits<T>& sp, const bool* is_split,
                                       T threshold, int64_t t, const T* xs, OnLeaf& on_leaf, T* dropped) {
  const int64_t ni = d.num_internal;
  const bool* split_t = is_split + t * ni;
  int32_t node[kStackFrames];
  T mass[kStackFrames];
  int top = 1;
  node[0] = 0;
  mass[0] = T(1);
  int32_t evaluations = 0;
  while (top > 0) {
    --top;
    const int32_t n = node[top];
    const T m = mass[top];
    if (n >= ni || !split_t[n]) {
      on_leaf(n, m);
      continue;
    }
    ++evaluations;
    const SplitValue<T> v = Evaluate(d, sp, t * ni + n, xs);
    const T ml = m * v.left, mr = m * v.right;
    const bool keep_l = ml >= threshold || !v.favours_right;
    const bool keep_r = mr >= threshold || v.favours_right;
    if (!keep_l) *dropped += ml;
    if (!keep_r) *dropped += mr;
    const int32_t cl = 2 * n + 1, cr = 2 * n + 2;
    const bool split_l = keep_l && cl < ni && split_t[cl];
    if (keep_l && !split_l) on_leaf(cl, ml);
    if (keep_r) {
      if (!split_l && !(cr < ni && split_t[cr])) {
        on_leaf(cr, mr);
      } else {
        node[top] = cr;
        mass[top] = mr;
        ++top;
      }
    }
    if (split_l) {  // on top: visited first
      node[top] = cl;
      mass[top] = ml;
      ++top;
    }
  }
  return evaluations;
}

// Heap positions per tree: internal positions, then the last level.
KT_HOST_DEVICE inline int64_t Positions(const PrunedRoutingDims& d) { return 2 * d.num_internal + 1; }

// Pair items are tree-major, item = t * batch + s: neighbouring GPU threads
// walk one tree and share its top levels' reads.
KT_HOST_DEVICE inline void PairOf(int64_t item, int64_t batch, int64_t* t, int64_t* s) {
  portable::DivMod(item, batch, t, s);
}

// Forward, one (sample, tree) pair per item: the pair's output row
// (overwritten), kept leaves, visited splits and dropped mass; one writer each.
template <typename T>
struct ForwardWalk {
  PrunedRoutingDims d;
  Splits<T> sp;
  const T* x;
  const bool* is_split;
  const T* leaf_values;
  T threshold;
  T* output;
  int32_t* kept_leaves;
  int32_t* split_evaluations;
  T* dropped_mass;

  struct AddLeaf {
    const T* values;  // leaf_values of the tree
    int64_t units;
    portable::RowSum<T> out;  // the pair's output row
    int32_t kept = 0;
    KT_HOST_DEVICE void operator()(int32_t position, T m) {
      out.Add(m, values + position * units);
      ++kept;
    }
  };

  KT_HOST_DEVICE void operator()(int64_t item) const {
    int64_t t, s;
    PairOf(item, d.batch, &t, &s);
    const int64_t pair = s * d.trees + t;
    AddLeaf leaf{leaf_values + t * Positions(d) * d.units, d.units,
                 portable::RowSum<T>{output + pair * d.units, d.units}};
    T dropped = T(0);
    split_evaluations[pair] = WalkKept(d, sp, is_split, threshold, t, x + s * d.input_dim, leaf, &dropped);
    leaf.out.Flush();
    kept_leaves[pair] = leaf.kept;
    dropped_mass[pair] = dropped;
  }
};

// Leaf masses of one chunk of samples [s0, s0 + n): one (sample, tree) pair
// per item (item = t * n + i) writes mu_l of its kept leaves into
// mass[(i * trees + t) * positions + l] (zeroed before); with pi non-null
// (the E-step) also pair_value[i * trees + t] = sum over its kept leaves (walk
// order) of mu_l pi[t, l, labels[s0 + i]].
template <typename T>
struct LeafMassWalk {
  PrunedRoutingDims d;
  Splits<T> sp;
  const T* x;
  const bool* is_split;
  T threshold;
  int64_t s0, n;
  T* mass;
  const T* pi;  // null: no pair values
  const int32_t* labels;
  T* pair_value;

  struct Record {
    T* mass;
    const T* pi;  // of the tree and at the label, stride `classes`
    int64_t classes;
    T sum;
    KT_HOST_DEVICE void operator()(int32_t position, T m) {
      mass[position] = m;
      if (pi != nullptr) sum += m * pi[position * classes];
    }
  };

  KT_HOST_DEVICE void operator()(int64_t item) const {
    int64_t t, i;
    PairOf(item, n, &t, &i);
    const int64_t s = s0 + i, positions = Positions(d);
    const T* pi_t = pi == nullptr ? nullptr : pi + t * positions * d.units + portable::InRange(labels[s], d.units);
    Record rec{mass + (i * d.trees + t) * positions, pi_t, d.units, T(0)};
    T dropped = T(0);
    WalkKept(d, sp, is_split, threshold, t, x + s * d.input_dim, rec, &dropped);
    if (pi != nullptr) pair_value[i * d.trees + t] = rec.sum;
  }
};

// Backward, one (sample, tree) pair of the chunk [s0, s0 + n) per item (item
// = t * n + i): the kept walk again, in post order, with D(node) = the
// derivative of <grad_output row, output row> by the node's mass:
// D(leaf) = <grad_output row, leaf value>, D(dropped) = 0, D(split) = right
// D(right child) + left D(left child); a split's dL/d(right probability) is
// mass (D(right) - D(left)). Writes the chunk's coefficients, each at one
// place (zeroed before): leaf masses mass[(i, t, position)]; per split and
// expert k, coeff_z[(i, t, node, k)] = dL/dz_k (oblique: dL/d(<w, x> + b))
// and coeff_b[(i, t, node, k)] = dL/dgamma (oblique) or dL/dr_k (noisy-OR);
// noisy-OR also coeff_c[(i, t, node, 0 | 1)] = dL/drate0, dL/dsteepness; and
// with gx non-null the pair's dL/dx row gx[(i, t, :)] (overwritten).
template <typename T>
struct BackwardWalk {
  PrunedRoutingDims d;
  Splits<T> sp;
  const T* grad_output;
  const T* x;
  const bool* is_split;
  const T* leaf_values;
  T threshold;
  int64_t s0, n;
  T* mass;
  T* coeff_z;
  T* coeff_b;
  T* coeff_c;  // noisy-OR only
  T* gx;       // null: no dL/dx

  struct Frame {
    int32_t node;
    int state;  // 0: not evaluated; 1, 2: side 0, 1 next; 3: both sides done
    T mass;
    SplitValue<T> v;
    T child_d[2];
  };

  // Adds the split's gradient contributions given g = dL/d(right probability).
  KT_HOST_DEVICE void Split(int64_t t, int64_t i, const Frame& f, T g, const T* xs,
                            portable::RowSum<T>* gx_row) const {
    const int64_t ni = d.num_internal, p = d.input_dim, k = d.experts;
    const int64_t split = t * ni + f.node;
    const int64_t at = ((i * d.trees + t) * ni + f.node) * k;
    if (sp.expert_weights == nullptr) {
      const T du = g * f.v.right * f.v.left;
      const T dz = du * sp.gamma[split];
      coeff_z[at] = dz;
      coeff_b[at] = du * f.v.value;
      if (gx_row != nullptr) gx_row->Add(dz, sp.weights + split * p);
      return;
    }
    T ds;
    T* c = coeff_c + ((i * d.trees + t) * ni + f.node) * 2;
    if (sp.annealed) {
      const T du = g * f.v.right * f.v.left;
      ds = du * sp.gamma[split];
      c[0] = -ds;
      c[1] = du * (f.v.value - sp.rate0[split]);
    } else {
      ds = g * f.v.left;  // d(1 - exp(-S))/dS = exp(-S)
      c[0] = T(0);
      c[1] = T(0);
    }
    for (int64_t e = 0; e < k; ++e) {
      const T* w = sp.weights + (split * k + e) * p;
      const T z = portable::Dot(w, xs, p) + sp.bias[split * k + e];
      coeff_b[at + e] = ds * portable::Softplus(z);
      const T dz = ds * sp.expert_weights[split * k + e] * portable::Logistic(z);
      coeff_z[at + e] = dz;
      if (gx_row != nullptr) gx_row->Add(dz, w);
    }
  }

  KT_HOST_DEVICE void operator()(int64_t item) const {
    int64_t t, i;
    PairOf(item, n, &t, &i);
    const int64_t s = s0 + i, ni = d.num_internal, positions = Positions(d), units = d.units;
    const int64_t pair = i * d.trees + t;
    const T* xs = x + s * d.input_dim;
    const T* go = grad_output + (s * d.trees + t) * units;
    const T* leaf_t = leaf_values + t * positions * units;
    const bool* split_t = is_split + t * ni;
    T* mass_row = mass + pair * positions;
    T* gx_row = gx == nullptr ? nullptr : gx + pair * d.input_dim;
    portable::RowSum<T> gx_sum{gx_row, d.input_dim};  // the pair's dL/dx row, in post order of the splits
    if (!split_t[0]) {  // the root is a leaf: no split, D unused, dL/dx 0
      mass_row[0] = T(1);
      if (gx_row != nullptr) gx_sum.Flush();
      return;
    }
    Frame stack[kStackFrames];
    int top = 1;
    stack[0].node = 0;
    stack[0].state = 0;
    stack[0].mass = T(1);
    // One loop step per split on the way down (its evaluation and its
    // children up to the first kept split child) and one per split child on
    // the way back up (the next children, and the split's gradient once both
    // are done): the same operations in the same order as a step per state.
    while (top > 0) {
      Frame& f = stack[top - 1];
      if (f.state == 0) {
        f.v = Evaluate(d, sp, t * ni + f.node, xs);
        f.state = 1;
      }
      bool descended = false;
      while (f.state < 3) {
        const int side = f.state - 1;
        const int32_t c = 2 * f.node + 1 + side;
        const T m = f.mass * (side == 1 ? f.v.right : f.v.left);
        const bool keep = m >= threshold || ((side == 1) == f.v.favours_right);
        f.state += 1;
        if (!keep) {
          f.child_d[side] = T(0);
        } else if (c < ni && split_t[c]) {
          Frame& child = stack[top++];
          child.node = c;
          child.state = 0;
          child.mass = m;
          descended = true;
          break;
        } else {
          mass_row[c] = m;
          f.child_d[side] = portable::Dot(go, leaf_t + c * units, units);
        }
      }
      if (descended) continue;
      // Both children done: the split's gradient, then D to the parent.
      const T d_left = f.child_d[0], d_right = f.child_d[1];
      Split(t, i, f, f.mass * (d_right - d_left), xs, gx_row != nullptr ? &gx_sum : nullptr);
      const T dn = f.v.right * d_right + f.v.left * d_left;
      --top;
      if (top > 0) {
        Frame& parent = stack[top - 1];
        parent.child_d[parent.state - 2] = dn;
      }
    }
    if (gx_row != nullptr) gx_sum.Flush();
  }
};

// Owner reductions over a chunk's coefficients, first pass (the second is
// pipeline::AddBlocks): one item per (block, element), item = block *
// elements + e with e = r * cols + j (r < rows, j < cols), the sum from 0
// over the block's samples i in [block * block_rows, min((block + 1) *
// block_rows, n)) in order of coeff[i * coeff_stride + r * coeff_step +
// coeff_offset] * other(i, r, j) into partial[item], where other(i, r, j) =
// other[(s0 + i) * other_stride + (r / other_group) * cols + j] (other_group
// 0: + j only; other null: 1).
template <typename T>
struct ChunkSum {
  int64_t cols;
  const T* coeff;
  int64_t coeff_stride, coeff_step, coeff_offset;
  const T* other;
  int64_t other_stride, other_group;
  int64_t s0, n;
  int64_t block_rows, elements;
  T* partial;  // [blocks, elements]

  KT_HOST_DEVICE void operator()(int64_t item) const {
    int64_t block, e, r, j;
    portable::DivMod(item, elements, &block, &e);
    portable::DivMod(e, cols, &r, &j);
    const int64_t begin = block * block_rows;
    const int64_t end = begin + block_rows < n ? begin + block_rows : n;
    T acc = T(0);
    const T* c = coeff + r * coeff_step + coeff_offset;
    if (other == nullptr) {
      for (int64_t i = begin; i < end; ++i) acc += c[i * coeff_stride];
    } else {
      const T* o = other + s0 * other_stride + (other_group > 0 ? (r / other_group) * cols : 0) + j;
      for (int64_t i = begin; i < end; ++i) acc = portable::Fma(c[i * coeff_stride], o[i * other_stride], acc);
    }
    partial[item] = acc;
  }
};

// out[s, j] = sum over trees in order of rows[(s * trees + t) * cols + j].
template <typename T>
struct SumTrees {
  int64_t trees, cols;
  const T* rows;
  T* out;
  KT_HOST_DEVICE void operator()(int64_t item) const {
    int64_t s, j;
    portable::DivMod(item, cols, &s, &j);
    T acc = T(0);
    for (int64_t t = 0; t < trees; ++t) acc += rows[(s * trees + t) * cols + j];
    out[item] = acc;
  }
};

// E-step, per sample of the chunk: scale[i] = w / (trees * max(p(y) , 1e-30))
// with p(y) = (sum over trees in order of pair_value) / trees.
template <typename T>
struct EmScale {
  int64_t trees, s0;
  const T* pair_value;
  const T* sample_weight;  // null: 1
  T* scale;
  KT_HOST_DEVICE void operator()(int64_t i) const {
    T sum = T(0);
    for (int64_t t = 0; t < trees; ++t) sum += pair_value[i * trees + t];
    const T nt = static_cast<T>(trees);
    const T w = sample_weight == nullptr ? T(1) : sample_weight[s0 + i];
    scale[i] = w / (nt * portable::Max(sum / nt, T(1e-30)));
  }
};

// E-step counts, first pass (the second is pipeline::AddBlocks over
// [trees * positions * classes] elements): one item per (block, (tree,
// position) row), item = block * trees * positions + r, writing the row
// partial[item * classes + :] (zeroed first): mu_l(x_s) pi[t, l, y_s] scale[s]
// added at y_s over the block's samples of the chunk in order.
template <typename T>
struct EmCounts {
  int64_t trees, positions, classes, s0, n, block_rows;
  const T* mass;
  const T* pi;
  const int32_t* labels;
  const T* scale;
  T* partial;  // [blocks, trees * positions, classes]
  KT_HOST_DEVICE void operator()(int64_t item) const {
    const int64_t per_sample = trees * positions;
    int64_t block, r;
    portable::DivMod(item, per_sample, &block, &r);
    T* row = partial + item * classes;
    for (int64_t k = 0; k < classes; ++k) row[k] = T(0);
    const int64_t begin = block * block_rows;
    const int64_t end = begin + block_rows < n ? begin + block_rows : n;
    for (int64_t i = begin; i < end; ++i) {
      const T m = mass[i * per_sample + r];
      if (m == T(0)) continue;  // not kept (a kept leaf of mass 0 adds 0 too)
      const int64_t y = portable::InRange(labels[s0 + i], classes);  // a bad label: kBadLabels
      row[y] += m * pi[r * classes + y] * scale[i];
    }
  }
};

// Records in status[kBadLabels] the smallest i with labels[i] outside [0, classes).
struct LabelCheck {
  const int32_t* labels;
  int64_t classes;
  unsigned long long* status;
  KT_HOST_DEVICE void operator()(int64_t i) const {
    const int32_t y = labels[i];
    if (y < 0 || y >= classes) portable::AtomicMin(status + kBadLabels, static_cast<unsigned long long>(i));
  }
};

}  // namespace pruned
}  // namespace keras_trees

#endif  // KERAS_TREES_CORE_PRUNED_ROUTING_BODIES_H_
