// The host entry points of the TensorFlow GPU kernels of pruned probabilistic
// routing (cuda/tf_pruned_routing.h): the pipelines of
// core/pruned_routing_pipeline.h on the CUDA executor (cuda/launch.cuh),
// instantiated for float and double. Built with nvcc and emulated on the CPU
// only (through the JAX targets "KerasTreesPruned...Portable"): not yet run
// on a GPU.
#include <cuda_runtime.h>

#include "core/pruned_routing_pipeline.h"
#include "cuda/launch.cuh"
#include "cuda/tf_pruned_routing.h"

namespace keras_trees {
namespace gpu {

namespace {

CudaExecutor MakeExecutor(void* stream, const DeviceAllocator& allocate) {
  return CudaExecutor(static_cast<cudaStream_t>(stream), allocate);
}

}  // namespace

template <typename T>
std::string PrunedRoutingForward(void* stream, const DeviceAllocator& allocate, const PrunedRoutingDims& d,
                                 const T* x, const pruned::Splits<T>& splits, const bool* is_split,
                                 const T* leaf_values, T threshold, T* output, int32_t* kept_leaves,
                                 int32_t* split_evaluations, T* dropped_mass) {
  CudaExecutor exec = MakeExecutor(stream, allocate);
  return PrunedRoutingForwardPipeline<T>(exec, d, x, splits, is_split, leaf_values, threshold, output, kept_leaves,
                                         split_evaluations, dropped_mass);
}

template <typename T>
std::string PrunedRoutingBackward(void* stream, const DeviceAllocator& allocate, const PrunedRoutingDims& d,
                                  const T* grad_output, const T* x, const pruned::Splits<T>& splits,
                                  const bool* is_split, const T* leaf_values, T threshold, T* grad_x, bool x_grad,
                                  const PrunedGrads<T>& grads, T* grad_leaf_values) {
  CudaExecutor exec = MakeExecutor(stream, allocate);
  PrunedSplitGrads<T> g;
  g.weights = grads.weights;
  g.bias = grads.bias;
  g.gamma = grads.gamma;
  g.expert_weights = grads.expert_weights;
  g.rate0 = grads.rate0;
  return PrunedRoutingBackwardPipeline<T>(exec, d, grad_output, x, splits, is_split, leaf_values, threshold, grad_x,
                                          x_grad, g, grad_leaf_values);
}

template <typename T>
std::string PrunedLeafStatistics(void* stream, const DeviceAllocator& allocate, const PrunedRoutingDims& d,
                                 const T* weights, const T* x, const pruned::Splits<T>& splits,
                                 const bool* is_split, T threshold, T* statistics) {
  CudaExecutor exec = MakeExecutor(stream, allocate);
  return PrunedLeafStatisticsPipeline<T>(exec, d, weights, x, splits, is_split, threshold, statistics);
}

template <typename T>
std::string PrunedEmStatistics(void* stream, const DeviceAllocator& allocate, const PrunedRoutingDims& d,
                               const T* x, const pruned::Splits<T>& splits, const bool* is_split,
                               const T* leaf_values, const int32_t* labels, const T* sample_weight, T threshold,
                               T* counts) {
  CudaExecutor exec = MakeExecutor(stream, allocate);
  return PrunedEmStatisticsPipeline<T>(exec, d, x, splits, is_split, leaf_values, labels, sample_weight, threshold,
                                       counts);
}

#define KT_INSTANTIATE_TF_PRUNED(T)                                                                               \
  template std::string PrunedRoutingForward<T>(void*, const DeviceAllocator&, const PrunedRoutingDims&, const T*, \
                                               const pruned::Splits<T>&, const bool*, const T*, T, T*, int32_t*,  \
                                               int32_t*, T*);                                                     \
  template std::string PrunedRoutingBackward<T>(void*, const DeviceAllocator&, const PrunedRoutingDims&,         \
                                                const T*, const T*, const pruned::Splits<T>&, const bool*,        \
                                                const T*, T, T*, bool, const PrunedGrads<T>&, T*);                \
  template std::string PrunedLeafStatistics<T>(void*, const DeviceAllocator&, const PrunedRoutingDims&, const T*, \
                                               const T*, const pruned::Splits<T>&, const bool*, T, T*);           \
  template std::string PrunedEmStatistics<T>(void*, const DeviceAllocator&, const PrunedRoutingDims&, const T*,   \
                                             const pruned::Splits<T>&, const bool*, const T*, const int32_t*,     \
                                             const T*, T, T*);

KT_INSTANTIATE_TF_PRUNED(float)
KT_INSTANTIATE_TF_PRUNED(double)

#undef KT_INSTANTIATE_TF_PRUNED

}  // namespace gpu
}  // namespace keras_trees
