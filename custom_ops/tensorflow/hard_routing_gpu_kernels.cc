// TensorFlow GPU kernels of KerasTrees>HardRouting (oblique splits) and
// KerasTrees>HardRoutingExperts (noisy-OR / convex polytope splits): the shape
// checks and outputs of the CPU kernels (hard_routing_kernels.cc), then the
// kernel pipeline of core/hard_routing_pipeline.h on the op's CUDA stream
// (cuda/tf_entry.h), which checks the values on the device and fails with the
// CPU kernels' words. Compiled only in the CUDA build (KERAS_TREES_CUDA=1).
#if KERAS_TREES_CUDA

#include "core/checks.h"
#include "cuda/tf_entry.h"
#include "gpu_kernel_utils.h"
#include "kernel_utils.h"

namespace keras_trees {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

// One kernel for both split forms: oblique splits (inputs x, split_weights,
// split_bias, is_split) and, with `Experts`, noisy-OR splits (inputs x,
// split_weights, split_bias, expert_weights, threshold, is_split).
template <typename T, bool Experts>
class HardRoutingGpuOp : public OpKernel {
 public:
  explicit HardRoutingGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("with_path_values", &with_path_values_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& w = ctx->input(1);
    const Tensor& b = ctx->input(2);
    const Tensor* r = Experts ? &ctx->input(3) : nullptr;
    const Tensor* c = Experts ? &ctx->input(4) : nullptr;
    const Tensor& m = ctx->input(Experts ? 5 : 3);
    RoutingDims d;
    KT_OP_REQUIRES_CHECK(ctx, CheckRoutingShapes(Experts, ShapeOf(x), ShapeOf(w), ShapeOf(b), ShapeOf(m),
                                                 Experts ? ShapeOf(*r) : Shape{}, Experts ? ShapeOf(*c) : Shape{},
                                                 &d));
    Tensor* node = nullptr;
    Tensor* path = nullptr;
    const int64_t levels = with_path_values_ ? d.depth : 0;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({d.batch, d.trees}), &node));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({d.batch, d.trees, levels}), &path));
    GpuScratch scratch(ctx);
    KT_OP_REQUIRES_CHECK(ctx, gpu::HardRoute<T>(GpuStream(ctx), scratch.Allocator(), d, x.flat<T>().data(),
                                                w.flat<T>().data(), b.flat<T>().data(),
                                                Experts ? r->flat<T>().data() : nullptr,
                                                Experts ? c->flat<T>().data() : nullptr, m.flat<bool>().data(),
                                                node->flat<int32_t>().data(),
                                                with_path_values_ ? path->flat<T>().data() : nullptr));
  }

 private:
  bool with_path_values_;
};

#define REGISTER_HARD_ROUTING_GPU(T)                                                                   \
  REGISTER_KERNEL_BUILDER(                                                                             \
      Name("KerasTrees>HardRouting").Device(::tensorflow::DEVICE_GPU).TypeConstraint<T>("T"),          \
      Guarded<HardRoutingGpuOp<T, false>>);                                                            \
  REGISTER_KERNEL_BUILDER(                                                                             \
      Name("KerasTrees>HardRoutingExperts").Device(::tensorflow::DEVICE_GPU).TypeConstraint<T>("T"),   \
      Guarded<HardRoutingGpuOp<T, true>>);

REGISTER_HARD_ROUTING_GPU(float);
REGISTER_HARD_ROUTING_GPU(double);

}  // namespace keras_trees

#endif  // KERAS_TREES_CUDA
