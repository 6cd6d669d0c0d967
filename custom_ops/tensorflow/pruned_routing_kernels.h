// What the TensorFlow CPU kernels of pruned probabilistic routing
// (pruned_routing_kernels.cc) and its GPU kernels (pruned_routing_gpu_kernels.cc)
// share: the attributes and their check, the shape checks of x, the split
// inputs and is_split, and the forward op's outputs. The CPU kernels then check
// the values on the host, the GPU pipelines on the device.
#ifndef KERAS_TREES_TENSORFLOW_PRUNED_ROUTING_KERNELS_H_
#define KERAS_TREES_TENSORFLOW_PRUNED_ROUTING_KERNELS_H_

#include <cmath>
#include <string>
#include <vector>

#include "core/checks.h"
#include "kernel_utils.h"

namespace keras_trees {

// The threshold attribute (and `annealed` for the experts form, `x_grad` for
// the backward ops), checked at construction.
class PrunedRoutingAttrs {
 public:
  explicit PrunedRoutingAttrs(::tensorflow::OpKernelConstruction* ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("threshold", &threshold_));
    OP_REQUIRES(ctx, std::isfinite(threshold_) && threshold_ >= 0.0f && threshold_ < 1.0f,
                ::tensorflow::errors::InvalidArgument("threshold must be in [0, 1), got ", threshold_));
    if (ctx->HasAttr("annealed")) OP_REQUIRES_OK(ctx, ctx->GetAttr("annealed", &annealed_));
    if (ctx->HasAttr("x_grad")) OP_REQUIRES_OK(ctx, ctx->GetAttr("x_grad", &x_grad_));
  }

 protected:
  float threshold_ = 0.0f;
  bool annealed_ = true;
  bool x_grad_ = true;
};

// True when `message` is empty; else sets it as ctx's error and returns false.
inline bool PrunedRequire(::tensorflow::OpKernelContext* ctx, const std::string& message) {
  if (!message.empty()) ctx->CtxFailure(::tensorflow::errors::InvalidArgument(message));
  return message.empty();
}

// The shapes of x (input `first`), the split inputs that follow it (3 oblique,
// 5 experts) and is_split; fills the dimensions (units excepted). Returns false
// with the error set on ctx.
inline bool CheckPrunedSplitShapes(::tensorflow::OpKernelContext* ctx, int first, bool experts,
                                   PrunedRoutingDims* d) {
  const int splits = experts ? 5 : 3;
  std::vector<Shape> shapes;
  for (int i = 1; i <= splits; ++i) shapes.push_back(ShapeOf(ctx->input(first + i)));
  return PrunedRequire(ctx, CheckPrunedRoutingShapes(experts, ShapeOf(ctx->input(first)), shapes,
                                                     ShapeOf(ctx->input(first + splits + 1)), d));
}

// The forward op's outputs: output [batch, trees, units], kept_leaves and
// split_evaluations [batch, trees] (int32), dropped_mass [batch, trees].
// Returns false with the error set on ctx.
inline bool AllocatePrunedForwardOutputs(::tensorflow::OpKernelContext* ctx, const PrunedRoutingDims& d,
                                         ::tensorflow::Tensor** out, ::tensorflow::Tensor** kept,
                                         ::tensorflow::Tensor** evals, ::tensorflow::Tensor** dropped) {
  using ::tensorflow::TensorShape;
  ::tensorflow::Status status = ctx->allocate_output(0, TensorShape({d.batch, d.trees, d.units}), out);
  if (status.ok()) status = ctx->allocate_output(1, TensorShape({d.batch, d.trees}), kept);
  if (status.ok()) status = ctx->allocate_output(2, TensorShape({d.batch, d.trees}), evals);
  if (status.ok()) status = ctx->allocate_output(3, TensorShape({d.batch, d.trees}), dropped);
  if (!status.ok()) ctx->SetStatus(status);
  return status.ok();
}

}  // namespace keras_trees

#endif  // KERAS_TREES_TENSORFLOW_PRUNED_ROUTING_KERNELS_H_
