// Pruned probabilistic routing engine and its two split forms (see
// core/pruned_routing.h).
//
// Forward: parallel over (tree, sample) pairs, tree-major, so a range of
// pairs walks many samples through one tree while its splits stay in cache;
// every output element has one writer. Backward: parallel over (tree, sample
// block); a tree's parameter gradients are summed over its samples in order.
// Forests of fewer than kBlockTrees trees also split the samples into blocks
// (their number depends on the shapes only) whose partial gradients are added
// in block order afterwards; dL/dx is summed over trees in tree order.
#include "core/pruned_routing.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/short_dot.h"

namespace keras_trees {

namespace {

// Forests with at least this many trees keep every core busy with one task
// per tree; smaller ones split the samples into blocks too.
constexpr int64_t kBlockTrees = 8;
// Samples per block at least (a block's partial gradients cost a full copy).
constexpr int64_t kMinBlockSamples = 256;
// Cap on the elements of all partial gradient copies together.
constexpr int64_t kMaxPartialElements = int64_t{1} << 24;
constexpr double kLog2 = 0.69314718055994530942;

// right = sigmoid(u) and left = 1 - right = sigmoid(-u), both without cancellation.
template <typename T>
inline void Logistic(T u, T* right, T* left) {
  const T e = std::exp(-std::abs(u));
  const T big = T(1) / (T(1) + e);
  const T small = e * big;
  if (u >= T(0)) {
    *right = big;
    *left = small;
  } else {
    *right = small;
    *left = big;
  }
}

template <typename T>
inline T Sigmoid(T z) {
  T right, left;
  Logistic(z, &right, &left);
  return right;
}

// One evaluated split: probabilities of going right and left, the split's
// value (oblique: <w, x> + b; experts: the rate S) and its favoured side.
template <typename T>
struct SplitValue {
  T right;
  T left;
  T value;
  bool favours_right;
};

// A (pointer, length) segment of a gradient buffer.
template <typename T>
struct Segment {
  T* data;
  int64_t size;
};

// Oblique sigmoid splits: u = gamma * (<w, x> + b).
template <typename T>
struct ObliqueForm {
  using Params = ObliqueSplits<T>;
  using Grads = ObliqueSplitGrads<T>;
  Params p;
  int64_t dim;
  int64_t splits;  // trees * num_internal

  int64_t ScratchSize() const { return 0; }
  int64_t Cost() const { return 2 * dim + 40; }

  void Evaluate(int64_t split, const T* x, T* /*scratch*/, SplitValue<T>* v) const {
    v->value = ShortDot(p.weights + split * dim, x, dim) + p.bias[split];
    const T u = p.gamma[split] * v->value;
    Logistic(u, &v->right, &v->left);
    v->favours_right = u > T(0);
  }

  // Adds the gradients of split `split` given dL/d(right probability).
  void Backward(int64_t split, const T* x, const T* /*scratch*/, const SplitValue<T>& v,
                T grad_right, const Grads& g, T* grad_x) const {
    const T du = grad_right * v.right * v.left;
    const T dz = du * p.gamma[split];
    g.gamma[split] += du * v.value;
    g.bias[split] += dz;
    Axpy(dz, x, g.weights + split * dim, dim);
    if (grad_x != nullptr) Axpy(dz, p.weights + split * dim, grad_x, dim);
  }

  int64_t GradSize() const { return splits * (dim + 2); }
  Grads GradsAt(T* base) const { return Grads{base, base + splits * dim, base + splits * (dim + 1)}; }
  std::vector<Segment<T>> Segments(const Grads& g) const {
    return {{g.weights, splits * dim}, {g.bias, splits}, {g.gamma, splits}};
  }
};

// Noisy-OR splits with K experts: S = sum_k r_k softplus(<w_k, x> + b_k);
// annealed u = steepness * (S - rate0), else right = 1 - exp(-S).
template <typename T>
struct ExpertForm {
  using Params = ExpertSplits<T>;
  using Grads = ExpertSplitGrads<T>;
  Params p;
  int64_t dim;
  int64_t experts;
  int64_t splits;

