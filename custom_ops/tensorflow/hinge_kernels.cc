// TensorFlow CPU kernels of random hinge trees and ferns (Lay et al. 2018):
// validate the inputs, allocate the outputs and run the core (core/hinge.h) on
// TensorFlow's thread pool.
#include "core/hinge.h"
#include "kernel_utils.h"

namespace keras_trees {

using ::tensorflow::errors::InvalidArgument;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

namespace {

// Checks the parameter tensors shared by the forward and backward kernels.
// Errors are recorded on `ctx` (callers test ctx->status()).
void ValidateParameters(OpKernelContext* ctx, bool fern, const Tensor& x, const Tensor& f,
                        const Tensor& w, HingeDims* d) {
  KT_REQUIRE_RANK(ctx, x, 2, "x", "[batch, num_features]");
  KT_REQUIRE_RANK(ctx, f, 2, "feature_indices", "[num_trees, num_vertices]");
  KT_REQUIRE_RANK(ctx, w, 3, "leaf_weights", "[num_trees, 2**depth, units]");
  *d = MakeHingeDims(fern, x.dim_size(0), x.dim_size(1), f.dim_size(0), f.dim_size(1),
                     w.dim_size(2));
  if (fern) {
    OP_REQUIRES(ctx, d->depth >= 1,
                InvalidArgument("a fern has one threshold per level: thresholds.shape[1] is the "
                                "depth and must be in [1, ", kMaxDepth, "], got ", d->vertices));
  } else {
    OP_REQUIRES(ctx, d->depth >= 1,
                InvalidArgument("thresholds.shape[1] must be 2**depth - 1 (a perfect tree) with "
                                "1 <= depth <= ", kMaxDepth, ", got ", d->vertices));
  }
  OP_REQUIRES(ctx, w.dim_size(0) == d->trees && w.dim_size(1) == d->leaves,
              InvalidArgument("leaf_weights must have shape [", d->trees, ", ", d->leaves,
                              ", units] for ", d->trees, (fern ? " ferns" : " trees"),
                              " of depth ", d->depth, ", got ", w.shape().DebugString()));
}

// Every feature index must address a column of x.
void ValidateFeatureIndices(OpKernelContext* ctx, const Tensor& f, const HingeDims& d) {
  const int32_t* fd = f.flat<int32_t>().data();
  const int64_t n = d.trees * d.vertices;
  for (int64_t i = 0; i < n; ++i) {
    OP_REQUIRES(ctx, fd[i] >= 0 && fd[i] < d.features,
                InvalidArgument("feature_indices[", i / d.vertices, ", ", i % d.vertices, "] = ",
                                fd[i], " is out of range: x has ", d.features,
                                " features (valid indices are 0..", d.features - 1, ")"));
  }
}

}  // namespace

template <typename T>
class HingeForestOp : public OpKernel {
 public:
  explicit HingeForestOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("fern", &fern_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& t = ctx->input(1);
    const Tensor& f = ctx->input(2);
    const Tensor& w = ctx->input(3);
    HingeDims d;
    ValidateParameters(ctx, fern_, x, f, w, &d);
    if (!ctx->status().ok()) return;
    OP_REQUIRES(ctx, t.shape() == f.shape(),
                InvalidArgument("thresholds and feature_indices must have the same shape "
                                "[num_trees, num_vertices], got ", t.shape().DebugString(),
                                " and ", f.shape().DebugString()));
    ValidateFeatureIndices(ctx, f, d);
    if (!ctx->status().ok()) return;
    const T* xd = x.flat<T>().data();
    const T* td = t.flat<T>().data();
    OP_REQUIRES(ctx, AllFinite(xd, x.NumElements()),
                InvalidArgument("x contains NaN or Inf; hinge trees need finite inputs"));
    OP_REQUIRES(ctx, AllFinite(td, t.NumElements()),
                InvalidArgument("thresholds contain NaN or Inf (did training diverge?)"));

    Tensor *out = nullptr, *leaf = nullptr, *margin = nullptr, *vertex = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({d.batch, d.trees, d.units}), &out));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({d.batch, d.trees}), &leaf));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({d.batch, d.trees}), &margin));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, TensorShape({d.batch, d.trees}), &vertex));
    HingeForestForward<T>(d, fern_, xd, td, f.flat<int32_t>().data(), w.flat<T>().data(),
                          out->flat<T>().data(), leaf->flat<int32_t>().data(),
                          margin->flat<T>().data(), vertex->flat<int32_t>().data(),
                          CpuParallelFor(ctx));
  }

 private:
  bool fern_;
};

template <typename T>
class HingeForestGradOp : public OpKernel {
 public:
  explicit HingeForestGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("fern", &fern_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& gy = ctx->input(0);
    const Tensor& gm = ctx->input(1);
    const Tensor& x = ctx->input(2);
    const Tensor& f = ctx->input(3);
    const Tensor& w = ctx->input(4);
    const Tensor& leaf = ctx->input(5);
    const Tensor& margin = ctx->input(6);
    const Tensor& vertex = ctx->input(7);
    HingeDims d;
    ValidateParameters(ctx, fern_, x, f, w, &d);
    if (!ctx->status().ok()) return;
    const TensorShape pairs({d.batch, d.trees});
    OP_REQUIRES(ctx, gy.shape() == TensorShape({d.batch, d.trees, d.units}),
                InvalidArgument("grad_output must have shape [", d.batch, ", ", d.trees, ", ",
                                d.units, "], got ", gy.shape().DebugString()));
    OP_REQUIRES(ctx, gm.shape() == pairs && leaf.shape() == pairs && margin.shape() == pairs &&
                         vertex.shape() == pairs,
                InvalidArgument("grad_margin, leaf, margin and vertex must have shape [", d.batch,
                                ", ", d.trees, "]; pass the outputs of the same forward call"));

    Tensor *gx = nullptr, *gt = nullptr, *gw = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &gx));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, f.shape(), &gt));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, w.shape(), &gw));
    Tensor workspace;
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DataTypeToEnum<T>::value,
                                           TensorShape({HingeForestGradWorkspaceSize(d)}),
                                           &workspace));
    const bool ok = HingeForestBackward<T>(
        d, gy.flat<T>().data(), gm.flat<T>().data(), f.flat<int32_t>().data(),
        w.flat<T>().data(), leaf.flat<int32_t>().data(), margin.flat<T>().data(),
        vertex.flat<int32_t>().data(), workspace.flat<T>().data(), gx->flat<T>().data(),
        gt->flat<T>().data(), gw->flat<T>().data(), CpuParallelFor(ctx));
    OP_REQUIRES(ctx, ok,
                InvalidArgument("leaf, vertex or feature_indices out of range: pass the leaf, "
                                "margin and vertex outputs of the same forward call"));
  }

 private:
  bool fern_;
};

#define REGISTER_HINGE_FOREST(T)                                                            \
  REGISTER_KERNEL_BUILDER(                                                                  \
      Name("KerasTrees>HingeForest").Device(::tensorflow::DEVICE_CPU).TypeConstraint<T>("T"), \
      HingeForestOp<T>);                                                                    \
  REGISTER_KERNEL_BUILDER(Name("KerasTrees>HingeForestGrad")                               \
                              .Device(::tensorflow::DEVICE_CPU)                             \
                              .TypeConstraint<T>("T"),                                      \
                          HingeForestGradOp<T>);

REGISTER_HINGE_FOREST(float);
REGISTER_HINGE_FOREST(double);

}  // namespace keras_trees
