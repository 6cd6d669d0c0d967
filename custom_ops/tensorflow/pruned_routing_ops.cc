// Op registration (interfaces and shape functions) of pruned probabilistic
// routing: forward, backward and leaf statistics, for oblique sigmoid splits
// (end-to-end trees and forests) and noisy-OR expert splits (convex polytope
// trees). Kernels in pruned_routing_kernels.cc, arithmetic and the pruning
// rule in core/pruned_routing.h.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace keras_trees {

using ::tensorflow::Status;
using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

namespace {

// Checks x and the split inputs starting at input `first` (x, split_weights,
// split_bias, then the per-split inputs; is_split last) and returns x and
// split_weights. `experts`: split_weights has rank 4, per-expert inputs rank 3.
Status SplitInputs(InferenceContext* c, int first, bool experts, ShapeHandle* x, ShapeHandle* w) {
  TF_RETURN_IF_ERROR(c->WithRank(c->input(first), 2, x));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(first + 1), experts ? 4 : 3, w));
  DimensionHandle unused;
  TF_RETURN_IF_ERROR(c->Merge(c->Dim(*x, 1), c->Dim(*w, experts ? 3 : 2), &unused));
  // oblique: split_bias, gamma, is_split; experts: split_bias, expert_weights
  // (both rank 3), rate0, steepness, is_split.
  const int count = experts ? 5 : 3;
  for (int i = 0; i < count; ++i) {
    const int rank = experts && i < 2 ? 3 : 2;
    ShapeHandle s;
    TF_RETURN_IF_ERROR(c->WithRank(c->input(first + 2 + i), rank, &s));
    for (int k = 0; k < rank; ++k) {
      TF_RETURN_IF_ERROR(c->Merge(c->Dim(*w, k), c->Dim(s, k), &unused));
    }
  }
  return Status();
}

// [trees, 2 * num_internal + 1]
Status Positions(InferenceContext* c, ShapeHandle w, DimensionHandle* positions) {
  DimensionHandle doubled;
  TF_RETURN_IF_ERROR(c->Multiply(c->Dim(w, 1), 2, &doubled));
  return c->Add(doubled, 1, positions);
}

Status ForwardShape(InferenceContext* c, bool experts) {
  ShapeHandle x, w, v;
  TF_RETURN_IF_ERROR(SplitInputs(c, 0, experts, &x, &w));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(experts ? 7 : 5), 3, &v));
  DimensionHandle positions, unused;
  TF_RETURN_IF_ERROR(Positions(c, w, &positions));
  TF_RETURN_IF_ERROR(c->Merge(c->Dim(v, 0), c->Dim(w, 0), &unused));
  TF_RETURN_IF_ERROR(c->Merge(c->Dim(v, 1), positions, &unused));
  const DimensionHandle batch = c->Dim(x, 0), trees = c->Dim(w, 0);
  c->set_output(0, c->MakeShape({batch, trees, c->Dim(v, 2)}));
  for (int i = 1; i < 4; ++i) c->set_output(i, c->Matrix(batch, trees));
  return Status();
}

Status GradShape(InferenceContext* c, bool experts) {
  ShapeHandle x, w, g;
  TF_RETURN_IF_ERROR(SplitInputs(c, 1, experts, &x, &w));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 3, &g));
  const int outputs = experts ? 7 : 5;  // x, split inputs but is_split, leaf_values
  for (int i = 0; i < outputs - 1; ++i) c->set_output(i, c->input(1 + i));
  c->set_output(outputs - 1, c->input(experts ? 8 : 6));
  return Status();
}

Status StatisticsShape(InferenceContext* c, bool experts) {
  ShapeHandle x, w, r;
  TF_RETURN_IF_ERROR(SplitInputs(c, 1, experts, &x, &w));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 3, &r));
  DimensionHandle positions, unused;
  TF_RETURN_IF_ERROR(Positions(c, w, &positions));
  TF_RETURN_IF_ERROR(c->Merge(c->Dim(r, 0), c->Dim(x, 0), &unused));
  TF_RETURN_IF_ERROR(c->Merge(c->Dim(r, 1), c->Dim(w, 0), &unused));
  c->set_output(0, c->MakeShape({c->Dim(w, 0), positions, c->Dim(r, 2)}));
  return Status();
}

