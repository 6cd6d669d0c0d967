// Op registration (interface and shape function) of the loss-augmented
// inference of non-greedy decision trees (Norouzi et al., NIPS 2015, Eq. 10-13).
// Kernel in loss_augmented_kernels.cc, its arithmetic in core/loss_augmented.h.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace keras_trees {

using ::tensorflow::Status;
using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

REGISTER_OP("KerasTrees>LossAugmentedInference")
    .Input("x: T")
    .Input("split_weights: T")
    .Input("split_bias: T")
    .Input("leaf_values: T")
    .Input("labels: Tlabels")
    .Output("g_leaf: int32")
    .Output("h_leaf: int32")
    .Output("score: T")
    .Attr("T: {float, double}")
    .Attr("Tlabels: {int32, float, double}")
    .Attr("loss: {'log', 'squared'} = 'log'")
    .Attr("fast: bool = true")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle x, w, b, theta, y;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &x));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 2, &w));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 1, &b));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(3), 2, &theta));
      TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(4), 1, &y));
      TF_RETURN_IF_ERROR(c->WithRankAtMost(y, 2, &y));
      DimensionHandle unused;
      TF_RETURN_IF_ERROR(c->Merge(c->Dim(x, 1), c->Dim(w, 1), &unused));
      TF_RETURN_IF_ERROR(c->Merge(c->Dim(w, 0), c->Dim(b, 0), &unused));
      DimensionHandle batch = c->Dim(x, 0);
      TF_RETURN_IF_ERROR(c->Merge(batch, c->Dim(y, 0), &batch));
      c->set_output(0, c->Vector(batch));
      c->set_output(1, c->Vector(batch));
      c->set_output(2, c->Vector(batch));
      return Status();
    })
    .Doc(R"doc(
Loss-augmented inference of a perfect oblique decision tree of depth d
(Norouzi, Collins, Johnson, Fleet & Kohli, NIPS 2015).

With split values v_i = <split_weights[i], x> + split_bias[i] (heap order,
children of i are 2i+1 left and 2i+2 right), h = sgn(v) (+1 iff v_i > 0, i.e.
the hard routing of keras_trees/topology.py) selects leaf f(h). For every
sample the op finds

  g = argmax_g  g^T v + loss(leaf_values[f(g)], y)          (Eq. 10, fast=false)
  g = argmax_{g in B1(h)} g^T v + loss(leaf_values[f(g)], y) (Eq. 13, fast=true)

Only the bits of g on the path to its leaf j matter (Eq. 12), so the search
runs over leaves j with score(j) = loss_j - 2 * sum of |v_i| over the path
nodes of j whose direction disagrees with sgn(v_i). The exact search visits all
2**d leaves (O(2**d p)); the fast one the d + 1 leaves reachable with at most
one flipped bit (O(d**2 p)). Ties keep f(h); among other tied leaves the
smallest index wins.

x: [batch, p], finite.
split_weights: [2**d - 1, p].
split_bias: [2**d - 1].
leaf_values: [2**d, K] leaf parameters Theta: unnormalized log-probabilities
  (loss="log", K classes) or regression outputs (loss="squared").
labels: [batch] int32 class ids in [0, K) (loss="log"), or [batch, K]
  targets of type T (loss="squared").
g_leaf: [batch] leaf index (0 .. 2**d - 1; heap position 2**d - 1 + index)
  selected by the loss-augmented code g.
h_leaf: [batch] leaf index selected by h = sgn(W x) (the tree's prediction).
score: [batch] max_g g^T v + loss - max_h h^T v, the per-sample upper bound
  of Eq. 7 (exact) or Eq. 13 (fast) on loss(leaf_values[h_leaf], y).
)doc");

}  // namespace keras_trees
