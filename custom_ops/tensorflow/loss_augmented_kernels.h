// The TensorFlow kernel of KerasTrees>LossAugmentedInference, written once for
// both devices: the attributes, the shape and label-dtype checks and the
// outputs, then `Run` on the inputs' data: LossAugmentedCpuRun (the value
// checks and the core, core/loss_augmented.h, on TensorFlow's thread pool;
// loss_augmented_kernels.cc) or LossAugmentedGpuRun (the pipeline of
// core/loss_augmented_pipeline.h on the op's CUDA stream, which checks the
// values on the device; loss_augmented_gpu_kernels.cc). `Run` returns an
// error message ("" when it ran).
#ifndef KERAS_TREES_TENSORFLOW_LOSS_AUGMENTED_KERNELS_H_
#define KERAS_TREES_TENSORFLOW_LOSS_AUGMENTED_KERNELS_H_

#include <cstdint>
#include <string>

#include "core/checks.h"
#include "core/loss_augmented.h"
#include "kernel_utils.h"

namespace keras_trees {

template <typename T, typename TL, class Run>
class LossAugmentedInferenceKernel : public ::tensorflow::OpKernel {
 public:
  explicit LossAugmentedInferenceKernel(::tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    std::string loss;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("loss", &loss));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("fast", &fast_));
    log_loss_ = loss == "log";
  }

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    using ::tensorflow::DataTypeToEnum;
    using ::tensorflow::Tensor;
    using ::tensorflow::TensorShape;
    using ::tensorflow::errors::InvalidArgument;
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
    KT_OP_REQUIRES_CHECK(ctx, Run()(ctx, d, log_loss_, fast_, x.flat<T>().data(), w.flat<T>().data(),
                                    b.flat<T>().data(), theta.flat<T>().data(), y.flat<TL>().data(),
                                    g->flat<int32_t>().data(), h->flat<int32_t>().data(),
                                    score->flat<T>().data()));
  }

 private:
  bool fast_;
  bool log_loss_;
};

}  // namespace keras_trees

#endif  // KERAS_TREES_TENSORFLOW_LOSS_AUGMENTED_KERNELS_H_
