// TensorFlow CPU kernel of KerasTrees>LossAugmentedInference (non-greedy
// trees, Norouzi et al. 2015, Section 6): validate the inputs, allocate the
// outputs and run the core (core/loss_augmented.h) on TensorFlow's thread pool
// (the checks and outputs shared with the GPU kernel: loss_augmented_kernels.h).
#include "loss_augmented_kernels.h"

#include <cstdint>
#include <string>

#include "core/checks.h"
#include "core/loss_augmented.h"
#include "kernel_utils.h"

namespace keras_trees {

// The CPU kernel's work: the value checks, then the core on the thread pool.
template <typename T, typename TL>
struct LossAugmentedCpuRun {
  std::string operator()(::tensorflow::OpKernelContext* ctx, const LossAugmentedDims& d, bool log_loss, bool fast,
                         const T* x, const T* w, const T* b, const T* theta, const TL* y, int32_t* g, int32_t* h,
                         T* score) const {
    std::string message = CheckLossAugmentedValues<T, TL>(d, log_loss, x, w, b, theta, y);
    if (!message.empty()) return message;
    if (!LossAugmentedInference<T, TL>(d, log_loss, fast, x, w, b, theta, y, g, h, score, CpuParallelFor(ctx))) {
      return kSplitValueOverflow;
    }
    return "";
  }
};

template <typename T, typename TL>
using LossAugmentedInferenceOp = LossAugmentedInferenceKernel<T, TL, LossAugmentedCpuRun<T, TL>>;

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
