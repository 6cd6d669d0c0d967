// The host entry points of the TensorFlow GPU kernels (cuda/tf_entry.h): the
// kernel pipelines (core/*_pipeline.h) on the CUDA executor (cuda/launch.cuh),
// instantiated for float and double.
#include <cuda_runtime.h>

#include "core/hard_routing_pipeline.h"
#include "core/hinge_pipeline.h"
#include "core/tree_ensemble_pipeline.h"
#include "cuda/launch.cuh"
#include "cuda/tf_entry.h"

namespace keras_trees {
namespace gpu {

namespace {

CudaExecutor MakeExecutor(void* stream, const DeviceAllocator& allocate) {
  return CudaExecutor(static_cast<cudaStream_t>(stream), allocate);
}

}  // namespace

template <typename T>
std::string HingeForestForward(void* stream, const DeviceAllocator& allocate, const HingeDims& d, bool fern,
                               const T* x, const T* thresholds, const int32_t* feature_indices,
                               const T* leaf_weights, T* output, int32_t* leaf, T* margin, int32_t* vertex) {
  CudaExecutor exec = MakeExecutor(stream, allocate);
  return HingeForestForwardPipeline<T>(exec, d, fern, x, thresholds, feature_indices, leaf_weights, output, leaf,
                                       margin, vertex);
}

template <typename T>
std::string HingeForestBackward(void* stream, const DeviceAllocator& allocate, const HingeDims& d,
                                const T* grad_output, const T* grad_margin, const int32_t* feature_indices,
                                const T* leaf_weights, const int32_t* leaf, const T* margin,
                                const int32_t* vertex, T* grad_x, T* grad_thresholds, T* grad_leaf_weights) {
  CudaExecutor exec = MakeExecutor(stream, allocate);
  return HingeForestBackwardPipeline<T>(exec, d, grad_output, grad_margin, feature_indices, leaf_weights, leaf,
                                        margin, vertex, grad_x, grad_thresholds, grad_leaf_weights);
}

template <typename T>
std::string HardRoute(void* stream, const DeviceAllocator& allocate, const RoutingDims& d, const T* x,
                      const T* split_weights, const T* split_bias, const T* expert_weights, const T* threshold,
                      const bool* is_split, int32_t* node, T* path_values) {
  CudaExecutor exec = MakeExecutor(stream, allocate);
  return HardRoutePipeline<T>(exec, d, x, split_weights, split_bias, expert_weights, threshold, is_split, node,
                              path_values);
}

template <typename T>
std::string SoftTreeEnsembleForward(void* stream, const DeviceAllocator& allocate, const SoftTreeDims& d,
                                    const T* x, const T* node_weights, const T* node_bias, const T* leaf_weights,
                                    const T* gamma, T* output) {
  CudaExecutor exec = MakeExecutor(stream, allocate);
  return SoftTreeEnsembleForwardPipeline<T>(exec, d, x, node_weights, node_bias, leaf_weights, gamma, output);
}

template <typename T>
std::string SoftTreeEnsembleBackward(void* stream, const DeviceAllocator& allocate, const SoftTreeDims& d,
                                     const T* grad_output, const T* x, const T* node_weights, const T* node_bias,
                                     const T* leaf_weights, const T* gamma, T* grad_x, T* grad_node_weights,
                                     T* grad_node_bias, T* grad_leaf_weights) {
  CudaExecutor exec = MakeExecutor(stream, allocate);
  return SoftTreeEnsembleBackwardPipeline<T>(exec, d, grad_output, x, node_weights, node_bias, leaf_weights, gamma,
                                             grad_x, grad_node_weights, grad_node_bias, grad_leaf_weights);
}

#define KT_INSTANTIATE_TF_ENTRY(T)                                                                           \
  template std::string HingeForestForward<T>(void*, const DeviceAllocator&, const HingeDims&, bool, const T*, \
                                             const T*, const int32_t*, const T*, T*, int32_t*, T*, int32_t*); \
  template std::string HingeForestBackward<T>(void*, const DeviceAllocator&, const HingeDims&, const T*,     \
                                              const T*, const int32_t*, const T*, const int32_t*, const T*, \
                                              const int32_t*, T*, T*, T*);                                  \
  template std::string HardRoute<T>(void*, const DeviceAllocator&, const RoutingDims&, const T*, const T*,  \
                                    const T*, const T*, const T*, const bool*, int32_t*, T*);        \
  template std::string SoftTreeEnsembleForward<T>(void*, const DeviceAllocator&, const SoftTreeDims&,      \
                                                  const T*, const T*, const T*, const T*, const T*, T*);   \
  template std::string SoftTreeEnsembleBackward<T>(void*, const DeviceAllocator&, const SoftTreeDims&,     \
                                                   const T*, const T*, const T*, const T*, const T*,       \
                                                   const T*, T*, T*, T*, T*);

KT_INSTANTIATE_TF_ENTRY(float)
KT_INSTANTIATE_TF_ENTRY(double)

#undef KT_INSTANTIATE_TF_ENTRY

}  // namespace gpu
}  // namespace keras_trees