  int64_t ScratchSize() const { return experts; }  // the experts' z_k
  int64_t Cost() const { return experts * (2 * dim + 40) + 40; }

  void Evaluate(int64_t split, const T* x, T* z, SplitValue<T>* v) const {
    const T* w = p.weights + split * experts * dim;
    const T* b = p.bias + split * experts;
    const T* r = p.expert_weights + split * experts;
    T s = 0;
    for (int64_t k = 0; k < experts; ++k) {
      z[k] = ShortDot(w + k * dim, x, dim) + b[k];
      s += r[k] * Softplus(z[k]);
    }
    v->value = s;
    if (p.annealed) {
      const T u = p.steepness[split] * (s - p.rate0[split]);
      Logistic(u, &v->right, &v->left);
      v->favours_right = u > T(0);
    } else {
      v->left = std::exp(-s);
      v->right = -std::expm1(-s);
      v->favours_right = s > T(kLog2);
    }
  }

  void Backward(int64_t split, const T* x, const T* z, const SplitValue<T>& v, T grad_right,
                const Grads& g, T* grad_x) const {
    T ds;
    if (p.annealed) {
      const T du = grad_right * v.right * v.left;
      const T lam = p.steepness[split];
      ds = du * lam;
      g.steepness[split] += du * (v.value - p.rate0[split]);
      g.rate0[split] -= ds;
    } else {
      ds = grad_right * v.left;  // d(1 - exp(-S))/dS = exp(-S)
    }
    const T* w = p.weights + split * experts * dim;
    const T* r = p.expert_weights + split * experts;
    for (int64_t k = 0; k < experts; ++k) {
      const int64_t e = split * experts + k;
      g.expert_weights[e] += ds * Softplus(z[k]);
      const T dz = ds * r[k] * Sigmoid(z[k]);
      g.bias[e] += dz;
      Axpy(dz, x, g.weights + e * dim, dim);
      if (grad_x != nullptr) Axpy(dz, w + k * dim, grad_x, dim);
    }
  }

  int64_t GradSize() const { return splits * (experts * (dim + 2) + 2); }
  Grads GradsAt(T* base) const {
    const int64_t e = splits * experts;
    return Grads{base, base + e * dim, base + e * (dim + 1), base + e * (dim + 2),
                 base + e * (dim + 2) + splits};
  }
  std::vector<Segment<T>> Segments(const Grads& g) const {
    const int64_t e = splits * experts;
    return {{g.weights, e * dim}, {g.bias, e}, {g.expert_weights, e}, {g.rate0, splits},
            {g.steepness, splits}};
  }
};

// The depth-first walk of one (sample, tree) pair. A split is evaluated by
// its parent (the root by Walk), together with its sibling when both are kept
// splits: the two evaluations are independent, so the CPU overlaps their
// latency chains (dot product, exp, division) instead of waiting on one, and
// nothing is evaluated that the walk does not visit. `scratch` holds
// 2 * depth * form.ScratchSize() elements: one slice per (level, side), so a
// split's scratch survives the walks below it and its sibling's evaluation.
template <typename T, typename Form>
struct Walker {
  const Form& form;
  const bool* is_split;
  const T* leaf_values;
  int64_t num_internal, positions, units;
  T threshold;
  T* scratch;
  // The pair being walked.
  int64_t tree = 0;
  const T* x = nullptr;
  // Forward accumulators.
  T* output = nullptr;
  int32_t kept = 0, evaluations = 0;
  T dropped = 0;
  // Backward targets (split_grads: also x and split parameters).
  const T* grad_output = nullptr;
  bool split_grads = false;
  typename Form::Grads grads{};
  T* grad_x = nullptr;
  T* grad_leaf = nullptr;