// x, split_weights, split_bias, gamma, is_split, leaf_values [trees,
// positions, classes], labels [batch], sample_weight [batch] -> counts
// [trees, positions, classes].
Status EmStatisticsShape(InferenceContext* c) {
  ShapeHandle x, w, v, y, sw;
  TF_RETURN_IF_ERROR(SplitInputs(c, 0, false, &x, &w));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(5), 3, &v));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(6), 1, &y));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(7), 1, &sw));
  DimensionHandle positions, unused;
  TF_RETURN_IF_ERROR(Positions(c, w, &positions));
  TF_RETURN_IF_ERROR(c->Merge(c->Dim(v, 0), c->Dim(w, 0), &unused));
  TF_RETURN_IF_ERROR(c->Merge(c->Dim(v, 1), positions, &unused));
  TF_RETURN_IF_ERROR(c->Merge(c->Dim(y, 0), c->Dim(x, 0), &unused));
  TF_RETURN_IF_ERROR(c->Merge(c->Dim(sw, 0), c->Dim(x, 0), &unused));
  c->set_output(0, c->MakeShape({c->Dim(w, 0), positions, c->Dim(v, 2)}));
  return Status();
}

}  // namespace

REGISTER_OP("KerasTrees>PrunedRouting")
    .Input("x: T")
    .Input("split_weights: T")
    .Input("split_bias: T")
    .Input("gamma: T")
    .Input("is_split: bool")
    .Input("leaf_values: T")
    .Output("output: T")
    .Output("kept_leaves: int32")
    .Output("split_evaluations: int32")
    .Output("dropped_mass: T")
    .Attr("T: {float, double}")
    .Attr("threshold: float = 0.0")
    .SetShapeFn([](InferenceContext* c) { return ForwardShape(c, false); })
    .Doc(R"doc(
Pruned probabilistic routing through forests of possibly unbalanced oblique
trees (Hehn et al. 2019): each sample goes right at split i of tree t with
probability s = sigmoid(gamma[t, i] * (<split_weights[t, i], x> + split_bias[t, i])).
Each (sample, tree) is walked depth first with the path probability of every
node; a child subtree whose path probability is below `threshold` is dropped,
except the child the split favours (right iff its logit > 0), which is always
kept. So the dropped mass is below threshold * (split_evaluations + 1 -
kept_leaves), and each output is within dropped_mass * max |leaf value| of the
exact one; threshold 0 gives the exact result.

Topology (keras_trees/topology.py): heap order, children of i are 2i+1 and
2i+2; a walk stops at the first position that is not a split (a leaf).

x: [batch, input_dim], finite.
split_weights: [num_trees, 2**depth - 1, input_dim].
split_bias: [num_trees, 2**depth - 1].
gamma: [num_trees, 2**depth - 1], the steepness of every split.
is_split: [num_trees, 2**depth - 1].
leaf_values: [num_trees, 2**(depth+1) - 1, units], by heap position.
output: [batch, num_trees, units], sum over the kept leaves of mu_l(x) * leaf_values.
kept_leaves: [batch, num_trees], leaves whose mass was kept.
split_evaluations: [batch, num_trees], splits visited.
dropped_mass: [batch, num_trees], the path probability of the dropped subtrees.
)doc");

REGISTER_OP("KerasTrees>PrunedRoutingGrad")
    .Input("grad_output: T")
    .Input("x: T")
    .Input("split_weights: T")
    .Input("split_bias: T")
    .Input("gamma: T")
    .Input("is_split: bool")
    .Input("leaf_values: T")
    .Output("grad_x: T")
    .Output("grad_split_weights: T")
    .Output("grad_split_bias: T")
    .Output("grad_gamma: T")
    .Output("grad_leaf_values: T")
    .Attr("T: {float, double}")
    .Attr("threshold: float = 0.0")
    .Attr("x_grad: bool = true")
    .SetShapeFn([](InferenceContext* c) { return GradShape(c, false); })
    .Doc(R"doc(
Gradients of KerasTrees>PrunedRouting's output (contracted with grad_output
[batch, num_trees, units]) with respect to x, split_weights, split_bias, gamma
and the leaf values; the kept paths are walked again from the inputs. With
x_grad false, grad_x is not computed (zeros).
)doc");

REGISTER_OP("KerasTrees>PrunedLeafStatistics")
    .Input("weights: T")
    .Input("x: T")
    .Input("split_weights: T")
    .Input("split_bias: T")
    .Input("gamma: T")
    .Input("is_split: bool")
    .Output("statistics: T")
    .Attr("T: {float, double}")
    .Attr("threshold: float = 0.0")
    .SetShapeFn([](InferenceContext* c) { return StatisticsShape(c, false); })
    .Doc(R"doc(
statistics[t, l, u] = sum_b mu_l(x_b) * weights[b, t, u] over the leaves that
KerasTrees>PrunedRouting keeps (0 at other positions): [num_trees,
2**(depth+1) - 1, units] for weights [batch, num_trees, units]. The
leaf_values gradient of KerasTrees>PrunedRoutingGrad without the split
gradients (EM leaf statistics, soft class counts).
)doc");

