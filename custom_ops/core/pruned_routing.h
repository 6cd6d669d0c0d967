// Core of pruned probabilistic routing through forests of possibly unbalanced
// trees (end-to-end trees and forests, Hehn et al. 2019; convex polytope trees,
// Armandpour & Zhou 2021). One engine for two split forms, like hard routing:
// oblique sigmoid splits and noisy-OR splits with K experts. Framework-free;
// see core/common.h.
//
// A sample reaches leaf l with the path probability mu_l(x), the product over
// the splits on the path of s (right turns) or 1 - s (left turns), where s is
// the split's probability of sending the sample right. The forward pass walks
// each (sample, tree) from the root with the path probability ("mass") of
// every node and drops a child subtree when its mass is below `threshold`,
// except the child the split favours (right iff its logit u > 0; the path of
// deterministic routing at gamma -> infinity), which is always kept. (The
// kept set is defined by this rule alone; the engine walks level by level, a
// chunk of samples at a time, see pruned_routing.cc.) So every sample keeps at least one leaf per tree, each visited split
// drops at most one subtree, and
//
//   dropped mass = 1 - sum_{kept l} mu_l < threshold * dropped subtrees
//                = threshold * (split_evaluations + 1 - kept_leaves).
//
// Each output then differs from the exact one by at most dropped mass * max |leaf value|.
// threshold = 0 drops nothing: the exact result over every present leaf.
// The backward pass walks the same paths again (recomputing them from the
// inputs, so no trace is stored) and returns the exact gradient of the pruned
// function (the kept set is piecewise constant in the parameters).
//
// Topology (keras_trees/topology.py): heap order, internal positions
// 0 .. 2**depth - 2, children of i are 2i+1 (left) and 2i+2 (right), positions
// 0 .. 2**(depth+1) - 2 in all. A position is a split iff it is internal and
// is_split[t, i]; a walk stops at the first non-split (a leaf: only the
// splits that are present are evaluated).
//
// Layouts (row-major, T = float or double):
//   x                 [batch, input_dim], finite (the caller checks)
//   is_split          [trees, num_internal] (bool)
//   leaf_values       [trees, positions, units], positions = 2 * num_internal + 1
//                     (indexed by heap position; only leaf positions are read)
//   output            [batch, trees, units]: sum over kept leaves of mu_l * leaf_values
//   kept_leaves       [batch, trees] (int32)
//   split_evaluations [batch, trees] (int32): visited splits
//   dropped_mass      [batch, trees]
// Oblique splits (ObliqueSplits):
//   weights [trees, num_internal, input_dim], bias and gamma [trees, num_internal];
//   u = gamma * (<w, x> + b), s = sigmoid(u).
// Noisy-OR splits with K experts (ExpertSplits):
//   weights [trees, num_internal, experts, input_dim], bias and expert_weights
//   (>= 0) [trees, num_internal, experts], rate0 and steepness [trees, num_internal];
//   S = sum_k r_k softplus(<w_k, x> + b_k) and, annealed (Appendix B, Eq. 25),
//   u = steepness * (S - rate0), s = sigmoid(u); not annealed (Eq. 2),
//   s = 1 - exp(-S), favoured side right iff S > log 2 (rate0, steepness unused).
//
// Determinism: every output element has one writer and sums run in a fixed
// order (a sample's leaves in the order of its walk, samples in chunks and
// blocks, trees and blocks in index order); chunks and blocks depend on the
// shapes only, so results are bit-identical for every thread count.
#ifndef KERAS_TREES_CORE_PRUNED_ROUTING_H_
#define KERAS_TREES_CORE_PRUNED_ROUTING_H_

#include <cstdint>

#include "core/common.h"

