// TensorFlow GPU kernel of KerasTrees>LossAugmentedInference: the shape and
// dtype checks and outputs of the CPU kernel (loss_augmented_kernels.cc), then
// the pipeline of core/loss_augmented_pipeline.h on the op's CUDA stream
// (cuda/tf_loss_augmented.h), which checks the values on the device and fails
// with the CPU kernel's words. Compiled only in the CUDA build
// (KERAS_TREES_CUDA=1); built, not yet run on a GPU.
#if KERAS_TREES_CUDA

#include <string>

#include "core/checks.h"
#include "cuda/tf_loss_augmented.h"
#include "gpu_kernel_utils.h"
#include "kernel_utils.h"

namespace keras_trees {

using ::tensorflow::DataTypeToEnum;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::errors::InvalidArgument;

template <typename T, typename TL>
class LossAugmentedInferenceGpuOp : public OpKernel {
 public:
  explicit LossAugmentedInferenceGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    std::string loss;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("loss", &loss));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("fast", &fast_));
    log_loss_ = loss == "log";
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& w = ctx->input(1);
    const Tensor& b = ctx->input(2);
    const Tensor& theta = ctx->input(3);
    const Tensor& y = ctx->input(4);
    LossAugmentedDims d;
    KT_OP_REQUIRES_CHECK(ctx, CheckLossAugmentedShapes(log_loss_, ShapeOf(x), ShapeOf(w), ShapeOf(b),
                                                       ShapeOf(theta), ShapeOf(y), &d));
    if (log_loss_) {
      OP_REQUIRES(ctx, (DataTypeToEnum<TL>::value == ::tensorflow::DT_INT32),
                  InvalidArgument("loss='log' needs int32 class labels"));
    } else {
      OP_REQUIRES(ctx, (DataTypeToEnum<TL>::value == DataTypeToEnum<T>::value),
                  InvalidArgument("loss='squared' needs targets of the same dtype as x"));
    }
    Tensor *g = nullptr, *h = nullptr, *score = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({d.batch}), &g));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({d.batch}), &h));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({d.batch}), &score));
    GpuScratch scratch(ctx);
    KT_OP_REQUIRES_CHECK(ctx, (gpu::LossAugmentedInference<T, TL>(
                                  GpuStream(ctx), scratch.Allocator(), d, log_loss_, fast_, x.flat<T>().data(),
                                  w.flat<T>().data(), b.flat<T>().data(), theta.flat<T>().data(),
                                  y.flat<TL>().data(), g->flat<int32_t>().data(), h->flat<int32_t>().data(),
                                  score->flat<T>().data())));
  }

 private:
  bool fast_;
  bool log_loss_;
};

#define REGISTER_LOSS_AUGMENTED_GPU(T, TL)                                  \
  REGISTER_KERNEL_BUILDER(Name("KerasTrees>LossAugmentedInference")         \
                              .Device(::tensorflow::DEVICE_GPU)             \
                              .TypeConstraint<T>("T")                       \
                              .TypeConstraint<TL>("Tlabels"),               \
                          Guarded<LossAugmentedInferenceGpuOp<T, TL>>);

REGISTER_LOSS_AUGMENTED_GPU(float, int32_t);
REGISTER_LOSS_AUGMENTED_GPU(double, int32_t);
REGISTER_LOSS_AUGMENTED_GPU(float, float);
REGISTER_LOSS_AUGMENTED_GPU(double, double);

}  // namespace keras_trees

#endif  // KERAS_TREES_CUDA
