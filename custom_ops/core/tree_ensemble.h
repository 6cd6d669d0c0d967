// Core of the Tree Ensemble Layer (Hazimeh et al. 2020): the conditional
// forward pass (Algorithm 1), which can record each sample's fractional tree
// (the trace), and the conditional backward pass over that trace (Algorithm 2,
// Theorem 1). Framework-free; see core/common.h.
//
// Layouts (row-major, T = float or double):
//   x              [batch, input_dim]
//   node_weights   [trees, num_internal, input_dim], heap order, num_internal = 2**depth - 1
//   node_bias      [trees, num_internal]
//   leaf_weights   [trees, num_internal + 1, units]
//   output         [batch, units]
//   trace_offsets  [batch * trees + 1] (int64): the records of (sample b, tree m)
//                  are [trace_offsets[b*trees+m], trace_offsets[b*trees+m+1])
//   trace_index    [records] (int32): post order, i >= 0 internal node i,
//                  -(l+1) leaf l
//   trace_value    [records, 2]: internal (P(i) S'(t_i), S(t_i)), leaf (P(l), 0)
#ifndef KERAS_TREES_CORE_TREE_ENSEMBLE_H_
#define KERAS_TREES_CORE_TREE_ENSEMBLE_H_

#include <cstdint>
#include <functional>

#include "core/common.h"
#include "core/tree_ensemble_bodies.h"  // SoftTreeDims

namespace keras_trees {

// Where the forward pass writes the trace. Its length depends on the data, so
// the caller preallocates only `offsets` ([batch * trees + 1]); once the length
// is known, the core calls `allocate(records, &index, &value)` exactly once
// (also for 0 records), which must return buffers of [records] int32 and
// [records, 2] T, or false when it cannot (the core then stops and returns
// false, leaving the error to the caller). TensorFlow allocates outputs there;
// a framework with static output shapes can hand out the front of a buffer of
// the largest possible length batch * trees * (2 * 2**depth - 1).
template <typename T>
struct TraceOutput {
  int64_t* offsets = nullptr;
  std::function<bool(int64_t records, int32_t** index, T** value)> allocate;
};

// Forward pass: writes `output` (overwritten, not accumulated) and, when
// `trace` is not null, the trace. gamma > 0 and x finite (the caller checks).
// Returns false only when trace->allocate fails.
template <typename T>
bool SoftTreeEnsembleForward(const SoftTreeDims& d, const T* x, const T* node_weights,
                             const T* node_bias, const T* leaf_weights, T gamma, T* output,
                             const TraceOutput<T>* trace, const ParallelFor& parallel_for);

// Scratch the backward pass needs: this many T elements.
inline int64_t SoftTreeEnsembleGradWorkspaceSize(int64_t trace_records) { return trace_records; }

// Backward pass over the trace of the forward call on the same x and weights.
// The caller checks the offsets (non-decreasing, < 2 * 2**depth records per
// pair, offsets[0] = 0); the core checks the records as it walks them and
// returns false (gradients unspecified) when they do not form valid fractional
// trees. `workspace` holds SoftTreeEnsembleGradWorkspaceSize(records) elements.
// Every gradient is overwritten; sums run in sample order, so results do not
// depend on the thread count. grad_x may be null (the input needs no gradient):
// its per-node axpy, a third of the walk's work, is then skipped.
template <typename T>
bool SoftTreeEnsembleBackward(const SoftTreeDims& d, const T* grad_output, const T* x,
                              const T* node_weights, const T* leaf_weights,
                              const int64_t* trace_offsets, const int32_t* trace_index,
                              const T* trace_value, T* workspace, T* grad_x,
                              T* grad_node_weights, T* grad_node_bias, T* grad_leaf_weights,
                              const ParallelFor& parallel_for);

}  // namespace keras_trees

#endif  // KERAS_TREES_CORE_TREE_ENSEMBLE_H_
