// Op registrations (interfaces and shape functions) for random hinge trees and
// ferns (Lay et al. 2018). Kernels live in hinge_kernels.cc, their arithmetic
// in core/hinge.h.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace keras_trees {

using ::tensorflow::Status;
using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

REGISTER_OP("KerasTrees>HingeForest")
    .Input("x: T")
    .Input("thresholds: T")
    .Input("feature_indices: int32")
    .Input("leaf_weights: T")
    .Output("output: T")
    .Output("leaf: int32")
    .Output("margin: T")
    .Output("vertex: int32")
    .Attr("T: {float, double}")
    .Attr("fern: bool = false")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle x, t, f, w;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &x));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 2, &t));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 2, &f));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(3), 3, &w));
      TF_RETURN_IF_ERROR(c->Merge(t, f, &t));
      DimensionHandle trees;
      TF_RETURN_IF_ERROR(c->Merge(c->Dim(t, 0), c->Dim(w, 0), &trees));
      const DimensionHandle batch = c->Dim(x, 0);
      c->set_output(0, c->MakeShape({batch, trees, c->Dim(w, 2)}));
      c->set_output(1, c->Matrix(batch, trees));
      c->set_output(2, c->Matrix(batch, trees));
      c->set_output(3, c->Matrix(batch, trees));
      return Status();
    })
    .Doc(R"doc(
Random hinge trees or ferns (Lay et al. 2018): the traversal of Algorithm 3 for
every sample and tree, and the per-tree output of Eq. 10, w_leaf * |r*|.

x: [batch, num_features].
thresholds: [num_trees, num_vertices]. Trees: num_vertices = 2**depth - 1 in heap
  order (root 0, children of v are 2v+1 left and 2v+2 right). Ferns
  (fern=true): num_vertices = depth, one decision per level.
feature_indices: [num_trees, num_vertices] int32 in [0, num_features): the
  input feature each vertex compares with its threshold.
leaf_weights: [num_trees, 2**depth, units], leaves left to right.
output: [batch, num_trees, units] = leaf_weights[m, leaf] * |margin|.
leaf: [batch, num_trees], the leaf reached (a sample goes right when
  x[f_v] - t_v > 0).
margin: [batch, num_trees], the signed margin r* = x[f_v*] - t_v* of smallest
  magnitude along the path (first one on ties).
vertex: [batch, num_trees], the deciding vertex v*.
fern: evaluate ferns instead of trees.
)doc");

REGISTER_OP("KerasTrees>HingeForestGrad")
    .Input("grad_output: T")
    .Input("grad_margin: T")
    .Input("x: T")
    .Input("feature_indices: int32")
    .Input("leaf_weights: T")
    .Input("leaf: int32")
    .Input("margin: T")
    .Input("vertex: int32")
    .Output("grad_x: T")
    .Output("grad_thresholds: T")
    .Output("grad_leaf_weights: T")
    .Attr("T: {float, double}")
    .Attr("fern: bool = false")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle gy, gm, x, f, w, unused;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 3, &gy));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 2, &gm));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 2, &x));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(3), 2, &f));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(4), 3, &w));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(5), 2, &unused));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(6), 2, &unused));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(7), 2, &unused));
      c->set_output(0, x);
      c->set_output(1, f);
      c->set_output(2, w);
      return Status();
    })
    .Doc(R"doc(
Sparse backward pass of random hinge trees or ferns (Eq. 11-12): per sample and
tree, only the input feature and the threshold of the deciding vertex v* and the
reached leaf's weights receive gradient. Consumes the leaf/margin/vertex outputs
of KerasTrees>HingeForest; grad_margin is the gradient with respect to its
margin output (zeros when unused).
)doc");

}  // namespace keras_trees
