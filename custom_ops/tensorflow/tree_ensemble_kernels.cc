// TensorFlow CPU kernels of the Tree Ensemble Layer: validate the inputs,
// allocate the outputs and run the core (core/tree_ensemble.h) on TensorFlow's
// thread pool. The trace-free pair (KerasTrees>SoftTreeEnsembleTraceFree[Grad])
// runs the GPU kernels' pipeline (core/tree_ensemble_pipeline.h) on the CPU
// executor instead: the CPU emulation of tree_ensemble_gpu_kernels.cc, for tests.
#include "core/launch_cpu.h"
#include "core/tree_ensemble.h"
#include "core/tree_ensemble_pipeline.h"
#include "kernel_utils.h"
#include "tree_ensemble_kernels.h"

namespace keras_trees {

using ::tensorflow::errors::InvalidArgument;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

namespace {

// The dimensions read off x [batch, input_dim], node_weights
// [trees, num_internal, ...] and leaf_weights [..., units], whose ranks the
// caller has checked; depth is -1 unless num_internal = 2**depth - 1.
SoftTreeDims EnsembleDims(const Tensor& x, const Tensor& w, const Tensor& o) {
  SoftTreeDims d;
  d.batch = x.dim_size(0);
  d.input_dim = x.dim_size(1);
  d.trees = w.dim_size(0);
  d.num_internal = w.dim_size(1);
  d.units = o.dim_size(2);
  d.depth = DepthFromInternalNodes(d.num_internal);
  return d;
}

}  // namespace

template <typename T>
class SoftTreeEnsembleOp : public OpKernel {
 public:
  explicit SoftTreeEnsembleOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("with_trace", &with_trace_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& w = ctx->input(1);
    const Tensor& b = ctx->input(2);
    const Tensor& o = ctx->input(3);
    const Tensor& g = ctx->input(4);
    SoftTreeDims d;
    KT_OP_REQUIRES_CHECK(ctx, CheckSoftTreeEnsembleShapes(ShapeOf(x), ShapeOf(w), ShapeOf(b),
                                                          ShapeOf(o), ShapeOf(g), &d));
    const T gamma = g.scalar<T>()();
    const T* xd = x.flat<T>().data();
    KT_OP_REQUIRES_CHECK(ctx, CheckSoftTreeEnsembleValues<T>(d, xd, w.flat<T>().data(), b.flat<T>().data(),
                                                          o.flat<T>().data(), gamma));

    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({d.batch, d.units}), &out));
    Tensor* offsets = nullptr;
    const int64_t pairs = with_trace_ ? d.batch * d.trees + 1 : 0;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({pairs}), &offsets));
    if (!with_trace_) {
      Tensor* unused = nullptr;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({0}), &unused));
      OP_REQUIRES_OK(ctx, ctx->allocate_output(3, TensorShape({0, 2}), &unused));
    }
    // The trace's length is known only after the walk: the core asks for its
    // outputs then.
    TraceOutput<T> trace;
    trace.offsets = offsets->flat<int64_t>().data();
    trace.allocate = [ctx](int64_t records, int32_t** index, T** value) {
      Tensor* index_t = nullptr;
      Tensor* value_t = nullptr;
      if (!ctx->allocate_output(2, TensorShape({records}), &index_t).ok()) return false;
      if (!ctx->allocate_output(3, TensorShape({records, 2}), &value_t).ok()) return false;
      *index = index_t->flat<int32_t>().data();
      *value = value_t->flat<T>().data();
      return true;
    };
    // A failed allocation has already set the error on ctx.
    SoftTreeEnsembleForward<T>(d, xd, w.flat<T>().data(), b.flat<T>().data(), o.flat<T>().data(),
                               gamma, out->flat<T>().data(), with_trace_ ? &trace : nullptr,
                               CpuParallelFor(ctx));
  }

 private:
  bool with_trace_;
};

template <typename T>
class SoftTreeEnsembleGradOp : public OpKernel {
 public:
  explicit SoftTreeEnsembleGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& gy = ctx->input(0);
    const Tensor& x = ctx->input(1);
    const Tensor& w = ctx->input(2);
    const Tensor& o = ctx->input(3);
    const Tensor& offsets = ctx->input(4);
    const Tensor& index = ctx->input(5);
    const Tensor& value = ctx->input(6);
    OP_REQUIRES(ctx, x.dims() == 2 && w.dims() == 3 && o.dims() == 3 && gy.dims() == 2,
                InvalidArgument("SoftTreeEnsembleGrad: x and grad_output must have rank 2, "
                                "node_weights and leaf_weights rank 3"));
    const SoftTreeDims d = EnsembleDims(x, w, o);
    const int64_t batch = d.batch, trees = d.trees, num_leaves = d.num_internal + 1;
    OP_REQUIRES(ctx, d.depth >= 1 && d.depth <= kMaxDepth && w.dim_size(2) == d.input_dim &&
                         o.dim_size(0) == trees && o.dim_size(1) == num_leaves,
                InvalidArgument("SoftTreeEnsembleGrad: inconsistent parameter shapes"));
    OP_REQUIRES(ctx, gy.dim_size(0) == batch && gy.dim_size(1) == d.units,
                InvalidArgument("grad_output must have shape [", batch, ", ", d.units, "], got ",
                                gy.shape().DebugString()));
    OP_REQUIRES(ctx, offsets.dims() == 1 && offsets.dim_size(0) == batch * trees + 1,
                InvalidArgument("trace_offsets must have ", batch * trees + 1,
                                " entries; pass the trace of the same forward call"));
    const int64_t total = index.NumElements();
    OP_REQUIRES(ctx, value.dims() == 2 && value.dim_size(0) == total && value.dim_size(1) == 2,
                InvalidArgument("trace_value must have shape [", total, ", 2]"));
    const int64_t* off = offsets.flat<int64_t>().data();
    for (int64_t i = 0; i < batch * trees; ++i) {
      OP_REQUIRES(ctx, off[i] <= off[i + 1] && off[i + 1] - off[i] < 2 * num_leaves,
                  InvalidArgument("trace_offsets is not a trace of this tree ensemble"));
    }
    OP_REQUIRES(ctx, off[0] == 0 && off[batch * trees] == total,
                InvalidArgument("trace_offsets does not match trace_index"));

