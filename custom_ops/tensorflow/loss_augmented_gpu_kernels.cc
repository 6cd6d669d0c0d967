// TensorFlow GPU kernel of KerasTrees>LossAugmentedInference: the shape and
// dtype checks and outputs shared with the CPU kernel (loss_augmented_kernels.h), then
// the pipeline of core/loss_augmented_pipeline.h on the op's CUDA stream
// (cuda/tf_loss_augmented.h), which checks the values on the device and fails
// with the CPU kernel's words. Compiled only in the CUDA build
// (KERAS_TREES_CUDA=1); built, not yet run on a GPU.
#if KERAS_TREES_CUDA

#include <cstdint>
#include <string>

#include "cuda/tf_loss_augmented.h"
#include "gpu_kernel_utils.h"
#include "kernel_utils.h"
#include "loss_augmented_kernels.h"

namespace keras_trees {

// The GPU kernel's work: the pipeline on the op's stream with allocate_temp scratch.
template <typename T, typename TL>
struct LossAugmentedGpuRun {
  std::string operator()(::tensorflow::OpKernelContext* ctx, const LossAugmentedDims& d, bool log_loss, bool fast,
                         const T* x, const T* w, const T* b, const T* theta, const TL* y, int32_t* g, int32_t* h,
                         T* score) const {
    GpuScratch scratch(ctx);
    return gpu::LossAugmentedInference<T, TL>(GpuStream(ctx), scratch.Allocator(), d, log_loss, fast, x, w, b, theta,
                                              y, g, h, score);
  }
};

template <typename T, typename TL>
using LossAugmentedInferenceGpuOp = LossAugmentedInferenceKernel<T, TL, LossAugmentedGpuRun<T, TL>>;

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
