// The loss-augmented inference pipeline (core/loss_augmented_pipeline.h) on the
// CUDA executor as a plain host function, for the TensorFlow GPU kernel
// (tensorflow/loss_augmented_gpu_kernels.cc, compiled by the host compiler
// against TensorFlow's headers). Defined in cuda/tf_loss_augmented.cu (nvcc)
// for (T, TL) = (float, int32_t), (double, int32_t), (float, float) and
// (double, double); the conventions of cuda/tf_entry.h (stream as void*,
// scratch from `allocate`, "" or the CPU kernel's error message, waits for its
// kernels before it returns). Every pointer in device memory.
#ifndef KERAS_TREES_CUDA_TF_LOSS_AUGMENTED_H_
#define KERAS_TREES_CUDA_TF_LOSS_AUGMENTED_H_

#include <cstdint>
#include <string>

#include "core/loss_augmented.h"  // LossAugmentedDims
#include "cuda/tf_entry.h"        // DeviceAllocator

namespace keras_trees {
namespace gpu {

template <typename T, typename TL>
std::string LossAugmentedInference(void* stream, const DeviceAllocator& allocate, const LossAugmentedDims& d,
                                   bool log_loss, bool fast, const T* x, const T* split_weights,
                                   const T* split_bias, const T* leaf_values, const TL* labels, int32_t* g_leaf,
                                   int32_t* h_leaf, T* score);

}  // namespace gpu
}  // namespace keras_trees

#endif  // KERAS_TREES_CUDA_TF_LOSS_AUGMENTED_H_
