// TensorFlow CPU kernels of pruned probabilistic routing (KerasTrees>PrunedRouting*,
// registered in pruned_routing_ops.cc): validate the inputs, allocate the
// outputs and run the core (core/pruned_routing.h) on TensorFlow's thread pool
// (the attributes, shape checks and forward outputs shared with the GPU
// kernels: pruned_routing_kernels.h).
// One kernel template per pass (forward, backward, leaf statistics) over the
// two split forms (oblique, noisy-OR experts).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/pruned_routing.h"
#include "kernel_utils.h"
#include "pruned_routing_kernels.h"

namespace keras_trees {

using ::tensorflow::errors::InvalidArgument;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

namespace {

// Checks x, the split inputs that follow it (inputs first, first + 1, ...;
// is_split last) and their values (core/checks.h), and fills the dimensions
// (units excepted). Returns false with the error set on ctx.
template <typename T>
bool CheckInputs(OpKernelContext* ctx, int first, bool experts, PrunedRoutingDims* d) {
  if (!CheckPrunedSplitShapes(ctx, first, experts, d)) return false;
  // The threshold attribute is checked at construction.
  const int splits = experts ? 5 : 3;
  const T* split_data[5] = {};
  for (int i = 0; i < splits; ++i) split_data[i] = ctx->input(first + 1 + i).flat<T>().data();
  return PrunedRequire(ctx, CheckPrunedRoutingValues<T>(*d, ctx->input(first).flat<T>().data(), experts,
                                                        split_data, 0.0));
}

// The split inputs of each form, read after CheckInputs.
template <typename T>
struct ObliqueInputs {
  using Splits = ObliqueSplits<T>;
  using Grads = ObliqueSplitGrads<T>;
  static constexpr int kInputs = 5;      // x, split_weights, split_bias, gamma, is_split
  static constexpr int kGradOutputs = 3;  // split_weights, split_bias, gamma

  static bool Read(OpKernelContext* ctx, int first, bool /*annealed*/, PrunedRoutingDims* d,
                   Splits* s) {
    if (!CheckInputs<T>(ctx, first, false, d)) return false;
    s->weights = ctx->input(first + 1).flat<T>().data();
    s->bias = ctx->input(first + 2).flat<T>().data();
    s->gamma = ctx->input(first + 3).flat<T>().data();
    return true;
  }

  static Grads GradsFrom(T* const* outputs) { return Grads{outputs[0], outputs[1], outputs[2]}; }

};

template <typename T>
struct ExpertInputs {
  using Splits = ExpertSplits<T>;
  using Grads = ExpertSplitGrads<T>;
  // x, split_weights, split_bias, expert_weights, rate0, steepness, is_split
  static constexpr int kInputs = 7;
  static constexpr int kGradOutputs = 5;

  static bool Read(OpKernelContext* ctx, int first, bool annealed, PrunedRoutingDims* d,
                   Splits* s) {
    if (!CheckInputs<T>(ctx, first, true, d)) return false;
    s->weights = ctx->input(first + 1).flat<T>().data();
    s->bias = ctx->input(first + 2).flat<T>().data();
    s->expert_weights = ctx->input(first + 3).flat<T>().data();
    s->rate0 = ctx->input(first + 4).flat<T>().data();
    s->steepness = ctx->input(first + 5).flat<T>().data();
    s->annealed = annealed;
    return true;
  }