namespace keras_trees {

struct PrunedRoutingDims {
  int64_t batch = 0;
  int64_t input_dim = 0;
  int64_t trees = 0;
  int64_t num_internal = 0;  // 2**depth - 1
  int64_t units = 0;
  int64_t experts = 1;  // ExpertSplits only
  int depth = 0;
};

template <typename T>
struct ObliqueSplits {
  const T* weights = nullptr;
  const T* bias = nullptr;
  const T* gamma = nullptr;
};

// Gradients of ObliqueSplits (same layouts).
template <typename T>
struct ObliqueSplitGrads {
  T* weights = nullptr;
  T* bias = nullptr;
  T* gamma = nullptr;
};

template <typename T>
struct ExpertSplits {
  const T* weights = nullptr;
  const T* bias = nullptr;
  const T* expert_weights = nullptr;
  const T* rate0 = nullptr;
  const T* steepness = nullptr;
  bool annealed = true;
};

// Gradients of ExpertSplits (same layouts; rate0 and steepness get zeros when
// the splits are not annealed).
template <typename T>
struct ExpertSplitGrads {
  T* weights = nullptr;
  T* bias = nullptr;
  T* expert_weights = nullptr;
  T* rate0 = nullptr;
  T* steepness = nullptr;
};

// Forward pass; every output is overwritten. 0 <= threshold < 1.
template <typename T>
void PrunedRoutingForward(const PrunedRoutingDims& d, const T* x, const ObliqueSplits<T>& splits,
                          const bool* is_split, const T* leaf_values, T threshold, T* output,
                          int32_t* kept_leaves, int32_t* split_evaluations, T* dropped_mass,
                          const ParallelFor& parallel_for);
template <typename T>
void PrunedRoutingForward(const PrunedRoutingDims& d, const T* x, const ExpertSplits<T>& splits,
                          const bool* is_split, const T* leaf_values, T threshold, T* output,
                          int32_t* kept_leaves, int32_t* split_evaluations, T* dropped_mass,
                          const ParallelFor& parallel_for);

// Backward pass of the forward call with the same inputs: gradients of
// sum_{b,t,u} grad_output[b,t,u] * output[b,t,u] with respect to x, the split
// parameters and leaf_values (all overwritten). grad_x may be null (not
// computed: the inputs of a forest are often data).
template <typename T>
void PrunedRoutingBackward(const PrunedRoutingDims& d, const T* grad_output, const T* x,
                           const ObliqueSplits<T>& splits, const bool* is_split,
                           const T* leaf_values, T threshold, T* grad_x,
                           const ObliqueSplitGrads<T>& grads, T* grad_leaf_values,
                           const ParallelFor& parallel_for);
template <typename T>
void PrunedRoutingBackward(const PrunedRoutingDims& d, const T* grad_output, const T* x,
                           const ExpertSplits<T>& splits, const bool* is_split,
                           const T* leaf_values, T threshold, T* grad_x,
                           const ExpertSplitGrads<T>& grads, T* grad_leaf_values,
                           const ParallelFor& parallel_for);

// Leaf statistics statistics[t, l, u] = sum_b mu_l(x_b) * weights[b, t, u]
// over the kept leaves (0 at other positions); `weights` is [batch, trees,
// units] and `statistics` [trees, positions, units] (overwritten). This is the
// leaf_values gradient of the backward pass with grad_output = weights, without
// the split gradients (the EM E-step of end-to-end trees, the soft class
// counts of convex polytope trees).
template <typename T>
void PrunedLeafStatistics(const PrunedRoutingDims& d, const T* weights, const T* x,
                          const ObliqueSplits<T>& splits, const bool* is_split, T threshold,
                          T* statistics, const ParallelFor& parallel_for);
template <typename T>
void PrunedLeafStatistics(const PrunedRoutingDims& d, const T* weights, const T* x,
                          const ExpertSplits<T>& splits, const bool* is_split, T threshold,
                          T* statistics, const ParallelFor& parallel_for);

// EM E-step of end-to-end trees and forests (Hehn et al. 2019, Eq. 10, with
// Eq. 20 inside Eq. 4 for forests) over the kept leaves, in one walk per
// (sample, tree). With the leaves' class distributions
// pi = leaf_values [trees, positions, classes] (d.units = classes):
//
//   p(y_b)          = (1 / trees) sum_t sum_{kept l} mu_l(x_b) pi[t, l, y_b]
//   h[b, t, l]      = mu_l(x_b) pi[t, l, y_b] / (trees * max(p(y_b), 1e-30))
//   counts[t, l, k] = sum_{b: y_b = k} sample_weight[b] * h[b, t, l]
//
// counts [trees, positions, classes] is overwritten (0 at positions no sample
// keeps); labels [batch] must lie in [0, classes) and sample_weight [batch]
// be finite and >= 0 (the adapters check: core/checks.h CheckEmInputs), or
// null for weights of 1. The same numbers as PrunedRoutingForward (for p(y))
// followed by PrunedLeafStatistics with weights onehot(y) w / (trees p(y))
// times pi, which walks every path twice; here each sample's kept leaves
// (with mu pi[y]) are remembered between the two halves, for groups of
// samples of a fixed size (a function of the shapes) so the buffer stays
// bounded. Deterministic like the other passes: samples are split into
// blocks by the shapes only, and the blocks' partial counts are added in
// block order.
template <typename T>
void PrunedEmStatistics(const PrunedRoutingDims& d, const T* x, const ObliqueSplits<T>& splits,
                        const bool* is_split, const T* leaf_values, const int32_t* labels,
                        const T* sample_weight, T threshold, T* counts, const ParallelFor& parallel_for);

}  // namespace keras_trees

#endif  // KERAS_TREES_CORE_PRUNED_ROUTING_H_
