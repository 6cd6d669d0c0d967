// Occupancy of kernels on an H100 / H200 (sm_90, 132 SMs), by the CUDA
// toolkit's own calculator (cuda_occupancy.h, host code only), for
// benchmarks/gpu_budget.py. Built with the host compiler and the toolkit's
// include folder:
//   g++ -std=c++17 -I <cuda>/include benchmarks/gpu_occupancy.cc
// Arguments: triples `threads registers static_shared_bytes`, one per kernel;
// prints one line per triple: `active_blocks_per_sm occupancy`, occupancy the
// fraction of the SM's 64 warps that the active blocks hold.
#include <cstdio>
#include <cstdlib>

#include "cuda_occupancy.h"

int main(int argc, char** argv) {
  cudaOccDeviceProp props;
  props.computeMajor = 9;
  props.computeMinor = 0;
  props.maxThreadsPerBlock = 1024;
  props.maxThreadsPerMultiprocessor = 2048;
  props.regsPerBlock = 65536;
  props.regsPerMultiprocessor = 65536;
  props.warpSize = 32;
  props.sharedMemPerBlock = 48 * 1024;
  props.sharedMemPerMultiprocessor = 228 * 1024;
  props.numSms = 132;
  props.sharedMemPerBlockOptin = 227 * 1024;
  props.reservedSharedMemPerBlock = 1024;
  cudaOccDeviceState state;
  if ((argc - 1) % 3 != 0) {
    std::fprintf(stderr, "usage: %s [threads registers shared_bytes]...\n", argv[0]);
    return 2;
  }
  for (int i = 1; i + 2 < argc; i += 3) {
    const int threads = std::atoi(argv[i]);
    cudaOccFuncAttributes attributes;
    attributes.maxThreadsPerBlock = threads;
    attributes.numRegs = std::atoi(argv[i + 1]);
    attributes.sharedSizeBytes = static_cast<size_t>(std::atoll(argv[i + 2]));
    cudaOccResult result;
    if (cudaOccMaxActiveBlocksPerMultiprocessor(&result, &props, &attributes, &state, threads, 0) !=
        CUDA_OCC_SUCCESS) {
      std::fprintf(stderr, "cuda_occupancy.h refused threads=%s registers=%s shared=%s\n", argv[i], argv[i + 1],
                   argv[i + 2]);
      return 1;
    }
    const int warps = result.activeBlocksPerMultiprocessor * ((threads + 31) / 32);
    std::printf("%d %.4f\n", result.activeBlocksPerMultiprocessor, warps / 64.0);
  }
  return 0;
}
