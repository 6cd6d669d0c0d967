// TensorFlow GPU kernels of pruned probabilistic routing (KerasTrees>Pruned*,
// registered in pruned_routing_ops.cc; CPU kernels in
// pruned_routing_kernels.cc): the attributes, shape checks and outputs shared
// with the CPU kernels (pruned_routing_kernels.h), then the pipelines of
// core/pruned_routing_pipeline.h on the op's CUDA stream (cuda/tf_pruned_routing.h), which check the values on the
// device and fail with the CPU kernels' words. The threshold (and annealed,
// x_grad) are attributes: host scalars. Compiled only in the CUDA build
// (KERAS_TREES_CUDA=1); built, not yet run on a GPU.
#if KERAS_TREES_CUDA

#include <cmath>
#include <string>
#include <vector>

#include "core/checks.h"
#include "cuda/tf_pruned_routing.h"
#include "gpu_kernel_utils.h"
#include "kernel_utils.h"
#include "pruned_routing_kernels.h"

namespace keras_trees {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::errors::InvalidArgument;

namespace {

// x, the split inputs and is_split from input `first` on: shapes (the values
// are checked on the device by the pipelines) and device pointers. Returns
// false with the error set on ctx.
template <typename T>
bool ReadSplits(OpKernelContext* ctx, int first, bool experts, bool annealed, PrunedRoutingDims* d,
                pruned::Splits<T>* sp) {
  if (!CheckPrunedSplitShapes(ctx, first, experts, d)) return false;
  sp->weights = ctx->input(first + 1).flat<T>().data();
  sp->bias = ctx->input(first + 2).flat<T>().data();
  if (experts) {
    sp->expert_weights = ctx->input(first + 3).flat<T>().data();
    sp->rate0 = ctx->input(first + 4).flat<T>().data();
    sp->gamma = ctx->input(first + 5).flat<T>().data();  // steepness
  } else {
    sp->gamma = ctx->input(first + 3).flat<T>().data();
  }
  sp->annealed = annealed;
  return true;
}

}  // namespace

// Inputs: x, the split inputs, is_split, leaf_values. Outputs: output
// [batch, trees, units], kept_leaves and split_evaluations [batch, trees]
// (int32), dropped_mass [batch, trees].
template <typename T, bool kExperts>
class PrunedRoutingGpuOp : public OpKernel, PrunedRoutingAttrs {
 public:
  explicit PrunedRoutingGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx), PrunedRoutingAttrs(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    constexpr int kSplits = kExperts ? 5 : 3;
    PrunedRoutingDims d;
    pruned::Splits<T> sp;
    if (!ReadSplits<T>(ctx, 0, kExperts, annealed_, &d, &sp)) return;
    const Tensor& leaf_values = ctx->input(kSplits + 2);
    if (!PrunedRequire(ctx, CheckPrunedLeafValues(ShapeOf(leaf_values), &d))) return;
    Tensor *out = nullptr, *kept = nullptr, *evals = nullptr, *dropped = nullptr;
    if (!AllocatePrunedForwardOutputs(ctx, d, &out, &kept, &evals, &dropped)) return;
    GpuScratch scratch(ctx);
    KT_OP_REQUIRES_CHECK(ctx, gpu::PrunedRoutingForward<T>(
                                  GpuStream(ctx), scratch.Allocator(), d, ctx->input(0).flat<T>().data(), sp,
                                  ctx->input(kSplits + 1).flat<bool>().data(), leaf_values.flat<T>().data(),
                                  T(threshold_), out->flat<T>().data(), kept->flat<int32_t>().data(),
                                  evals->flat<int32_t>().data(), dropped->flat<T>().data()));
  }
};

// Inputs: grad_output, then the forward op's inputs. Outputs: the gradients of
// x, of each split input (same shapes) and of leaf_values.
template <typename T, bool kExperts>
class PrunedRoutingGradGpuOp : public OpKernel, PrunedRoutingAttrs {
 public:
  explicit PrunedRoutingGradGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx), PrunedRoutingAttrs(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    constexpr int kSplits = kExperts ? 5 : 3;
    PrunedRoutingDims d;
    pruned::Splits<T> sp;
    if (!ReadSplits<T>(ctx, 1, kExperts, annealed_, &d, &sp)) return;
    const Tensor& leaf_values = ctx->input(kSplits + 3);
    if (!PrunedRequire(ctx, CheckPrunedLeafValues(ShapeOf(leaf_values), &d))) return;
    if (!PrunedRequire(ctx, CheckPerPair(ShapeOf(ctx->input(0)), "grad_output", &d))) return;
    // grad_x, the split inputs' gradients, then grad_leaf_values.
    T* grads[kSplits + 2];
    for (int i = 0; i < kSplits + 2; ++i) {
      const int input = i <= kSplits ? 1 + i : kSplits + 3;
      Tensor* out = nullptr;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(i, ctx->input(input).shape(), &out));
      grads[i] = out->flat<T>().data();
    }
    gpu::PrunedGrads<T> g;
    g.weights = grads[1];
    g.bias = grads[2];
    if (kExperts) {
      g.expert_weights = grads[3];
      g.rate0 = grads[4];
      g.gamma = grads[5];  // steepness
    } else {
      g.gamma = grads[3];
    }
    GpuScratch scratch(ctx);
    KT_OP_REQUIRES_CHECK(ctx, gpu::PrunedRoutingBackward<T>(
                                  GpuStream(ctx), scratch.Allocator(), d, ctx->input(0).flat<T>().data(),
                                  ctx->input(1).flat<T>().data(), sp, ctx->input(kSplits + 2).flat<bool>().data(),
                                  leaf_values.flat<T>().data(), T(threshold_), grads[0], x_grad_, g,
                                  grads[kSplits + 1]));
  }
};

