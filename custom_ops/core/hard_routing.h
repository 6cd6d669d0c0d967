// Core of hard (deterministic) routing through forests of possibly unbalanced
// trees, one engine for two split forms: oblique splits (HardRoute) and
// noisy-OR / convex polytope splits with K experts (HardRouteExperts). Every
// sample follows one root-to-leaf path per tree, so a tree of depth d costs at
// most d split evaluations per sample. Framework-free; see core/common.h.
//
// Topology (keras_trees/topology.py): heap order, internal positions
// 0 .. 2**depth - 2, children of i are 2i+1 (left) and 2i+2 (right). A sample at
// position i with is_split[t, i] goes right iff the split value v > 0 (NaN goes
// left) and stops at the first position that is not a split.
//
// Layouts (row-major, T = float or double):
//   x               [batch, input_dim], finite (the caller checks)
//   is_split        [trees, num_internal] (bool)
//   node            [batch, trees] (int32): heap position where each sample stops
//   path_values     [batch, trees, depth]: split values along the path, 0 after
//                   its end; may be null (not computed)
// HardRoute:        split_weights [trees, num_internal, input_dim],
//                   split_bias [trees, num_internal];
//                   v = <w[t, i], x> + b[t, i].
// HardRouteExperts: split_weights [trees, num_internal, experts, input_dim],
//                   split_bias and expert_weights (>= 0) [trees, num_internal, experts],
//                   threshold [trees, num_internal];
//                   v = sum_k r[t, i, k] softplus(<w[t, i, k], x> + b[t, i, k]) - threshold[t, i].
// Each output element is written by exactly one range of samples, so results do
// not depend on the thread count.
#ifndef KERAS_TREES_CORE_HARD_ROUTING_H_
#define KERAS_TREES_CORE_HARD_ROUTING_H_

#include <cstdint>

#include "core/common.h"
#include "core/hard_routing_bodies.h"  // RoutingDims

namespace keras_trees {

// Both return false when a split value on some sample's path is not finite
// (NaN or +-Inf: <w, x> + b overflowed); the adapters then raise
// kSplitValueOverflow (the walk itself completes, sending NaN left).
template <typename T>
bool HardRoute(const RoutingDims& d, const T* x, const T* split_weights, const T* split_bias,
               const bool* is_split, int32_t* node, T* path_values,
               const ParallelFor& parallel_for);

template <typename T>
bool HardRouteExperts(const RoutingDims& d, const T* x, const T* split_weights,
                      const T* split_bias, const T* expert_weights, const T* threshold,
                      const bool* is_split, int32_t* node, T* path_values,
                      const ParallelFor& parallel_for);

}  // namespace keras_trees

#endif  // KERAS_TREES_CORE_HARD_ROUTING_H_
