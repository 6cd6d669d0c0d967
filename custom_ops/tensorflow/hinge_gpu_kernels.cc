// TensorFlow GPU kernels of random hinge trees and ferns (Lay et al. 2018):
// the shape checks and outputs of the CPU kernels (hinge_kernels.cc), then the
// kernel pipeline of core/hinge_pipeline.h on the op's CUDA stream
// (cuda/tf_entry.h), which checks the values on the device and fails with the
// CPU kernels' words. Compiled only in the CUDA build (KERAS_TREES_CUDA=1).
#if KERAS_TREES_CUDA

#include "core/checks.h"
#include "cuda/tf_entry.h"
#include "gpu_kernel_utils.h"
#include "kernel_utils.h"

namespace keras_trees {

using ::tensorflow::errors::InvalidArgument;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

template <typename T>
class HingeForestGpuOp : public OpKernel {
 public:
  explicit HingeForestGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("fern", &fern_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& t = ctx->input(1);
    const Tensor& f = ctx->input(2);
    const Tensor& w = ctx->input(3);
    HingeDims d;
    KT_OP_REQUIRES_CHECK(ctx, CheckHingeShapes(fern_, ShapeOf(x), ShapeOf(t), ShapeOf(f), ShapeOf(w), &d));
    Tensor *out = nullptr, *leaf = nullptr, *margin = nullptr, *vertex = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({d.batch, d.trees, d.units}), &out));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({d.batch, d.trees}), &leaf));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({d.batch, d.trees}), &margin));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, TensorShape({d.batch, d.trees}), &vertex));
    GpuScratch scratch(ctx);
    KT_OP_REQUIRES_CHECK(ctx, gpu::HingeForestForward<T>(
                                  GpuStream(ctx), scratch.Allocator(), d, fern_, x.flat<T>().data(),
                                  t.flat<T>().data(), f.flat<int32_t>().data(), w.flat<T>().data(),
                                  out->flat<T>().data(), leaf->flat<int32_t>().data(), margin->flat<T>().data(),
                                  vertex->flat<int32_t>().data()));
  }

 private:
  bool fern_;
};

template <typename T>
class HingeForestGradGpuOp : public OpKernel {
 public:
  explicit HingeForestGradGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
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
    KT_OP_REQUIRES_CHECK(ctx, CheckHingeShapes(fern_, ShapeOf(x), ShapeOf(f), ShapeOf(f), ShapeOf(w), &d));
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
    GpuScratch scratch(ctx);
    KT_OP_REQUIRES_CHECK(ctx, gpu::HingeForestBackward<T>(
                                  GpuStream(ctx), scratch.Allocator(), d, gy.flat<T>().data(),
                                  gm.flat<T>().data(), f.flat<int32_t>().data(), w.flat<T>().data(),
                                  leaf.flat<int32_t>().data(), margin.flat<T>().data(),
                                  vertex.flat<int32_t>().data(), gx->flat<T>().data(), gt->flat<T>().data(),
                                  gw->flat<T>().data()));
  }

 private:
  bool fern_;
};

#define REGISTER_HINGE_FOREST_GPU(T)                                                                  \
  REGISTER_KERNEL_BUILDER(                                                                            \
      Name("KerasTrees>HingeForest").Device(::tensorflow::DEVICE_GPU).TypeConstraint<T>("T"),         \
      Guarded<HingeForestGpuOp<T>>);                                                                  \
  REGISTER_KERNEL_BUILDER(                                                                            \
      Name("KerasTrees>HingeForestGrad").Device(::tensorflow::DEVICE_GPU).TypeConstraint<T>("T"),     \
      Guarded<HingeForestGradGpuOp<T>>);

REGISTER_HINGE_FOREST_GPU(float);
REGISTER_HINGE_FOREST_GPU(double);

}  // namespace keras_trees

#endif  // KERAS_TREES_CUDA