REGISTER_OP("KerasTrees>PrunedRoutingExperts")
    .Input("x: T")
    .Input("split_weights: T")
    .Input("split_bias: T")
    .Input("expert_weights: T")
    .Input("rate0: T")
    .Input("steepness: T")
    .Input("is_split: bool")
    .Input("leaf_values: T")
    .Output("output: T")
    .Output("kept_leaves: int32")
    .Output("split_evaluations: int32")
    .Output("dropped_mass: T")
    .Attr("T: {float, double}")
    .Attr("threshold: float = 0.0")
    .Attr("annealed: bool = true")
    .SetShapeFn([](InferenceContext* c) { return ForwardShape(c, true); })
    .Doc(R"doc(
KerasTrees>PrunedRouting for noisy-OR (convex polytope) splits with K experts
(Armandpour & Zhou 2021): the rate is
  S = sum_k expert_weights[t, i, k] * softplus(<split_weights[t, i, k], x> + split_bias[t, i, k])
and the probability of going right sigmoid(steepness * (S - rate0)) when
annealed (Appendix B), else 1 - exp(-S) (Eq. 2; favoured side right iff
S > log 2). Same walk, pruning rule and outputs.

split_weights: [num_trees, 2**depth - 1, num_experts, input_dim].
split_bias: [num_trees, 2**depth - 1, num_experts].
expert_weights: [num_trees, 2**depth - 1, num_experts], >= 0.
rate0: [num_trees, 2**depth - 1], S0 of the annealed form.
steepness: [num_trees, 2**depth - 1], lambda of the annealed form.
)doc");

REGISTER_OP("KerasTrees>PrunedRoutingExpertsGrad")
    .Input("grad_output: T")
    .Input("x: T")
    .Input("split_weights: T")
    .Input("split_bias: T")
    .Input("expert_weights: T")
    .Input("rate0: T")
    .Input("steepness: T")
    .Input("is_split: bool")
    .Input("leaf_values: T")
    .Output("grad_x: T")
    .Output("grad_split_weights: T")
    .Output("grad_split_bias: T")
    .Output("grad_expert_weights: T")
    .Output("grad_rate0: T")
    .Output("grad_steepness: T")
    .Output("grad_leaf_values: T")
    .Attr("T: {float, double}")
    .Attr("threshold: float = 0.0")
    .Attr("x_grad: bool = true")
    .Attr("annealed: bool = true")
    .SetShapeFn([](InferenceContext* c) { return GradShape(c, true); })
    .Doc(R"doc(
Gradients of KerasTrees>PrunedRoutingExperts' output (contracted with
grad_output) with respect to every floating-point input (grad_x zeros unless
x_grad).
)doc");

REGISTER_OP("KerasTrees>PrunedLeafStatisticsExperts")
    .Input("weights: T")
    .Input("x: T")
    .Input("split_weights: T")
    .Input("split_bias: T")
    .Input("expert_weights: T")
    .Input("rate0: T")
    .Input("steepness: T")
    .Input("is_split: bool")
    .Output("statistics: T")
    .Attr("T: {float, double}")
    .Attr("threshold: float = 0.0")
    .Attr("annealed: bool = true")
    .SetShapeFn([](InferenceContext* c) { return StatisticsShape(c, true); })
    .Doc(R"doc(
KerasTrees>PrunedLeafStatistics for noisy-OR expert splits.
)doc");

REGISTER_OP("KerasTrees>PrunedEmStatistics")
    .Input("x: T")
    .Input("split_weights: T")
    .Input("split_bias: T")
    .Input("gamma: T")
    .Input("is_split: bool")
    .Input("leaf_values: T")
    .Input("labels: int32")
    .Input("sample_weight: T")
    .Output("counts: T")
    .Attr("T: {float, double}")
    .Attr("threshold: float = 0.0")
    .SetShapeFn(EmStatisticsShape)
    .Doc(R"doc(
EM E-step of end-to-end trees and forests (Hehn et al. 2019, Eq. 10) over the
leaves KerasTrees>PrunedRouting keeps, in one walk: with the leaves' class
distributions pi = leaf_values [num_trees, 2**(depth+1) - 1, classes],
  p(y_b) = (1 / num_trees) sum_t sum_l mu_l(x_b) pi[t, l, y_b],
  counts[t, l, k] = sum_{b: y_b = k} sample_weight[b] mu_l(x_b) pi[t, l, y_b]
                    / (num_trees * max(p(y_b), 1e-30)).
labels [batch] in [0, classes); sample_weight [batch] >= 0. Not differentiable.
)doc");

}  // namespace keras_trees
