// Op registration of the library's runtime input checks inside TensorFlow
// graphs (keras_trees/validation/batched.py): one op per layer call instead of
// a reduction and an assertion per checked tensor. Kernel in check_kernels.cc.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"

namespace keras_trees {

REGISTER_OP("KerasTrees>Check")
    .Input("value: T")
    .Input("finite: Tfinite")
    .Input("oks: N * bool")
    .Input("topologies: M * int32")
    .Output("output: T")
    .Attr("T: type")
    .Attr("Tfinite: list({float, double}) >= 0")
    .Attr("N: int >= 0")
    .Attr("M: int >= 0")
    .Attr("messages: list(string)")
    .SetShapeFn(::tensorflow::shape_inference::UnchangedShape)
    .Doc(R"doc(
Returns `value` unchanged after checking that every tensor of `finite` holds
only finite values, that every scalar of `oks` is true and that every tensor
of `topologies` is a valid forest topology; otherwise fails with
InvalidArgument carrying the message of the first failed check.

value: the tensor the computation goes on with (forwarded, not copied).
finite: tensors that must be finite (float or double).
oks: scalar conditions that must hold.
topologies: node_state tensors [num_trees, 2**(depth+1) - 1] (heaps; see
  keras_trees/topology.py): every value ABSENT (0), LEAF (1) or SPLIT (2), every
  root present, no SPLIT on the last level, and a position present exactly
  when its parent is a SPLIT.
messages: one message per check: those of `finite`, then `oks`, then
  `topologies`.
output: `value`.
)doc");

}  // namespace keras_trees
