// The host entry point of the TensorFlow GPU kernel of loss-augmented
// inference (cuda/tf_loss_augmented.h): the pipeline of
// core/loss_augmented_pipeline.h on the CUDA executor (cuda/launch.cuh). Built with
// nvcc and emulated on the CPU only: not yet run on a GPU.
#include <cuda_runtime.h>

#include "cuda/launch.cuh"
#include "core/loss_augmented_pipeline.h"
#include "cuda/tf_loss_augmented.h"

namespace keras_trees {
namespace gpu {

template <typename T, typename TL>
std::string LossAugmentedInference(void* stream, const DeviceAllocator& allocate, const LossAugmentedDims& d,
                                   bool log_loss, bool fast, const T* x, const T* split_weights,
                                   const T* split_bias, const T* leaf_values, const TL* labels, int32_t* g_leaf,
                                   int32_t* h_leaf, T* score) {
  CudaExecutor exec(static_cast<cudaStream_t>(stream), allocate);
  return LossAugmentedPipeline<T, TL>(exec, d, log_loss, fast, x, split_weights, split_bias, leaf_values, labels,
                                      g_leaf, h_leaf, score);
}

#define KT_INSTANTIATE_TF_LOSS_AUGMENTED(T, TL)                                                                   \
  template std::string LossAugmentedInference<T, TL>(void*, const DeviceAllocator&, const LossAugmentedDims&, bool, \
                                                     bool, const T*, const T*, const T*, const T*, const TL*,      \
                                                     int32_t*, int32_t*, T*);

KT_INSTANTIATE_TF_LOSS_AUGMENTED(float, int32_t)
KT_INSTANTIATE_TF_LOSS_AUGMENTED(double, int32_t)
KT_INSTANTIATE_TF_LOSS_AUGMENTED(float, float)
KT_INSTANTIATE_TF_LOSS_AUGMENTED(double, double)

#undef KT_INSTANTIATE_TF_LOSS_AUGMENTED

}  // namespace gpu
}  // namespace keras_trees
