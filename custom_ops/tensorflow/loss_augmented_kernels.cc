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
    KT_REQUIRE_RANK(ctx, x, 2, "x", "[batch, input_dim]");
    KT_REQUIRE_RANK(ctx, w, 2, "split_weights", "[2**depth - 1, input_dim]");
    const int64_t batch = x.dim_size(0), p = x.dim_size(1);
    const int64_t num_internal = w.dim_size(0);
    const int depth = DepthFromInternalNodes(num_internal);
    OP_REQUIRES(ctx, depth >= 1 && depth <= kMaxDepth,
                InvalidArgument("split_weights.shape[0] must be 2**depth - 1 with 1 <= depth <= ",
                                kMaxDepth, ", got ", num_internal));
    OP_REQUIRES(ctx, w.dim_size(1) == p,
                InvalidArgument("split_weights.shape[1] (", w.dim_size(1),
                                ") must equal the input dimension x.shape[1] (", p, ")"));
    OP_REQUIRES(ctx, b.dims() == 1 && b.dim_size(0) == num_internal,
                InvalidArgument("split_bias must have shape [", num_internal, "], got ",
                                b.shape().DebugString()));
    const int64_t num_leaves = num_internal + 1;
    OP_REQUIRES(ctx, theta.dims() == 2 && theta.dim_size(0) == num_leaves && theta.dim_size(1) >= 1,
                InvalidArgument("leaf_values must have shape [", num_leaves, ", K >= 1], got ",
                                theta.shape().DebugString()));
    const int64_t k = theta.dim_size(1);
    if (log_loss_) {
      OP_REQUIRES(ctx, (DataTypeToEnum<TL>::value == ::tensorflow::DT_INT32),
                  InvalidArgument("loss='log' needs int32 class labels"));
      OP_REQUIRES(ctx, y.dims() == 1 && y.dim_size(0) == batch,
                  InvalidArgument("labels must have shape [", batch, "] for loss='log', got ",
                                  y.shape().DebugString()));
    } else {
      OP_REQUIRES(ctx, (DataTypeToEnum<TL>::value == DataTypeToEnum<T>::value),
                  InvalidArgument("loss='squared' needs targets of the same dtype as x"));
      OP_REQUIRES(ctx, y.dims() == 2 && y.dim_size(0) == batch && y.dim_size(1) == k,
                  InvalidArgument("targets must have shape [", batch, ", ", k,
                                  "] for loss='squared', got ", y.shape().DebugString()));
    }
    const T* xd = x.flat<T>().data();
    const T* wd = w.flat<T>().data();
    const T* bd = b.flat<T>().data();
    const T* td = theta.flat<T>().data();
    const TL* yd = y.flat<TL>().data();
    OP_REQUIRES(ctx, AllFinite(xd, x.NumElements()),
                InvalidArgument("x contains NaN or Inf; loss-augmented inference needs finite inputs"));
    OP_REQUIRES(ctx, AllFinite(wd, w.NumElements()) && AllFinite(bd, b.NumElements()),
                InvalidArgument("split_weights or split_bias contain NaN or Inf"));
    OP_REQUIRES(ctx, AllFinite(td, theta.NumElements()),
                InvalidArgument("leaf_values contain NaN or Inf"));
    if (log_loss_) {
      for (int64_t i = 0; i < batch; ++i) {
        const int64_t label = static_cast<int64_t>(yd[i]);
        OP_REQUIRES(ctx, label >= 0 && label < k,
                    InvalidArgument("labels[", i, "] = ", label, " is outside [0, ", k, ")"));
      }
    } else {
      OP_REQUIRES(ctx, AllFinite(yd, y.NumElements()),
                  InvalidArgument("targets contain NaN or Inf"));
    }

    Tensor *g_t = nullptr, *h_t = nullptr, *s_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({batch}), &g_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({batch}), &h_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({batch}), &s_t));
    const LossAugmentedDims d{batch, p, num_internal, k, depth};
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
                          LossAugmentedInferenceOp<T, TL>);

REGISTER_LOSS_AUGMENTED(float, int32_t);
REGISTER_LOSS_AUGMENTED(double, int32_t);
REGISTER_LOSS_AUGMENTED(float, float);
REGISTER_LOSS_AUGMENTED(double, double);

}  // namespace keras_trees
