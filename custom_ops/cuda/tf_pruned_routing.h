// The pruned probabilistic routing pipelines (core/pruned_routing_pipeline.h)
// on the CUDA executor as plain host functions, for the TensorFlow GPU kernels
// (tensorflow/pruned_routing_gpu_kernels.cc, compiled by the host compiler
// against TensorFlow's headers). Defined in cuda/tf_pruned_routing.cu (nvcc)
// for float and double, with the conventions of cuda/tf_entry.h (stream as
// void*, scratch from `allocate`, "" or the CPU kernels' error message, every
// call waits for its kernels before it returns). Every pointer in device
// memory; the threshold is a host scalar (the ops' attribute).
#ifndef KERAS_TREES_CUDA_TF_PRUNED_ROUTING_H_
#define KERAS_TREES_CUDA_TF_PRUNED_ROUTING_H_

#include <cstdint>
#include <string>

#include "core/pruned_routing.h"         // PrunedRoutingDims
#include "core/pruned_routing_bodies.h"  // pruned::Splits
#include "cuda/tf_entry.h"               // DeviceAllocator

namespace keras_trees {
namespace gpu {

// Gradients of the split inputs (the forms' layouts, as PrunedSplitGrads of
// core/pruned_routing_pipeline.h; expert_weights and rate0 null for oblique
// splits; gamma is the steepness of noisy-OR splits).
template <typename T>
struct PrunedGrads {
  T* weights = nullptr;
  T* bias = nullptr;
  T* gamma = nullptr;
  T* expert_weights = nullptr;
  T* rate0 = nullptr;
};

template <typename T>
std::string PrunedRoutingForward(void* stream, const DeviceAllocator& allocate, const PrunedRoutingDims& d,
                                 const T* x, const pruned::Splits<T>& splits, const bool* is_split,
                                 const T* leaf_values, T threshold, T* output, int32_t* kept_leaves,
                                 int32_t* split_evaluations, T* dropped_mass);

template <typename T>
std::string PrunedRoutingBackward(void* stream, const DeviceAllocator& allocate, const PrunedRoutingDims& d,
                                  const T* grad_output, const T* x, const pruned::Splits<T>& splits,
                                  const bool* is_split, const T* leaf_values, T threshold, T* grad_x, bool x_grad,
                                  const PrunedGrads<T>& grads, T* grad_leaf_values);

template <typename T>
std::string PrunedLeafStatistics(void* stream, const DeviceAllocator& allocate, const PrunedRoutingDims& d,
                                 const T* weights, const T* x, const pruned::Splits<T>& splits,
                                 const bool* is_split, T threshold, T* statistics);

template <typename T>
std::string PrunedEmStatistics(void* stream, const DeviceAllocator& allocate, const PrunedRoutingDims& d,
                               const T* x, const pruned::Splits<T>& splits, const bool* is_split,
                               const T* leaf_values, const int32_t* labels, const T* sample_weight, T threshold,
                               T* counts);

}  // namespace gpu
}  // namespace keras_trees

#endif  // KERAS_TREES_CUDA_TF_PRUNED_ROUTING_H_