// Inputs: weights [batch, trees, units], then x and the split inputs. Output:
// statistics [trees, 2 * num_internal + 1, units].
template <typename T, bool kExperts>
class PrunedLeafStatisticsGpuOp : public OpKernel, PrunedRoutingAttrs {
 public:
  explicit PrunedLeafStatisticsGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx), PrunedRoutingAttrs(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    constexpr int kSplits = kExperts ? 5 : 3;
    PrunedRoutingDims d;
    pruned::Splits<T> sp;
    if (!ReadSplits<T>(ctx, 1, kExperts, annealed_, &d, &sp)) return;
    d.units = -1;
    if (!PrunedRequire(ctx, CheckPerPair(ShapeOf(ctx->input(0)), "weights", &d))) return;
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({d.trees, 2 * d.num_internal + 1, d.units}), &out));
    GpuScratch scratch(ctx);
    KT_OP_REQUIRES_CHECK(ctx, gpu::PrunedLeafStatistics<T>(
                                  GpuStream(ctx), scratch.Allocator(), d, ctx->input(0).flat<T>().data(),
                                  ctx->input(1).flat<T>().data(), sp, ctx->input(kSplits + 2).flat<bool>().data(),
                                  T(threshold_), out->flat<T>().data()));
  }
};

// Inputs: x, split_weights, split_bias, gamma, is_split, leaf_values, labels,
// sample_weight. Output: counts [trees, 2 * num_internal + 1, classes]. The
// shape checks of CheckEmInputs here, its value checks on the device.
template <typename T>
class PrunedEmStatisticsGpuOp : public OpKernel, PrunedRoutingAttrs {
 public:
  explicit PrunedEmStatisticsGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx), PrunedRoutingAttrs(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    using checks_internal::Exact;
    PrunedRoutingDims d;
    pruned::Splits<T> sp;
    if (!ReadSplits<T>(ctx, 0, false, true, &d, &sp)) return;
    const Tensor& leaf_values = ctx->input(5);
    const Tensor& labels = ctx->input(6);
    const Tensor& weights = ctx->input(7);
    if (!PrunedRequire(ctx, CheckPrunedLeafValues(ShapeOf(leaf_values), &d))) return;
    OP_REQUIRES(ctx, d.units >= 1,
                InvalidArgument("leaf_values must have at least one class (leaf_values.shape[2] >= 1)"));
    if (!PrunedRequire(ctx, Exact(ShapeOf(labels), {d.batch}, "labels"))) return;
    if (!PrunedRequire(ctx, Exact(ShapeOf(weights), {d.batch}, "sample_weight"))) return;
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({d.trees, 2 * d.num_internal + 1, d.units}), &out));
    GpuScratch scratch(ctx);
    KT_OP_REQUIRES_CHECK(ctx, gpu::PrunedEmStatistics<T>(
                                  GpuStream(ctx), scratch.Allocator(), d, ctx->input(0).flat<T>().data(), sp,
                                  ctx->input(4).flat<bool>().data(), leaf_values.flat<T>().data(),
                                  labels.flat<int32_t>().data(), weights.flat<T>().data(), T(threshold_),
                                  out->flat<T>().data()));
  }
};

// One name per (kernel, form): a template argument list holds a comma, which
// a macro argument cannot.
template <typename T>
using ObliqueForwardGpu = PrunedRoutingGpuOp<T, false>;
template <typename T>
using ObliqueGradGpu = PrunedRoutingGradGpuOp<T, false>;
template <typename T>
using ObliqueStatisticsGpu = PrunedLeafStatisticsGpuOp<T, false>;
template <typename T>
using ExpertForwardGpu = PrunedRoutingGpuOp<T, true>;
template <typename T>
using ExpertGradGpu = PrunedRoutingGradGpuOp<T, true>;
template <typename T>
using ExpertStatisticsGpu = PrunedLeafStatisticsGpuOp<T, true>;

#define REGISTER_PRUNED_GPU(NAME, KERNEL, T) \
  REGISTER_KERNEL_BUILDER(Name(NAME).Device(::tensorflow::DEVICE_GPU).TypeConstraint<T>("T"), Guarded<KERNEL<T>>);

#define REGISTER_PRUNED_GPU_ALL(T)                                                           \
  REGISTER_PRUNED_GPU("KerasTrees>PrunedRouting", ObliqueForwardGpu, T)                     \
  REGISTER_PRUNED_GPU("KerasTrees>PrunedRoutingGrad", ObliqueGradGpu, T)                    \
  REGISTER_PRUNED_GPU("KerasTrees>PrunedLeafStatistics", ObliqueStatisticsGpu, T)           \
  REGISTER_PRUNED_GPU("KerasTrees>PrunedRoutingExperts", ExpertForwardGpu, T)               \
  REGISTER_PRUNED_GPU("KerasTrees>PrunedRoutingExpertsGrad", ExpertGradGpu, T)              \
  REGISTER_PRUNED_GPU("KerasTrees>PrunedLeafStatisticsExperts", ExpertStatisticsGpu, T)     \
  REGISTER_PRUNED_GPU("KerasTrees>PrunedEmStatistics", PrunedEmStatisticsGpuOp, T)

REGISTER_PRUNED_GPU_ALL(float)
REGISTER_PRUNED_GPU_ALL(double)

#undef REGISTER_PRUNED_GPU_ALL
#undef REGISTER_PRUNED_GPU

}  // namespace keras_trees

#endif  // KERAS_TREES_CUDA
