// Op registration (interface and shape function) of the hard-routing engine
// shared by every deterministically routed family. Kernel in
// hard_routing_kernels.cc, its arithmetic in core/hard_routing.h.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace keras_trees {

using ::tensorflow::Status;
using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

REGISTER_OP("KerasTrees>HardRouting")
    .Input("x: T")
    .Input("split_weights: T")
    .Input("split_bias: T")
    .Input("is_split: bool")
    .Output("node: int32")
    .Output("path_values: T")
    .Attr("T: {float, double}")
    .Attr("with_path_values: bool = true")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle x, w, b, m;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &x));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 3, &w));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 2, &b));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(3), 2, &m));
      DimensionHandle unused;
      TF_RETURN_IF_ERROR(c->Merge(c->Dim(x, 1), c->Dim(w, 2), &unused));
      TF_RETURN_IF_ERROR(c->Merge(c->Dim(w, 0), c->Dim(b, 0), &unused));
      TF_RETURN_IF_ERROR(c->Merge(c->Dim(w, 1), c->Dim(b, 1), &unused));
      TF_RETURN_IF_ERROR(c->Merge(c->Dim(w, 0), c->Dim(m, 0), &unused));
      TF_RETURN_IF_ERROR(c->Merge(c->Dim(w, 1), c->Dim(m, 1), &unused));
      const DimensionHandle batch = c->Dim(x, 0);
      c->set_output(0, c->Matrix(batch, c->Dim(w, 0)));
      c->set_output(1, c->MakeShape({c->UnknownDim(), c->Dim(w, 0), c->UnknownDim()}));
      return Status();
    })
    .Doc(R"doc(
Deterministic (hard) routing of every sample down each tree of a forest of
possibly unbalanced oblique trees, evaluating only the splits on its path.

Topology (keras_trees/topology.py): each tree is a heap of maximum depth
`depth`; internal positions 0 .. 2**depth - 2 (children of i are 2i+1 left and
2i+2 right), all positions 0 .. 2**(depth+1) - 2. A sample at position i with
is_split[t, i] computes v = <split_weights[t, i], x> + split_bias[t, i] and goes
right iff v > 0 (a NaN split value goes left); it stops at the first position
that is not a split.

x: [batch, input_dim], finite.
split_weights: [num_trees, 2**depth - 1, input_dim].
split_bias: [num_trees, 2**depth - 1].
is_split: [num_trees, 2**depth - 1].
node: [batch, num_trees], heap position where each sample stops.
path_values: [batch, num_trees, depth], the split values along the path (level
  by level), 0 after the path ends; [batch, num_trees, 0] when
  with_path_values is false.
)doc");

REGISTER_OP("KerasTrees>HardRoutingExperts")
    .Input("x: T")
    .Input("split_weights: T")
    .Input("split_bias: T")
    .Input("expert_weights: T")
    .Input("threshold: T")
    .Input("is_split: bool")
    .Output("node: int32")
    .Output("path_values: T")
    .Attr("T: {float, double}")
    .Attr("with_path_values: bool = true")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle x, w, b, r, thr, m;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &x));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 4, &w));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 3, &b));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(3), 3, &r));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(4), 2, &thr));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(5), 2, &m));
      DimensionHandle unused;
      TF_RETURN_IF_ERROR(c->Merge(c->Dim(x, 1), c->Dim(w, 3), &unused));
      for (ShapeHandle s : {b, r}) {
        for (int i = 0; i < 3; ++i) {
          TF_RETURN_IF_ERROR(c->Merge(c->Dim(w, i), c->Dim(s, i), &unused));
        }
      }
      for (ShapeHandle s : {thr, m}) {
        for (int i = 0; i < 2; ++i) {
          TF_RETURN_IF_ERROR(c->Merge(c->Dim(w, i), c->Dim(s, i), &unused));
        }
      }
      c->set_output(0, c->Matrix(c->Dim(x, 0), c->Dim(w, 0)));
      c->set_output(1, c->MakeShape({c->UnknownDim(), c->Dim(w, 0), c->UnknownDim()}));
      return Status();
    })
    .Doc(R"doc(
Hard routing through forests of noisy-OR (convex polytope) splits, with the
same topology, traversal and outputs as KerasTrees>HardRouting (shared engine).
The split value at position i of tree t is
  v = sum_k expert_weights[t, i, k] * softplus(<split_weights[t, i, k], x> + split_bias[t, i, k])
      - threshold[t, i]
(softplus computed stably), and a sample goes right iff v > 0, i.e. iff the
noisy-OR probability 1 - exp(-sum_k r_k softplus(.)) exceeds
1 - exp(-threshold). The left region {v <= 0} is convex (Armandpour & Zhou
2021, Theorem 1).

x: [batch, input_dim], finite.
split_weights: [num_trees, 2**depth - 1, num_experts, input_dim].
split_bias: [num_trees, 2**depth - 1, num_experts].
expert_weights: [num_trees, 2**depth - 1, num_experts], >= 0.
threshold: [num_trees, 2**depth - 1].
is_split: [num_trees, 2**depth - 1].
node: [batch, num_trees].
path_values: [batch, num_trees, depth] (or [batch, num_trees, 0]).
)doc");

}  // namespace keras_trees
