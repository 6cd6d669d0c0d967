// TensorFlow CPU kernel of KerasTrees>LossAugmentedInference (non-greedy
// trees, Norouzi et al. 2015, Section 6): validate the inputs, allocate the
// outputs and run the core (core/loss_augmented.h) on TensorFlow's thread pool.
#include <string>

#include "core/loss_augmented.h"
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
class LossAugmentedInferenceOp : public OpKernel {
 public:
  explicit LossAugmentedInferenceOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
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
    const T* xd = x.flat<T>().data();
    const T* wd = w.flat<T>().data();
    const T* bd = b.flat<T>().data();
    const T* td = theta.flat<T>().data();
    const TL* yd = y.flat<TL>().data();
    KT_OP_REQUIRES_CHECK(ctx, CheckLossAugmentedValues<T, TL>(d, log_loss_, xd, wd, bd, td, yd));
    const int64_t batch = d.batch;
    Tensor *g_t = nullptr, *h_t = nullptr, *s_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({batch}), &g_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({batch}), &h_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({batch}), &s_t));
    LossAugmentedInference<T, TL>(d, log_loss_, fast_, xd, wd, bd, td, yd,
                                  g_t->flat<int32_t>().data(), h_t->flat<int32_t>().data(),
                                  s_t->flat<T>().data(), CpuParallelFor(ctx));
  }

 private:
  bool fast_;
  bool log_loss_;
};

#define REGISTER_LOSS_AUGMENTED(T, TL)                                      \
  REGISTER_KERNEL_BUILDER(Name("KerasTrees>LossAugmentedInference")         \
                              .Device(::tensorflow::DEVICE_CPU)             \
                              .TypeConstraint<T>("T")                       \
                              .TypeConstraint<TL>("Tlabels"),               \
                          Guarded<LossAugmentedInferenceOp<T, TL>>);

REGISTER_LOSS_AUGMENTED(float, int32_t);
REGISTER_LOSS_AUGMENTED(double, int32_t);
REGISTER_LOSS_AUGMENTED(float, float);
REGISTER_LOSS_AUGMENTED(double, double);

}  // namespace keras_trees