  bool IsSplit(int64_t n) const { return n < num_internal && is_split[tree * num_internal + n]; }
  T* Scratch(int level, int side) const { return scratch + (2 * level + side) * form.ScratchSize(); }
  void Evaluate(int64_t n, T* z, SplitValue<T>* v) {
    form.Evaluate(tree * num_internal + n, x, z, v);
    ++evaluations;
  }

  // The children of split n (value v, path probability mass) that the walk
  // keeps; kept children that are splits are evaluated (into vl, vr).
  struct Children {
    T left, right;
    bool keep_left, keep_right, split_left, split_right;
  };
  Children Expand(int64_t n, T mass, int level, const SplitValue<T>& v, SplitValue<T>* vl,
                  SplitValue<T>* vr) {
    Children c;
    c.left = mass * v.left;
    c.right = mass * v.right;
    c.keep_left = c.left >= threshold || !v.favours_right;
    c.keep_right = c.right >= threshold || v.favours_right;
    c.split_left = c.keep_left && IsSplit(2 * n + 1);
    c.split_right = c.keep_right && IsSplit(2 * n + 2);
    if (c.split_left) Evaluate(2 * n + 1, Scratch(level + 1, 0), vl);
    if (c.split_right) Evaluate(2 * n + 2, Scratch(level + 1, 1), vr);
    return c;
  }

  void Leaf(int64_t n, T mass) {
    Axpy(mass, leaf_values + (tree * positions + n) * units, output, units);
    ++kept;
  }

  void Forward(int64_t n, T mass, int level, const SplitValue<T>& v) {
    SplitValue<T> vl, vr;
    const Children c = Expand(n, mass, level, v, &vl, &vr);
    if (!c.keep_left) {
      dropped += c.left;
    } else if (c.split_left) {
      Forward(2 * n + 1, c.left, level + 1, vl);
    } else {
      Leaf(2 * n + 1, c.left);
    }
    if (!c.keep_right) {
      dropped += c.right;
    } else if (c.split_right) {
      Forward(2 * n + 2, c.right, level + 1, vr);
    } else {
      Leaf(2 * n + 2, c.right);
    }
  }

  // Leaf n reached with path probability mass: returns <grad_output, v_n>
  // (when split_grads) and adds the leaf gradient.
  T LeafBackward(int64_t n, T mass) {
    if (grad_leaf != nullptr) Axpy(mass, grad_output, grad_leaf + n * units, units);
    return split_grads ? ShortDot(grad_output, leaf_values + (tree * positions + n) * units, units)
                       : T(0);
  }

  // Split n (value v, scratch z): returns D(n) = sum over the kept leaves l
  // below n of (mu_l / mass) <grad_output, v_l> (when split_grads), adding the
  // gradients of the subtree on the way.
  T Backward(int64_t n, T mass, int level, const SplitValue<T>& v, const T* z) {
    SplitValue<T> vl, vr;
    const Children c = Expand(n, mass, level, v, &vl, &vr);
    T d_left = 0, d_right = 0;
    if (c.split_left) {
      d_left = Backward(2 * n + 1, c.left, level + 1, vl, Scratch(level + 1, 0));
    } else if (c.keep_left) {
      d_left = LeafBackward(2 * n + 1, c.left);
    }
    if (c.split_right) {
      d_right = Backward(2 * n + 2, c.right, level + 1, vr, Scratch(level + 1, 1));
    } else if (c.keep_right) {
      d_right = LeafBackward(2 * n + 2, c.right);
    }
    if (!split_grads) return T(0);
    form.Backward(tree * num_internal + n, x, z, v, mass * (d_right - d_left), grads, grad_x);
    return v.right * d_right + v.left * d_left;
  }

