// The GPU kernel pipelines as plain host functions, for the TensorFlow GPU
// adapters (tensorflow/*_gpu_kernels.cc, compiled by the host compiler against
// TensorFlow's headers): each runs a pipeline of core/*_pipeline.h on the CUDA
// executor (cuda/launch.cuh) and returns "" or the error message of the CPU
// kernels. Defined, with explicit float and double instantiations, in
// cuda/tf_entry.cu (nvcc); nothing here needs a CUDA or TensorFlow header.
//
// `stream` is the cudaStream_t of the op (as void*); `allocate(bytes)` returns
// device memory that stays valid until the call returns, or nullptr (the call
// then throws std::bad_alloc). A failed CUDA call throws std::runtime_error.
// Every call waits for its kernels before it returns.
#ifndef KERAS_TREES_CUDA_TF_ENTRY_H_
#define KERAS_TREES_CUDA_TF_ENTRY_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "core/hard_routing_bodies.h"  // RoutingDims
#include "core/hinge_bodies.h"         // HingeDims
#include "core/tree_ensemble.h"        // SoftTreeDims

namespace keras_trees {
namespace gpu {

using DeviceAllocator = std::function<void*(size_t bytes)>;

template <typename T>
std::string HingeForestForward(void* stream, const DeviceAllocator& allocate, const HingeDims& d, bool fern,
                               const T* x, const T* thresholds, const int32_t* feature_indices,
                               const T* leaf_weights, T* output, int32_t* leaf, T* margin, int32_t* vertex);

template <typename T>
std::string HingeForestBackward(void* stream, const DeviceAllocator& allocate, const HingeDims& d,
                                const T* grad_output, const T* grad_margin, const int32_t* feature_indices,
                                const T* leaf_weights, const int32_t* leaf, const T* margin,
                                const int32_t* vertex, T* grad_x, T* grad_thresholds, T* grad_leaf_weights);

// expert_weights and threshold null for oblique splits; path_values null when
// not wanted.
template <typename T>
std::string HardRoute(void* stream, const DeviceAllocator& allocate, const RoutingDims& d, const T* x,
                      const T* split_weights, const T* split_bias, const T* expert_weights, const T* threshold,
                      const bool* is_split, int32_t* node, T* path_values);

// The Tree Ensemble Layer (core/tree_ensemble_pipeline.h): every pointer,
// gamma included, in device memory. Built with nvcc, not yet run on a GPU.
template <typename T>
std::string SoftTreeEnsembleForward(void* stream, const DeviceAllocator& allocate, const SoftTreeDims& d,
                                    const T* x, const T* node_weights, const T* node_bias, const T* leaf_weights,
                                    const T* gamma, T* output);

template <typename T>
std::string SoftTreeEnsembleBackward(void* stream, const DeviceAllocator& allocate, const SoftTreeDims& d,
                                     const T* grad_output, const T* x, const T* node_weights, const T* node_bias,
                                     const T* leaf_weights, const T* gamma, T* grad_x, T* grad_node_weights,
                                     T* grad_node_bias, T* grad_leaf_weights);

}  // namespace gpu
}  // namespace keras_trees

#endif  // KERAS_TREES_CUDA_TF_ENTRY_H_
