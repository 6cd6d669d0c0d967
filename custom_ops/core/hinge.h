// Core of random hinge trees and ferns (Lay et al. 2018). Framework-free; see
// core/common.h.
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
// forward pass hands over leaf, r* and v*).
//
// Layouts (row-major, T = float or double):
//   x                 [batch, features], finite (the caller checks)
//   thresholds        [trees, vertices], finite
//   feature_indices   [trees, vertices] (int32), each in [0, features) (the caller checks)
//   leaf_weights      [trees, leaves, units]
//   output            [batch, trees, units]
//   leaf, vertex      [batch, trees] (int32); margin [batch, trees]
#ifndef KERAS_TREES_CORE_HINGE_H_
#define KERAS_TREES_CORE_HINGE_H_

#include <cmath>
#include <cstdint>

#include "core/common.h"

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
KT_HOST_DEVICE inline void TraverseHingeFern(const T* x, const T* t, const int32_t* f, int depth,
                                             int32_t* leaf, T* margin, int32_t* vertex) {
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

// Forward pass: writes output, leaf, margin and vertex.
template <typename T>
void HingeForestForward(const HingeDims& d, bool fern, const T* x, const T* thresholds,
                        const int32_t* feature_indices, const T* leaf_weights, T* output,
                        int32_t* leaf, T* margin, int32_t* vertex,
                        const ParallelFor& parallel_for);

// Scratch the backward pass needs: this many T elements.
inline int64_t HingeForestGradWorkspaceSize(const HingeDims& d) { return d.batch * d.trees; }

// Backward pass from the leaf, margin and vertex outputs of the forward call.
// grad_output [batch, trees, units], grad_margin [batch, trees] (dL/d margin).
// Writes grad_x [batch, features], grad_thresholds [trees, vertices] and
// grad_leaf_weights [trees, leaves, units] (overwritten). grad_x is written per
// sample; grad_thresholds and grad_leaf_weights per tree, samples summed in
// order, so results do not depend on the thread count. Returns false (gradients
// unspecified) when a leaf, vertex or the feature index it names is out of
// range. `workspace` holds HingeForestGradWorkspaceSize(d) elements.
template <typename T>
bool HingeForestBackward(const HingeDims& d, const T* grad_output, const T* grad_margin,
                         const int32_t* feature_indices, const T* leaf_weights,
                         const int32_t* leaf, const T* margin, const int32_t* vertex,
                         T* workspace, T* grad_x, T* grad_thresholds, T* grad_leaf_weights,
                         const ParallelFor& parallel_for);

}  // namespace keras_trees

#endif  // KERAS_TREES_CORE_HINGE_H_