  // Walks the pair from the root (forward: into output, kept, evaluations, dropped).
  void WalkForward() {
    if (!IsSplit(0)) return Leaf(0, T(1));
    SplitValue<T> v;
    Evaluate(0, Scratch(0, 0), &v);
    Forward(0, T(1), 0, v);
  }

  void WalkBackward() {
    if (!IsSplit(0)) {
      LeafBackward(0, T(1));
      return;
    }
    SplitValue<T> v;
    Evaluate(0, Scratch(0, 0), &v);
    Backward(0, T(1), 0, v, Scratch(0, 0));
  }
};

template <typename T, typename Form>
void Forward(const PrunedRoutingDims& d, const T* x, const Form& form, const bool* is_split,
             const T* leaf_values, T threshold, T* output, int32_t* kept_leaves,
             int32_t* split_evaluations, T* dropped_mass, const ParallelFor& parallel_for) {
  const int64_t batch = d.batch, trees = d.trees, units = d.units, p = d.input_dim;
  const int64_t cost = (2 * d.depth + 1) * form.Cost() + units * 4;
  parallel_for(batch * trees, cost, [&](int64_t begin, int64_t end) {
    std::vector<T> scratch(static_cast<size_t>(std::max<int64_t>(1, 2 * d.depth * form.ScratchSize())));
    Walker<T, Form> w{form, is_split, leaf_values, d.num_internal, 2 * d.num_internal + 1,
                      units, threshold, scratch.data()};
    for (int64_t it = begin; it < end; ++it) {
      const int64_t t = it / batch, b = it % batch, pair = b * trees + t;
      w.tree = t;
      w.x = x + b * p;
      w.output = output + pair * units;
      std::fill_n(w.output, units, T(0));
      w.kept = w.evaluations = 0;
      w.dropped = T(0);
      w.WalkForward();
      kept_leaves[pair] = w.kept;
      split_evaluations[pair] = w.evaluations;
      dropped_mass[pair] = w.dropped;
    }
  });
}

// Sample blocks of the backward pass: a function of the shapes only.
inline int64_t BackwardBlocks(int64_t batch, int64_t trees, int64_t grad_elements) {
  if (trees >= kBlockTrees) return 1;
  int64_t blocks = std::min((batch + kMinBlockSamples - 1) / kMinBlockSamples,
                            (kBlockTrees + trees - 1) / trees);
  while (blocks > 1 && (blocks - 1) * grad_elements > kMaxPartialElements) --blocks;
  return std::max<int64_t>(blocks, 1);
}

// split_grads false: leaf statistics only (grad_x, grads and leaf_values unused).
template <typename T, typename Form>
void Backward(const PrunedRoutingDims& d, const T* grad_output, const T* x, const Form& form,
              const bool* is_split, const T* leaf_values, T threshold, bool split_grads, T* grad_x,
              const typename Form::Grads& grads, T* grad_leaf_values,
              const ParallelFor& parallel_for) {
  const int64_t batch = d.batch, trees = d.trees, units = d.units, p = d.input_dim;
  const int64_t positions = 2 * d.num_internal + 1;
  const int64_t form_size = split_grads ? form.GradSize() : 0;
  const int64_t leaf_size = trees * positions * units;
  const int64_t total = form_size + leaf_size;

  std::vector<Segment<T>> final_segments;
  if (split_grads) final_segments = form.Segments(grads);
  final_segments.push_back({grad_leaf_values, leaf_size});
  for (const Segment<T>& s : final_segments) std::fill_n(s.data, s.size, T(0));
  if (split_grads) std::fill_n(grad_x, batch * p, T(0));

  const int64_t blocks = BackwardBlocks(batch, trees, total);
  std::vector<T> partial(static_cast<size_t>((blocks - 1) * total), T(0));
  // dL/dx per (sample, tree), summed over trees in order afterwards.
  const bool per_tree_x = split_grads && trees > 1;
  std::vector<T> x_partial(static_cast<size_t>(per_tree_x ? batch * trees * p : 0));

  const int64_t cost = (batch / blocks + 1) * ((2 * d.depth + 1) * 2 * form.Cost() + units * 4);
  parallel_for(trees * blocks, cost, [&](int64_t begin, int64_t end) {
    std::vector<T> scratch(static_cast<size_t>(std::max<int64_t>(1, 2 * d.depth * form.ScratchSize())));
    Walker<T, Form> w{form, is_split, leaf_values, d.num_internal, positions, units, threshold,
                      scratch.data()};
    w.split_grads = split_grads;
    for (int64_t it = begin; it < end; ++it) {
      const int64_t t = it / blocks, blk = it % blocks;
      T* base = blk == 0 ? nullptr : partial.data() + (blk - 1) * total;
      if (split_grads) w.grads = base == nullptr ? grads : form.GradsAt(base);
      w.grad_leaf = (base == nullptr ? grad_leaf_values : base + form_size) + t * positions * units;
      w.tree = t;
      for (int64_t b = batch * blk / blocks; b < batch * (blk + 1) / blocks; ++b) {
        w.x = x + b * p;
        w.grad_output = grad_output + (b * trees + t) * units;
        if (per_tree_x) {
          w.grad_x = x_partial.data() + (b * trees + t) * p;
          std::fill_n(w.grad_x, p, T(0));
        } else if (split_grads) {
          w.grad_x = grad_x + b * p;
        }
        w.WalkBackward();
      }
    }
  });

  // Partial gradients of the sample blocks, added in block order.
  if (blocks > 1) {
    std::vector<Segment<T>> segments;
    for (int64_t blk = 1; blk < blocks; ++blk) {
      T* base = partial.data() + (blk - 1) * total;
      if (split_grads) {
        for (const Segment<T>& s : form.Segments(form.GradsAt(base))) segments.push_back(s);
      }
      segments.push_back({base + form_size, leaf_size});
    }
    const int64_t per_block = static_cast<int64_t>(final_segments.size());
    for (int64_t si = 0; si < per_block; ++si) {
      const Segment<T> out = final_segments[si];
      parallel_for(out.size, blocks * 2, [&](int64_t begin, int64_t end) {
        for (int64_t blk = 1; blk < blocks; ++blk) {
          const T* src = segments[(blk - 1) * per_block + si].data;
          for (int64_t i = begin; i < end; ++i) out.data[i] += src[i];
        }
      });
    }
  }
  if (per_tree_x) {
    parallel_for(batch, trees * p * 2, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        T* gx = grad_x + b * p;
        for (int64_t t = 0; t < trees; ++t) {
          const T* src = x_partial.data() + (b * trees + t) * p;
          for (int64_t i = 0; i < p; ++i) gx[i] += src[i];
        }
      }
    });
  }
}