    Tensor *gx = nullptr, *gw = nullptr, *gb = nullptr, *go = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &gx));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, w.shape(), &gw));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({trees, d.num_internal}), &gb));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, o.shape(), &go));
    Tensor workspace;
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DataTypeToEnum<T>::value,
                                           TensorShape({SoftTreeEnsembleGradWorkspaceSize(total)}),
                                           &workspace));
    const bool ok = SoftTreeEnsembleBackward<T>(
        d, gy.flat<T>().data(), x.flat<T>().data(), w.flat<T>().data(), o.flat<T>().data(), off,
        index.flat<int32_t>().data(), value.flat<T>().data(), workspace.flat<T>().data(),
        gx->flat<T>().data(), gw->flat<T>().data(), gb->flat<T>().data(), go->flat<T>().data(),
        CpuParallelFor(ctx));
    OP_REQUIRES(ctx, ok, InvalidArgument("trace_index is not a trace of trees of depth ", d.depth,
                                         " (node_weights of shape ", w.shape().DebugString(),
                                         "): pass the trace of the forward call with the same node_weights"));
  }
};

#define REGISTER_TREE_ENSEMBLE(T)                                                         \
  REGISTER_KERNEL_BUILDER(                                                                \
      Name("KerasTrees>SoftTreeEnsemble").Device(::tensorflow::DEVICE_CPU).TypeConstraint<T>("T"), \
      Guarded<SoftTreeEnsembleOp<T>>);                                                             \
  REGISTER_KERNEL_BUILDER(Name("KerasTrees>SoftTreeEnsembleGrad")                        \
                              .Device(::tensorflow::DEVICE_CPU)                           \
                              .TypeConstraint<T>("T"),                                    \
                          Guarded<SoftTreeEnsembleGradOp<T>>);

REGISTER_TREE_ENSEMBLE(float);
REGISTER_TREE_ENSEMBLE(double);

// The executors of the trace-free kernels on the CPU (the CPU emulation of the
// GPU kernels, keras_trees.ops._library.portable_bodies()): the pipeline on
// the GPU-emulating CPU executor over TensorFlow's thread pool, scratch memory
// from the heap.
struct TelCpuRun {
  template <typename T>
  static std::string Forward(OpKernelContext* ctx, const SoftTreeDims& d, const T* x, const T* w, const T* b,
                             const T* o, const T* g, T* out) {
    GpuEmulationExecutor exec(CpuParallelFor(ctx));
    return SoftTreeEnsembleForwardPipeline<T>(exec, d, x, w, b, o, g, out);
  }

  template <typename T>
  static std::string Backward(OpKernelContext* ctx, const SoftTreeDims& d, const T* gy, const T* x, const T* w,
                              const T* b, const T* o, const T* g, T* gx, T* gw, T* gb, T* go) {
    GpuEmulationExecutor exec(CpuParallelFor(ctx));
    return SoftTreeEnsembleBackwardPipeline<T>(exec, d, gy, x, w, b, o, g, gx, gw, gb, go);
  }
};

#define REGISTER_TREE_ENSEMBLE_TRACE_FREE_CPU(T)                                                      \
  REGISTER_KERNEL_BUILDER(                                                                           \
      Name("KerasTrees>SoftTreeEnsembleTraceFree").Device(::tensorflow::DEVICE_CPU).TypeConstraint<T>("T"), \
      Guarded<SoftTreeEnsembleTraceFreeOp<T, TelCpuRun>>);                                           \
  REGISTER_KERNEL_BUILDER(Name("KerasTrees>SoftTreeEnsembleTraceFreeGrad")                           \
                              .Device(::tensorflow::DEVICE_CPU)                                      \
                              .TypeConstraint<T>("T"),                                               \
                          Guarded<SoftTreeEnsembleTraceFreeGradOp<T, TelCpuRun>>);

REGISTER_TREE_ENSEMBLE_TRACE_FREE_CPU(float);
REGISTER_TREE_ENSEMBLE_TRACE_FREE_CPU(double);

}  // namespace keras_trees
