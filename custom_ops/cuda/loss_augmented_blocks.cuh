// The CUDA executor's block launch for the loss-augmented inference pipeline
// (core/loss_augmented_pipeline.h, where the CPU executor's emulation lives):
// one CUDA block of Body::kThreads threads per item, the block's shared memory
// a static __shared__ Body::Shared, and a barrier after every phase. The grid
// comes from the shape alone (min(n, gridDim.x limit) blocks, a block-stride
// loop covering the rest). Include before the pipeline header is instantiated.
#ifndef KERAS_TREES_CUDA_LOSS_AUGMENTED_BLOCKS_CUH_
#define KERAS_TREES_CUDA_LOSS_AUGMENTED_BLOCKS_CUH_

#include <cstdint>

#include "cuda/launch.cuh"

namespace keras_trees {

namespace cuda_launch {

template <class Body>
__global__ void __launch_bounds__(Body::kThreads) BlocksKernel(Body body, int64_t n) {
  __shared__ typename Body::Shared shared;
  const int phases = body.Phases();
  for (int64_t block = blockIdx.x; block < n; block += gridDim.x) {
    for (int phase = 0; phase < phases; ++phase) {
      body(phase, block, static_cast<int>(threadIdx.x), shared);
      __syncthreads();
    }
  }
}

}  // namespace cuda_launch

template <class Body>
void ForBlocks(CudaExecutor& exec, int64_t n, const Body& body) {
  if (n <= 0) return;
  const unsigned grid = static_cast<unsigned>(n < cuda_launch::kMaxBlocks ? n : cuda_launch::kMaxBlocks);
  cuda_launch::BlocksKernel<Body><<<grid, Body::kThreads, 0, exec.stream()>>>(body, n);
  cuda_launch::Check(cudaGetLastError(), "keras-trees CUDA kernel launch");
}

}  // namespace keras_trees

#endif  // KERAS_TREES_CUDA_LOSS_AUGMENTED_BLOCKS_CUH_