template <typename T>
ObliqueForm<T> MakeForm(const PrunedRoutingDims& d, const ObliqueSplits<T>& s) {
  return ObliqueForm<T>{s, d.input_dim, d.trees * d.num_internal};
}

template <typename T>
ExpertForm<T> MakeForm(const PrunedRoutingDims& d, const ExpertSplits<T>& s) {
  return ExpertForm<T>{s, d.input_dim, d.experts, d.trees * d.num_internal};
}

}  // namespace

template <typename T>
void PrunedRoutingForward(const PrunedRoutingDims& d, const T* x, const ObliqueSplits<T>& splits,
                          const bool* is_split, const T* leaf_values, T threshold, T* output,
                          int32_t* kept_leaves, int32_t* split_evaluations, T* dropped_mass,
                          const ParallelFor& parallel_for) {
  Forward<T>(d, x, MakeForm(d, splits), is_split, leaf_values, threshold, output, kept_leaves,
             split_evaluations, dropped_mass, parallel_for);
}

template <typename T>
void PrunedRoutingForward(const PrunedRoutingDims& d, const T* x, const ExpertSplits<T>& splits,
                          const bool* is_split, const T* leaf_values, T threshold, T* output,
                          int32_t* kept_leaves, int32_t* split_evaluations, T* dropped_mass,
                          const ParallelFor& parallel_for) {
  Forward<T>(d, x, MakeForm(d, splits), is_split, leaf_values, threshold, output, kept_leaves,
             split_evaluations, dropped_mass, parallel_for);
}