  static Grads GradsFrom(T* const* outputs) {
    return Grads{outputs[0], outputs[1], outputs[2], outputs[3], outputs[4]};
  }
};

}  // namespace

// Inputs: x, the split inputs, is_split, leaf_values. Outputs: output
// [batch, trees, units], kept_leaves and split_evaluations [batch, trees]
// (int32), dropped_mass [batch, trees].
template <typename T, typename Inputs>
class PrunedRoutingOp : public OpKernel, PrunedRoutingAttrs {
 public:
  explicit PrunedRoutingOp(OpKernelConstruction* ctx) : OpKernel(ctx), PrunedRoutingAttrs(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    PrunedRoutingDims d;
    typename Inputs::Splits splits;
    if (!Inputs::Read(ctx, 0, annealed_, &d, &splits)) return;
    if (!PrunedRequire(ctx, CheckPrunedLeafValues(ShapeOf(ctx->input(Inputs::kInputs)), &d))) return;
    const Tensor& values = ctx->input(Inputs::kInputs);
    KT_OP_REQUIRES_CHECK(ctx, CheckPrunedLeafValueData<T>(d, values.flat<T>().data()));
    Tensor *out = nullptr, *kept = nullptr, *evals = nullptr, *dropped = nullptr;
    if (!AllocatePrunedForwardOutputs(ctx, d, &out, &kept, &evals, &dropped)) return;
    const Tensor& is_split = ctx->input(Inputs::kInputs - 1);
    const Tensor& leaf_values = ctx->input(Inputs::kInputs);
    PrunedRoutingForward<T>(d, ctx->input(0).flat<T>().data(), splits,
                            is_split.flat<bool>().data(), leaf_values.flat<T>().data(),
                            T(threshold_),
                            out->flat<T>().data(), kept->flat<int32_t>().data(),
                            evals->flat<int32_t>().data(), dropped->flat<T>().data(),
                            CpuParallelFor(ctx));
  }
};

// Inputs: grad_output, then the forward op's inputs. Outputs: the gradients of
// x, of each split input (same shapes) and of leaf_values.
template <typename T, typename Inputs>
class PrunedRoutingGradOp : public OpKernel, PrunedRoutingAttrs {
 public:
  explicit PrunedRoutingGradOp(OpKernelConstruction* ctx)
      : OpKernel(ctx), PrunedRoutingAttrs(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    PrunedRoutingDims d;
    typename Inputs::Splits splits;
    if (!Inputs::Read(ctx, 1, annealed_, &d, &splits)) return;
    const Tensor& leaf_values = ctx->input(1 + Inputs::kInputs);
    if (!PrunedRequire(ctx, CheckPrunedLeafValues(ShapeOf(leaf_values), &d))) return;
    if (!PrunedRequire(ctx, CheckPerPair(ShapeOf(ctx->input(0)), "grad_output", &d))) return;
    T* grads[Inputs::kGradOutputs + 2];
    for (int i = 0; i < Inputs::kGradOutputs + 2; ++i) {
      // grad_x, the split inputs' gradients, then grad_leaf_values.
      const int input = i <= Inputs::kGradOutputs ? 1 + i : 1 + Inputs::kInputs;
      Tensor* out = nullptr;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(i, ctx->input(input).shape(), &out));
      grads[i] = out->flat<T>().data();
    }
    const Tensor& is_split = ctx->input(Inputs::kInputs);
    if (!x_grad_) std::fill_n(grads[0], d.batch * d.input_dim, T(0));
    PrunedRoutingBackward<T>(d, ctx->input(0).flat<T>().data(), ctx->input(1).flat<T>().data(),
                             splits, is_split.flat<bool>().data(),
                             leaf_values.flat<T>().data(), T(threshold_),
                             x_grad_ ? grads[0] : nullptr,
                             Inputs::GradsFrom(grads + 1), grads[Inputs::kGradOutputs + 1],
                             CpuParallelFor(ctx));
  }
};

// Inputs: weights [batch, trees, units], then x and the split inputs. Output:
// statistics [trees, 2 * num_internal + 1, units].
template <typename T, typename Inputs>
class PrunedLeafStatisticsOp : public OpKernel, PrunedRoutingAttrs {
 public:
  explicit PrunedLeafStatisticsOp(OpKernelConstruction* ctx)
      : OpKernel(ctx), PrunedRoutingAttrs(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    PrunedRoutingDims d;
    typename Inputs::Splits splits;
    if (!Inputs::Read(ctx, 1, annealed_, &d, &splits)) return;
    d.units = -1;
    if (!PrunedRequire(ctx, CheckPerPair(ShapeOf(ctx->input(0)), "weights", &d))) return;
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(
                            0, TensorShape({d.trees, 2 * d.num_internal + 1, d.units}), &out));
    const Tensor& is_split = ctx->input(Inputs::kInputs);
    PrunedLeafStatistics<T>(d, ctx->input(0).flat<T>().data(), ctx->input(1).flat<T>().data(),
                            splits, is_split.flat<bool>().data(),
                            T(threshold_), out->flat<T>().data(), CpuParallelFor(ctx));
  }
};

