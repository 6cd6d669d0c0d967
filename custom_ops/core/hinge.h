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
#include "core/hinge_bodies.h"  // HingeDims, the traversals

namespace keras_trees {

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
// range. `workspace` holds HingeForestGradWorkspaceSize(d) elements. grad_x may
// be null (the input needs no gradient): it is then skipped.
template <typename T>
bool HingeForestBackward(const HingeDims& d, const T* grad_output, const T* grad_margin,
                         const int32_t* feature_indices, const T* leaf_weights,
                         const int32_t* leaf, const T* margin, const int32_t* vertex,
                         T* workspace, T* grad_x, T* grad_thresholds, T* grad_leaf_weights,
                         const ParallelFor& parallel_for);

}  // namespace keras_trees

#endif  // KERAS_TREES_CORE_HINGE_H_