template <typename T>
void PrunedRoutingBackward(const PrunedRoutingDims& d, const T* grad_output, const T* x,
                           const ObliqueSplits<T>& splits, const bool* is_split,
                           const T* leaf_values, T threshold, T* grad_x,
                           const ObliqueSplitGrads<T>& grads, T* grad_leaf_values,
                           const ParallelFor& parallel_for) {
  Backward<T>(d, grad_output, x, MakeForm(d, splits), is_split, leaf_values, threshold, true,
              grad_x, grads, grad_leaf_values, parallel_for);
}

template <typename T>
void PrunedRoutingBackward(const PrunedRoutingDims& d, const T* grad_output, const T* x,
                           const ExpertSplits<T>& splits, const bool* is_split,
                           const T* leaf_values, T threshold, T* grad_x,
                           const ExpertSplitGrads<T>& grads, T* grad_leaf_values,
                           const ParallelFor& parallel_for) {
  // Without annealing rate0 and steepness are unused: their gradients stay 0.
  Backward<T>(d, grad_output, x, MakeForm(d, splits), is_split, leaf_values, threshold, true,
              grad_x, grads, grad_leaf_values, parallel_for);
}

template <typename T>
void PrunedLeafStatistics(const PrunedRoutingDims& d, const T* weights, const T* x,
                          const ObliqueSplits<T>& splits, const bool* is_split, T threshold,
                          T* statistics, const ParallelFor& parallel_for) {
  Backward<T>(d, weights, x, MakeForm(d, splits), is_split, nullptr, threshold, false, nullptr,
              ObliqueSplitGrads<T>{}, statistics, parallel_for);
}

template <typename T>
void PrunedLeafStatistics(const PrunedRoutingDims& d, const T* weights, const T* x,
                          const ExpertSplits<T>& splits, const bool* is_split, T threshold,
                          T* statistics, const ParallelFor& parallel_for) {
  Backward<T>(d, weights, x, MakeForm(d, splits), is_split, nullptr, threshold, false, nullptr,
              ExpertSplitGrads<T>{}, statistics, parallel_for);
}

#define KT_INSTANTIATE_PRUNED_ROUTING(T, SPLITS, GRADS)                                        \
  template void PrunedRoutingForward<T>(const PrunedRoutingDims&, const T*, const SPLITS<T>&,   \
                                        const bool*, const T*, T, T*, int32_t*, int32_t*, T*,   \
                                        const ParallelFor&);                                    \
  template void PrunedRoutingBackward<T>(const PrunedRoutingDims&, const T*, const T*,          \
                                         const SPLITS<T>&, const bool*, const T*, T, T*,        \
                                         const GRADS<T>&, T*, const ParallelFor&);              \
  template void PrunedLeafStatistics<T>(const PrunedRoutingDims&, const T*, const T*,           \
                                        const SPLITS<T>&, const bool*, T, T*, const ParallelFor&);

KT_INSTANTIATE_PRUNED_ROUTING(float, ObliqueSplits, ObliqueSplitGrads)
KT_INSTANTIATE_PRUNED_ROUTING(double, ObliqueSplits, ObliqueSplitGrads)
KT_INSTANTIATE_PRUNED_ROUTING(float, ExpertSplits, ExpertSplitGrads)
KT_INSTANTIATE_PRUNED_ROUTING(double, ExpertSplits, ExpertSplitGrads)
#undef KT_INSTANTIATE_PRUNED_ROUTING

}  // namespace keras_trees