// Inputs: x, split_weights, split_bias, gamma, is_split, leaf_values,
// labels, sample_weight. Output: counts [trees, 2 * num_internal + 1, classes].
template <typename T>
class PrunedEmStatisticsOp : public OpKernel, PrunedRoutingAttrs {
 public:
  explicit PrunedEmStatisticsOp(OpKernelConstruction* ctx) : OpKernel(ctx), PrunedRoutingAttrs(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    PrunedRoutingDims d;
    ObliqueSplits<T> splits;
    if (!ObliqueInputs<T>::Read(ctx, 0, true, &d, &splits)) return;
    const Tensor& leaf_values = ctx->input(5);
    const Tensor& labels = ctx->input(6);
    const Tensor& weights = ctx->input(7);
    const std::string message = CheckEmInputs<T>(
        ShapeOf(leaf_values), ShapeOf(labels), ShapeOf(weights), leaf_values.flat<T>().data(),
        labels.flat<int32_t>().data(), weights.flat<T>().data(), &d);
    OP_REQUIRES(ctx, message.empty(), InvalidArgument(message));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(
                            0, TensorShape({d.trees, 2 * d.num_internal + 1, d.units}), &out));
    PrunedEmStatistics<T>(d, ctx->input(0).flat<T>().data(), splits, ctx->input(4).flat<bool>().data(),
                          leaf_values.flat<T>().data(), labels.flat<int32_t>().data(),
                          weights.flat<T>().data(), T(threshold_), out->flat<T>().data(),
                          CpuParallelFor(ctx));
  }
};

#define REGISTER_PRUNED_ROUTING(NAME, KERNEL, INPUTS, T)                                  \
  REGISTER_KERNEL_BUILDER(                                                                \
      Name(NAME).Device(::tensorflow::DEVICE_CPU).TypeConstraint<T>("T"), Guarded<KERNEL<T, INPUTS<T>>>);

#define REGISTER_PRUNED_ROUTING_ALL(T)                                                         \
  REGISTER_PRUNED_ROUTING("KerasTrees>PrunedRouting", PrunedRoutingOp, ObliqueInputs, T)        \
  REGISTER_PRUNED_ROUTING("KerasTrees>PrunedRoutingGrad", PrunedRoutingGradOp, ObliqueInputs, T) \
  REGISTER_PRUNED_ROUTING("KerasTrees>PrunedLeafStatistics", PrunedLeafStatisticsOp,            \
                          ObliqueInputs, T)                                                     \
  REGISTER_PRUNED_ROUTING("KerasTrees>PrunedRoutingExperts", PrunedRoutingOp, ExpertInputs, T)  \
  REGISTER_PRUNED_ROUTING("KerasTrees>PrunedRoutingExpertsGrad", PrunedRoutingGradOp,           \
                          ExpertInputs, T)                                                      \
  REGISTER_PRUNED_ROUTING("KerasTrees>PrunedLeafStatisticsExperts", PrunedLeafStatisticsOp,     \
                          ExpertInputs, T)

REGISTER_PRUNED_ROUTING_ALL(float);
REGISTER_PRUNED_ROUTING_ALL(double);

#define REGISTER_PRUNED_EM_STATISTICS(T)                                                   \
  REGISTER_KERNEL_BUILDER(Name("KerasTrees>PrunedEmStatistics")                            \
                              .Device(::tensorflow::DEVICE_CPU)                            \
                              .TypeConstraint<T>("T"),                                     \
                          Guarded<PrunedEmStatisticsOp<T>>);

REGISTER_PRUNED_EM_STATISTICS(float);
REGISTER_PRUNED_EM_STATISTICS(double);

}  // namespace keras_trees
