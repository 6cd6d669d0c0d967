// The trace-free TensorFlow kernels of the Tree Ensemble Layer
// (KerasTrees>SoftTreeEnsembleTraceFree and ...Grad), written once for
// both devices: the shape checks of the traced CPU kernels, outputs sized from
// the shapes alone (no host round trip), then `Run`'s pipeline
// (core/tree_ensemble_pipeline.h), which checks the values where the data
// lives and fails with the CPU kernels' words. `Run` is TelCpuRun (the CPU
// executor, tree_ensemble_kernels.cc) or TelGpuRun (the op's CUDA stream and
// allocate_temp, tree_ensemble_gpu_kernels.cc). gamma is a device input: the
// bodies read it where it lives; no scalar is read on the host.
#ifndef KERAS_TREES_TENSORFLOW_TREE_ENSEMBLE_KERNELS_H_
#define KERAS_TREES_TENSORFLOW_TREE_ENSEMBLE_KERNELS_H_

#include "core/checks.h"
#include "core/tree_ensemble.h"
#include "kernel_utils.h"

namespace keras_trees {

template <typename T, class Run>
class SoftTreeEnsembleTraceFreeOp : public tensorflow::OpKernel {
 public:
  using tensorflow::OpKernel::OpKernel;

  void Compute(tensorflow::OpKernelContext* ctx) override {
    const tensorflow::Tensor& x = ctx->input(0);
    const tensorflow::Tensor& w = ctx->input(1);
    const tensorflow::Tensor& b = ctx->input(2);
    const tensorflow::Tensor& o = ctx->input(3);
    const tensorflow::Tensor& g = ctx->input(4);
    SoftTreeDims d;
    KT_OP_REQUIRES_CHECK(ctx, CheckSoftTreeEnsembleShapes(ShapeOf(x), ShapeOf(w), ShapeOf(b), ShapeOf(o),
                                                          ShapeOf(g), &d));
    tensorflow::Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, tensorflow::TensorShape({d.batch, d.units}), &out));
    KT_OP_REQUIRES_CHECK(ctx, Run::template Forward<T>(ctx, d, x.flat<T>().data(), w.flat<T>().data(),
                                                       b.flat<T>().data(), o.flat<T>().data(),
                                                       g.flat<T>().data(), out->flat<T>().data()));
  }
};

template <typename T, class Run>
class SoftTreeEnsembleTraceFreeGradOp : public tensorflow::OpKernel {
 public:
  using tensorflow::OpKernel::OpKernel;

  void Compute(tensorflow::OpKernelContext* ctx) override {
    const tensorflow::Tensor& gy = ctx->input(0);
    const tensorflow::Tensor& x = ctx->input(1);
    const tensorflow::Tensor& w = ctx->input(2);
    const tensorflow::Tensor& b = ctx->input(3);
    const tensorflow::Tensor& o = ctx->input(4);
    const tensorflow::Tensor& g = ctx->input(5);
    SoftTreeDims d;
    KT_OP_REQUIRES_CHECK(ctx, CheckSoftTreeEnsembleShapes(ShapeOf(x), ShapeOf(w), ShapeOf(b), ShapeOf(o),
                                                          ShapeOf(g), &d));
    OP_REQUIRES(ctx, ShapeOf(gy) == (Shape{d.batch, d.units}),
                tensorflow::errors::InvalidArgument("grad_output must have the shape of the forward output"));
    tensorflow::Tensor *gx = nullptr, *gw = nullptr, *gb = nullptr, *go = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &gx));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, w.shape(), &gw));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, b.shape(), &gb));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, o.shape(), &go));
    KT_OP_REQUIRES_CHECK(ctx, Run::template Backward<T>(
                                  ctx, d, gy.flat<T>().data(), x.flat<T>().data(), w.flat<T>().data(),
                                  b.flat<T>().data(), o.flat<T>().data(), g.flat<T>().data(),
                                  gx->flat<T>().data(), gw->flat<T>().data(), gb->flat<T>().data(),
                                  go->flat<T>().data()));
  }
};

}  // namespace keras_trees

#endif  // KERAS_TREES_TENSORFLOW_TREE_ENSEMBLE_KERNELS_H_
