// Op registrations (interfaces and shape functions) for the Tree Ensemble Layer.
// Kernels live in tree_ensemble_kernels.cc (CPU) and tree_ensemble_gpu_kernels.cc
// (GPU, trace-free ops only), their arithmetic in core/tree_ensemble.h (the
// traced ops) and core/tree_ensemble_pipeline.h (the trace-free ops).
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace keras_trees {

using ::tensorflow::Status;
using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

REGISTER_OP("KerasTrees>SoftTreeEnsemble")
    .Input("x: T")
    .Input("node_weights: T")
    .Input("node_bias: T")
    .Input("leaf_weights: T")
    .Input("gamma: T")
    .Output("output: T")
    .Output("trace_offsets: int64")
    .Output("trace_index: int32")
    .Output("trace_value: T")
    .Attr("T: {float, double}")
    .Attr("with_trace: bool = true")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle x, w, b, o, g;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &x));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 3, &w));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 2, &b));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(3), 3, &o));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(4), 0, &g));
      DimensionHandle unused;
      TF_RETURN_IF_ERROR(c->Merge(c->Dim(x, 1), c->Dim(w, 2), &unused));
      TF_RETURN_IF_ERROR(c->Merge(c->Dim(w, 0), c->Dim(o, 0), &unused));
      TF_RETURN_IF_ERROR(c->Merge(c->Dim(w, 0), c->Dim(b, 0), &unused));
      TF_RETURN_IF_ERROR(c->Merge(c->Dim(w, 1), c->Dim(b, 1), &unused));
      const DimensionHandle batch = c->Dim(x, 0);
      c->set_output(0, c->Matrix(batch, c->Dim(o, 2)));
      DimensionHandle pairs, offsets;
      TF_RETURN_IF_ERROR(c->Multiply(batch, c->Dim(w, 0), &pairs));
      TF_RETURN_IF_ERROR(c->Add(pairs, 1, &offsets));
      c->set_output(1, c->Vector(offsets));
      c->set_output(2, c->Vector(c->UnknownDim()));
      c->set_output(3, c->Matrix(c->UnknownDim(), 2));
      return Status();
    })
    .Doc(R"doc(
Conditional forward pass of an additive ensemble of perfect soft trees with
smooth-step routing (Hazimeh et al. 2020, Algorithm 1).

x: [batch, input_dim].
node_weights: [num_trees, 2**depth - 1, input_dim], heap order; S(<w_i, x> + b_i)
  is the probability of going to the left child.
node_bias: [num_trees, 2**depth - 1].
leaf_weights: [num_trees, 2**depth, units], leaves left to right.
gamma: scalar > 0, width of the smooth-step's fractional region.
output: [batch, units], the sum of the trees' outputs.
trace_offsets: [batch * num_trees + 1]; records of (sample b, tree m) are
  trace[trace_offsets[b*M+m] : trace_offsets[b*M+m+1]].
trace_index: the fractional tree of each (sample, tree) in post order:
  i >= 0 is internal node i, -(l+1) is leaf l.
trace_value: [records, 2]; internal node: (P(x->i) * S'(t_i), S(t_i));
  leaf: (P(x->l), 0).
with_trace: when false the trace outputs are empty (inference).
)doc");

REGISTER_OP("KerasTrees>SoftTreeEnsembleGrad")
    .Input("grad_output: T")
    .Input("x: T")
    .Input("node_weights: T")
    .Input("leaf_weights: T")
    .Input("trace_offsets: int64")
    .Input("trace_index: int32")
    .Input("trace_value: T")
    .Output("grad_x: T")
    .Output("grad_node_weights: T")
    .Output("grad_node_bias: T")
    .Output("grad_leaf_weights: T")
    .Attr("T: {float, double}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle gy, x, w, o, unused;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &gy));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 2, &x));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 3, &w));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(3), 3, &o));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(4), 1, &unused));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(5), 1, &unused));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(6), 2, &unused));
      c->set_output(0, x);
      c->set_output(1, w);
      c->set_output(2, c->Matrix(c->Dim(w, 0), c->Dim(w, 1)));
      c->set_output(3, o);
      return Status();
    })
    .Doc(R"doc(
Conditional backward pass over the fractional trees recorded by
KerasTrees>SoftTreeEnsemble (Hazimeh et al. 2020, Algorithm 2 and Theorem 1).
Returns the gradients of the loss with respect to x, the node weights, the node
biases and the leaf weights.
)doc");

// The trace-free pair: the output's size comes from the shapes alone (no
// data-dependent trace), so a GPU kernel sizes it without a host round trip;
// the gradient walks the reachable subtrees again instead of reading a trace.
// gamma is an ordinary (device) input: the kernels read it where it lives.
REGISTER_OP("KerasTrees>SoftTreeEnsembleTraceFree")
    .Input("x: T")
    .Input("node_weights: T")
    .Input("node_bias: T")
    .Input("leaf_weights: T")
    .Input("gamma: T")
    .Output("output: T")
    .Attr("T: {float, double}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle x, w, b, o, g;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &x));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 3, &w));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 2, &b));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(3), 3, &o));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(4), 0, &g));
      DimensionHandle unused;
      TF_RETURN_IF_ERROR(c->Merge(c->Dim(x, 1), c->Dim(w, 2), &unused));
      TF_RETURN_IF_ERROR(c->Merge(c->Dim(w, 0), c->Dim(o, 0), &unused));
      TF_RETURN_IF_ERROR(c->Merge(c->Dim(w, 0), c->Dim(b, 0), &unused));
      TF_RETURN_IF_ERROR(c->Merge(c->Dim(w, 1), c->Dim(b, 1), &unused));
      c->set_output(0, c->Matrix(c->Dim(x, 0), c->Dim(o, 2)));
      return Status();
    })
    .Doc(R"doc(
The output of KerasTrees>SoftTreeEnsemble without its trace: one walk of the
reachable subtree per (sample, tree) pair (core/tree_ensemble_pipeline.h).
The GPU kernel and, on the CPU, the CPU emulation of that GPU kernel.
)doc");

REGISTER_OP("KerasTrees>SoftTreeEnsembleTraceFreeGrad")
    .Input("grad_output: T")
    .Input("x: T")
    .Input("node_weights: T")
    .Input("node_bias: T")
    .Input("leaf_weights: T")
    .Input("gamma: T")
    .Output("grad_x: T")
    .Output("grad_node_weights: T")
    .Output("grad_node_bias: T")
    .Output("grad_leaf_weights: T")
    .Attr("T: {float, double}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle gy, x, w, b, o, g;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &gy));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 2, &x));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 3, &w));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(3), 2, &b));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(4), 3, &o));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(5), 0, &g));
      c->set_output(0, x);
      c->set_output(1, w);
      c->set_output(2, b);
      c->set_output(3, o);
      return Status();
    })
    .Doc(R"doc(
The gradients of KerasTrees>SoftTreeEnsembleTraceFree with respect to x, the
node weights, the node biases and the leaf weights: a second walk per (sample,
tree) pair (Hazimeh et al. 2020, Algorithm 2) in sample chunks, then owner
reductions in sample order (core/tree_ensemble_pipeline.h).
)doc");

}  // namespace keras_trees
