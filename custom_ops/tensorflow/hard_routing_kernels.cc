// TensorFlow CPU kernels of KerasTrees>HardRouting (oblique splits) and
// KerasTrees>HardRoutingExperts (noisy-OR / convex polytope splits with K
// experts): validate the inputs, allocate the outputs and run the routing
// engine of core/hard_routing.h on TensorFlow's thread pool.
#include "core/hard_routing.h"
#include "kernel_utils.h"

namespace keras_trees {

using ::tensorflow::errors::InvalidArgument;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

// Allocates the node and path_values outputs of inputs that CheckRoutingShapes
// accepted (*path_values is null without path values). Returns false with the
// error set on ctx.
template <typename T>
bool AllocateRoutingOutputs(OpKernelContext* ctx, bool with_path_values, const RoutingDims& d,
                            int32_t** node, T** path_values) {
  Tensor* node_t = nullptr;
  Tensor* path_t = nullptr;
  const int64_t levels = with_path_values ? d.depth : 0;
  if (!ctx->allocate_output(0, TensorShape({d.batch, d.trees}), &node_t).ok() ||
      !ctx->allocate_output(1, TensorShape({d.batch, d.trees, levels}), &path_t).ok()) {
    return false;
  }
  *node = node_t->flat<int32_t>().data();
  *path_values = with_path_values ? path_t->flat<T>().data() : nullptr;
  return true;
}

// Oblique splits: v = <split_weights[t, n], x> + split_bias[t, n].
template <typename T>
class HardRoutingOp : public OpKernel {
 public:
  explicit HardRoutingOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("with_path_values", &with_path_values_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& w = ctx->input(1);
    const Tensor& b = ctx->input(2);
    const Tensor& m = ctx->input(3);
    RoutingDims d;
    KT_OP_REQUIRES_CHECK(ctx, CheckRoutingShapes(false, ShapeOf(x), ShapeOf(w), ShapeOf(b),
                                                 ShapeOf(m), {}, {}, &d));
    KT_OP_REQUIRES_CHECK(ctx, CheckRoutingValues<T>(d, x.flat<T>().data(), w.flat<T>().data(),
                                                 b.flat<T>().data(), nullptr, nullptr));
    int32_t* node = nullptr;
    T* path_values = nullptr;
    if (!AllocateRoutingOutputs<T>(ctx, with_path_values_, d, &node, &path_values)) {
      return;
    }
    const bool finite = HardRoute<T>(d, x.flat<T>().data(), w.flat<T>().data(), b.flat<T>().data(),
                                     m.flat<bool>().data(), node, path_values, CpuParallelFor(ctx));
    OP_REQUIRES(ctx, finite, ::tensorflow::errors::InvalidArgument(kSplitValueOverflow));
  }

 private:
  bool with_path_values_;
};

// Noisy-OR (convex polytope) splits with K experts:
// v = sum_k r[t, n, k] * softplus(<w[t, n, k], x> + b[t, n, k]) - threshold[t, n].
template <typename T>
class HardRoutingExpertsOp : public OpKernel {
 public:
  explicit HardRoutingExpertsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("with_path_values", &with_path_values_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& w = ctx->input(1);
    const Tensor& b = ctx->input(2);
    const Tensor& r = ctx->input(3);
    const Tensor& c = ctx->input(4);
    const Tensor& m = ctx->input(5);
    RoutingDims d;
    KT_OP_REQUIRES_CHECK(ctx, CheckRoutingShapes(true, ShapeOf(x), ShapeOf(w), ShapeOf(b), ShapeOf(m),
                                                 ShapeOf(r), ShapeOf(c), &d));
    const T* rd = r.flat<T>().data();
    KT_OP_REQUIRES_CHECK(ctx, CheckRoutingValues<T>(d, x.flat<T>().data(), w.flat<T>().data(),
                                                 b.flat<T>().data(), rd, c.flat<T>().data()));
    int32_t* node = nullptr;
    T* path_values = nullptr;
    if (!AllocateRoutingOutputs<T>(ctx, with_path_values_, d, &node, &path_values)) {
      return;
    }
    const bool finite = HardRouteExperts<T>(d, x.flat<T>().data(), w.flat<T>().data(),
                                            b.flat<T>().data(), rd, c.flat<T>().data(),
                                            m.flat<bool>().data(), node, path_values,
                                            CpuParallelFor(ctx));
    OP_REQUIRES(ctx, finite, ::tensorflow::errors::InvalidArgument(kSplitValueOverflow));
  }

 private:
  bool with_path_values_;
};

#define REGISTER_HARD_ROUTING(T)                                                 \
  REGISTER_KERNEL_BUILDER(Name("KerasTrees>HardRouting")                         \
                              .Device(::tensorflow::DEVICE_CPU)                  \
                              .TypeConstraint<T>("T"),                           \
                          Guarded<HardRoutingOp<T>>);

REGISTER_HARD_ROUTING(float);
REGISTER_HARD_ROUTING(double);

#define REGISTER_HARD_ROUTING_EXPERTS(T)                                         \
  REGISTER_KERNEL_BUILDER(Name("KerasTrees>HardRoutingExperts")                  \
                              .Device(::tensorflow::DEVICE_CPU)                  \
                              .TypeConstraint<T>("T"),                           \
                          Guarded<HardRoutingExpertsOp<T>>);

REGISTER_HARD_ROUTING_EXPERTS(float);
REGISTER_HARD_ROUTING_EXPERTS(double);

}  // namespace keras_trees
