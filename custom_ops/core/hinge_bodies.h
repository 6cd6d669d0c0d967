// Portable pieces of random hinge trees and ferns (Lay et al. 2018): the
// dimensions, the traversal of Algorithm 3, and the kernel bodies that the GPU
// runs (custom_ops/cuda/) and that the CPU launcher runs as their exact
// emulation (core/launch_cpu.h). The CPU engine (core/hinge.cc) shares the
// traversal and keeps its own loops. See core/hinge.h for the math and the
// layouts, core/portable.h for the rules that keep CPU and GPU bit-identical.
//
// Every body is a struct of dimensions and raw pointers whose call operator
// handles one item; a launcher calls it for every item of [0, n) in any
// order. Every float output element has exactly one writer, and every sum runs
// in a fixed order, so results never depend on the launch.
#ifndef KERAS_TREES_CORE_HINGE_BODIES_H_
#define KERAS_TREES_CORE_HINGE_BODIES_H_

#include <cstdint>

#include "core/pipeline.h"
#include "core/portable.h"

namespace keras_trees {

struct HingeDims {
  int64_t batch = 0;     // samples
  int64_t features = 0;  // input features
  int64_t trees = 0;
  int64_t vertices = 0;  // decisions per tree: 2**depth - 1 (tree) or depth (fern)
  int64_t leaves = 0;    // 2**depth
  int64_t units = 0;
  int depth = 0;         // < 1 when `vertices` is invalid for the kind (see MakeHingeDims)
};

// The dimensions of a forest of `trees` hinge trees (or ferns) with `vertices`
// decisions each. A tree needs vertices = 2**depth - 1, a fern vertices = depth,
// with 1 <= depth <= kMaxDepth; otherwise depth (and leaves) come back as 0.
inline HingeDims MakeHingeDims(bool fern, int64_t batch, int64_t features, int64_t trees,
                               int64_t vertices, int64_t units) {
  HingeDims d;
  d.batch = batch;
  d.features = features;
  d.trees = trees;
  d.vertices = vertices;
  d.units = units;
  const int depth = fern ? (vertices >= 1 && vertices <= kMaxDepth ? static_cast<int>(vertices) : -1)
                         : DepthFromInternalNodes(vertices);
  if (depth >= 1 && depth <= kMaxDepth) {
    d.depth = depth;
    d.leaves = int64_t{1} << depth;
  }
  return d;
}

// Algorithm 3 for one perfect tree (heap order). Ties in |r| keep the vertex
// nearest the root; r = 0 goes left.
template <typename T>
KT_HOST_DEVICE inline void TraverseHingeTree(const T* x, const T* t, const int32_t* f, int depth,
                                             int32_t* leaf, T* margin, int32_t* vertex) {
  T r = x[f[0]] - t[0];
  T best = r, best_abs = portable::Abs(r);
  int64_t best_v = 0;
  int64_t v = 1 + (r > T(0));
  for (int i = 1; i < depth; ++i) {
    r = x[f[v]] - t[v];
    const T a = portable::Abs(r);
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
KT_HOST_DEVICE inline void TraverseHingeFern(const T* x, const T* t, const int32_t* f, int depth,
                                             int32_t* leaf, T* margin, int32_t* vertex) {
  T r = x[f[0]] - t[0];
  T best = r, best_abs = portable::Abs(r);
  int32_t best_v = 0;
  int64_t l = (r > T(0));
  for (int i = 1; i < depth; ++i) {
    r = x[f[i]] - t[i];
    const T a = portable::Abs(r);
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

// ---------------------------------------------------------------- bodies
namespace hinge {

using portable::kNone;

// Status words of one call (read back by the pipelines, core/hinge_pipeline.h).
enum Status : int {
  kBadFeature = 0,  // smallest flat index of feature_indices out of [0, features)
  kBadX,            // smallest flat index of a non-finite x
  kBadThreshold,    // ... of a non-finite threshold
  kBadLeafWeight,   // ... of a non-finite leaf weight
  kBadPath,         // backward: smallest pair index whose leaf or vertex is out of range
  kBadMargin,       // backward: ... whose margin is not finite (its forward call had a bad input)
  kStatusWords
};

// One split i of [trees * vertices]: records the smallest flat index of
// feature_indices outside [0, features) and of a non-finite threshold, and
// writes the feature indices the walks read, those out of range replaced by
// 0 (so a walk never leaves x; the call fails with the status anyway).
template <typename T>
struct Splits {
  const int32_t* feature_indices;
  const T* thresholds;
  int64_t features;
  int32_t* safe;
  unsigned long long* status;
  KT_HOST_DEVICE void operator()(int64_t i) const {
    const int32_t f = feature_indices[i];
    const bool bad = f < 0 || f >= features;
    if (bad) portable::AtomicMin(status + kBadFeature, static_cast<unsigned long long>(i));
    if (!portable::IsFinite(thresholds[i])) portable::AtomicMin(status + kBadThreshold, static_cast<unsigned long long>(i));
    safe[i] = bad ? 0 : f;
  }
};

// One (sample, tree) pair, item = m * batch + s (tree-major, so neighbouring
// GPU threads walk one tree and share its top levels' reads): Algorithm 3 on
// the checked feature indices, writing leaf, margin and vertex of pair
// i = s * trees + m.
template <typename T>
struct Walk {
  HingeDims d;
  bool fern;
  const T* x;
  const T* thresholds;
  const int32_t* feature_indices;
  int32_t* safe_features;  // [trees, vertices] scratch written by Splits
  int32_t* leaf;
  T* margin;
  int32_t* vertex;
  const unsigned long long* status;  // the checks' words (an earlier launch): NaN margins when one is set
  KT_HOST_DEVICE void operator()(int64_t item) const {
    int64_t m, s;
    portable::DivMod(item, d.batch, &m, &s);
    const int64_t i = s * d.trees + m;
    const T* xs = x + s * d.features;
    const T* tm = thresholds + m * d.vertices;
    const int32_t* fm = safe_features + m * d.vertices;
    if (fern) {
      TraverseHingeFern(xs, tm, fm, d.depth, leaf + i, margin + i, vertex + i);
    } else {
      TraverseHingeTree(xs, tm, fm, d.depth, leaf + i, margin + i, vertex + i);
    }
    // A bad input: every margin, and so every output, NaN (the call's check
    // may be raised only later, core/check_modes.h).
    if (pipeline::AnySet(status, kStatusWords)) margin[i] = pipeline::QuietNaN<T>();
  }
};

// One output element e = i * units + j: |margin[i]| * leaf_weights[m, leaf[i], j].
template <typename T>
struct Output {
  HingeDims d;
  const T* leaf_weights;
  const int32_t* leaf;
  const T* margin;
  T* output;
  KT_HOST_DEVICE void operator()(int64_t e) const {
    int64_t i, j, s, m;
    portable::DivMod(e, d.units, &i, &j);
    portable::DivMod(i, d.trees, &s, &m);
    output[e] = portable::Abs(margin[i]) * leaf_weights[(m * d.leaves + leaf[i]) * d.units + j];
  }
};

// Backward, one pair i = s * trees + m: dL/dr* = sgn(r*) <g, w_leaf> + dL/dmargin
// into coeff, the deciding feature into feature, and the sort keys of the
// owner reductions (tree-major leaf and vertex ids) with the pair index as
// value. A pair whose leaf or vertex is out of range (not the outputs of a
// forward call) is reported and contributes nothing.
template <typename T>
struct PairCoefficients {
  // The GPU runs it with 64-bit item indices (pipeline::WideIndex).
  static constexpr bool kWideIndex = true;
  HingeDims d;
  const T* grad_output;
  const T* grad_margin;
  const int32_t* feature_indices;
  const T* leaf_weights;
  const int32_t* leaf;
  const T* margin;
  const int32_t* vertex;
  T* coeff;
  int32_t* feature;
  int32_t* leaf_key;
  int32_t* vertex_key;
  int32_t* pair;
  unsigned long long* status;
  KT_HOST_DEVICE void operator()(int64_t i) const {
    int64_t s, m;
    portable::DivMod(i, d.trees, &s, &m);
    const int32_t l = leaf[i], v = vertex[i];
    int32_t f = -1;
    if (l >= 0 && l < d.leaves && v >= 0 && v < d.vertices) f = feature_indices[m * d.vertices + v];
    pair[i] = static_cast<int32_t>(i);
    const bool finite = portable::IsFinite(margin[i]);
    if (!finite) portable::AtomicMin(status + kBadMargin, static_cast<unsigned long long>(i));
    if (f < 0 || f >= d.features || !finite) {
      if (finite) portable::AtomicMin(status + kBadPath, static_cast<unsigned long long>(i));
      coeff[i] = T(0);
      feature[i] = -1;
      leaf_key[i] = static_cast<int32_t>(m * d.leaves);
      vertex_key[i] = static_cast<int32_t>(m * d.vertices);
      return;
    }
    const T g = portable::Dot(grad_output + i * d.units, leaf_weights + (m * d.leaves + l) * d.units, d.units);
    coeff[i] = portable::Fma(portable::Sign(margin[i]), g, grad_margin[i]);
    feature[i] = f;
    leaf_key[i] = static_cast<int32_t>(m * d.leaves + l);
    vertex_key[i] = static_cast<int32_t>(m * d.vertices + v);
  }
};

// grad_x, one element e = s * features + j: the coefficients of sample s's
// trees whose deciding feature is j, added in tree order.
template <typename T>
struct GradX {
  HingeDims d;
  const T* coeff;
  const int32_t* feature;
  T* grad_x;
  const unsigned long long* status;  // PairCoefficients' words: NaN when one is set
  KT_HOST_DEVICE void operator()(int64_t e) const {
    if (pipeline::AnySet(status, kStatusWords)) {
      grad_x[e] = pipeline::QuietNaN<T>();
      return;
    }
    int64_t s, j;
    portable::DivMod(e, d.features, &s, &j);
    const T* cs = coeff + s * d.trees;
    const int32_t* fs = feature + s * d.trees;
    T acc = T(0);
    for (int64_t m = 0; m < d.trees; ++m) {
      if (fs[m] == j) acc += cs[m];
    }
    grad_x[e] = acc;
  }
};

// The contribution of sorted position p (pair i = sorted_pairs[p]) to
// grad_leaf_weights[m, l, j], for the run sums of core/pipeline.h: |r*| g[j].
template <typename T>
struct LeafTerm {
  int64_t units;
  const T* grad_output;
  const T* margin;
  const int32_t* sorted_pairs;
  KT_HOST_DEVICE T operator()(int64_t p, int64_t j) const {
    const int64_t i = sorted_pairs[p];
    return portable::Abs(margin[i]) * grad_output[i * units + j];
  }
};

// ... and to grad_thresholds[m, v]: -dL/dr*.
template <typename T>
struct ThresholdTerm {
  const T* coeff;
  const int32_t* sorted_pairs;
  KT_HOST_DEVICE T operator()(int64_t p, int64_t) const { return -coeff[sorted_pairs[p]]; }
};

}  // namespace hinge

}  // namespace keras_trees

#endif  // KERAS_TREES_CORE_HINGE_BODIES_H_
