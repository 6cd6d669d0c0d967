// The CUDA executor of the kernel pipelines (core/pipeline.h): one CUDA kernel
// per body on a stream (a block body: one CUDA block per block, a barrier
// after each phase), scratch memory from the framework's allocator (XLA's
// ffi::ScratchAllocator, TensorFlow's allocate_temp), CUB's stable radix sort,
// and device-to-host copies that wait for the work launched so far. The CPU
// executor (core/launch_cpu.h) runs the same bodies as the exact emulation of
// this one.
//
// Determinism: every For / ForGroups launch has 256 threads per block
// (kGpuThreads) and ceil(n / 256) blocks
// (capped at the grid limit, a grid-stride loop covering the rest): the grid
// comes from the shape alone, never from the device's SM count or occupancy.
// The bodies have one writer per float output element; the only atomics are
// the integer minima of the status words (core/portable.h). No float atomics.
//
// Errors: a failed launch, copy or synchronization throws std::runtime_error
// with CUDA's message, an allocator that has no memory std::bad_alloc; the
// adapters' guards (xla/ffi_utils.h Guard, tensorflow/kernel_utils.h Guarded)
// turn both into framework errors.
#ifndef KERAS_TREES_CUDA_LAUNCH_CUH_
#define KERAS_TREES_CUDA_LAUNCH_CUH_

#include <cuda_runtime.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <cub/device/device_radix_sort.cuh>

#include "core/pipeline.h"

namespace keras_trees {

namespace cuda_launch {

constexpr int kThreads = kGpuThreads;
// gridDim.x limit (compute capability >= 3.0).
constexpr int64_t kMaxBlocks = 2147483647;

template <class Body>
__global__ void __launch_bounds__(kThreads) ForKernel(Body body, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    body(i);
  }
}

// The same with 32-bit indices, for n < 2**31 (every launch of the usual
// shapes): the loop and the index arithmetic the bodies inline from it are
// then 32-bit, a few instructions fewer per item. Same grid, same items.
template <class Body>
__global__ void __launch_bounds__(kThreads) ForKernel32(Body body, uint32_t n) {
  const uint32_t stride = gridDim.x * blockDim.x;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    body(static_cast<int64_t>(i));
  }
}

// A body with pipeline::WideIndex (core/pipeline.h) keeps the 64-bit loop:
// measured per kernel (Nsight Compute, hinge forest fwd+bwd), the 32-bit loop
// made hinge::Output and GradX faster but PairCoefficients more than twice as
// slow (tests/gpu/NOTES.md).

// One item per group of `width` lanes (a power of two, 1 to 32): the lanes of
// a group call body(i) together (the group index strides over the items, so
// a group's lanes always agree on i and leave the loop together, as the
// group-mask shuffles of portable::GroupDot need).
template <class Body>
__global__ void __launch_bounds__(kThreads) ForGroupsKernel(Body body, int64_t n, int width) {
  const int groups_per_block = kThreads / width;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * groups_per_block;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * groups_per_block + threadIdx.x / width; i < n; i += stride) {
    body(i);
  }
}

// A block body (core/pipeline.h ForBlocks): block b of the grid runs blocks
// b, b + gridDim.x, ...; every phase of each in order, a barrier after each.
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

// Throws std::runtime_error("<what>: <CUDA's message>") unless `status` is cudaSuccess.
inline void Check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(status) + ": " +
                             cudaGetErrorString(status));
  }
}

}  // namespace cuda_launch

// A device workspace per GPU, reused by every call of the JAX handlers:
// a per-call device allocation (XLA's FFI scratch allocator ends in
// cudaMalloc/cudaFree there) costs more than the kernels themselves. A call
// holds its GPU's workspace for its whole duration (the mutex), and every
// pipeline waits for its kernels before it returns, so the next call finds it
// free. The workspace grows to the largest call's needs and stays.
struct Workspace {
  std::mutex mu;
  char* base = nullptr;
  size_t capacity = 0;

  static Workspace& OfCurrentDevice() {
    static Workspace workspaces[64];
    int device = 0;
    cuda_launch::Check(cudaGetDevice(&device), "keras-trees CUDA workspace");
    return workspaces[device >= 0 && device < 64 ? device : 0];
  }
};

class CudaExecutor {
 public:
  // Scratch a pipeline may spend to give a latency-bound walk enough parallel
  // items (pipeline::ChunkSamples: the TEL's and pruned routing's chunks).
  static constexpr int64_t kWideScratchBytes = kGpuWideScratchBytes;

  // `allocate(bytes)` returns device memory (aligned for any element type)
  // that stays valid as long as this executor, or nullptr when none can be had.
  using Allocator = std::function<void*(size_t bytes)>;

  // Scratch memory from the framework's allocator (TensorFlow's allocate_temp).
  CudaExecutor(cudaStream_t stream, Allocator allocate) : stream_(stream), allocate_(std::move(allocate)) {}
  // Scratch memory from the GPU's reusable workspace (the JAX handlers).
  explicit CudaExecutor(cudaStream_t stream)
      : stream_(stream), workspace_(&Workspace::OfCurrentDevice()), lock_(workspace_->mu) {}
  CudaExecutor(const CudaExecutor&) = delete;
  CudaExecutor& operator=(const CudaExecutor&) = delete;
  CudaExecutor(CudaExecutor&&) = default;

  // Buffers that did not fit in the workspace go back, and the workspace
  // grows to this call's needs (its kernels are done: the pipelines wait for
  // them before they return).
  ~CudaExecutor() {
    if (overflow_.empty()) return;
    cudaStreamSynchronize(stream_);
    for (void* p : overflow_) cudaFree(p);
    if (workspace_ != nullptr && used_ > workspace_->capacity) {
      cudaFree(workspace_->base);
      workspace_->base = nullptr;
      workspace_->capacity = 0;
      const size_t capacity = used_ + used_ / 4;
      if (cudaMalloc(reinterpret_cast<void**>(&workspace_->base), capacity) == cudaSuccess) {
        workspace_->capacity = capacity;
      } else {
        workspace_->base = nullptr;
        cudaGetLastError();
      }
    }
  }

  template <class Body>
  void For(int64_t n, const Body& body) {
    if (n <= 0) return;
    const int64_t blocks = (n + cuda_launch::kThreads - 1) / cuda_launch::kThreads;
    const unsigned grid = static_cast<unsigned>(blocks < cuda_launch::kMaxBlocks ? blocks : cuda_launch::kMaxBlocks);
    bool launched = false;
    if constexpr (!pipeline::WideIndex<Body>::value) {
      if (n <= INT32_MAX) {
        cuda_launch::ForKernel32<Body><<<grid, cuda_launch::kThreads, 0, stream_>>>(body, static_cast<uint32_t>(n));
        launched = true;
      }
    }
    if (!launched) cuda_launch::ForKernel<Body><<<grid, cuda_launch::kThreads, 0, stream_>>>(body, n);
    cuda_launch::Check(cudaGetLastError(), "keras-trees CUDA kernel launch");
  }

  template <class Body>
  void ForGroups(int64_t n, int width, const Body& body) {
    if (n <= 0) return;
    if (width < 1 || width > portable::kWarp || (width & (width - 1)) != 0) {
      throw std::runtime_error("keras-trees CUDA launch: a lane group must be a power of two from 1 to 32");
    }
    const int64_t groups_per_block = cuda_launch::kThreads / width;
    const int64_t blocks = (n + groups_per_block - 1) / groups_per_block;
    const unsigned grid = static_cast<unsigned>(blocks < cuda_launch::kMaxBlocks ? blocks : cuda_launch::kMaxBlocks);
    cuda_launch::ForGroupsKernel<Body><<<grid, cuda_launch::kThreads, 0, stream_>>>(body, n, width);
    cuda_launch::Check(cudaGetLastError(), "keras-trees CUDA kernel launch");
  }

  template <class Body>
  void ForBlocks(int64_t n, const Body& body) {
    if (n <= 0) return;
    const unsigned grid = static_cast<unsigned>(n < cuda_launch::kMaxBlocks ? n : cuda_launch::kMaxBlocks);
    cuda_launch::BlocksKernel<Body><<<grid, Body::kThreads, 0, stream_>>>(body, n);
    cuda_launch::Check(cudaGetLastError(), "keras-trees CUDA kernel launch");
  }

  template <typename T>
  T* Scratch(int64_t n) {
    return static_cast<T*>(Allocate(static_cast<size_t>(n > 0 ? n : 1) * sizeof(T)));
  }

  // Stable ascending sort of int32 keys in [0, 2**key_bits) carrying int32
  // values (CUB's LSD radix sort is stable).
  void SortPairs(const int32_t* keys_in, int32_t* keys_out, const int32_t* values_in, int32_t* values_out,
                 int64_t n, int key_bits) {
    if (n <= 0) return;
    if (n > INT_MAX) throw std::runtime_error("keras-trees CUDA sort: more than 2**31 - 1 items");
    const int items = static_cast<int>(n);
    size_t temp_bytes = 0;
    cuda_launch::Check(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys_in, keys_out, values_in,
                                                       values_out, items, 0, key_bits, stream_),
                       "keras-trees CUDA sort (temporary storage size)");
    void* temp = Allocate(temp_bytes > 0 ? temp_bytes : 1);
    cuda_launch::Check(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out, values_in, values_out,
                                                       items, 0, key_bits, stream_),
                       "keras-trees CUDA sort");
    cuda_launch::Check(cudaGetLastError(), "keras-trees CUDA sort launch");
  }

  // Waits for the work launched so far on the stream and copies `bytes` of
  // device memory at `src` to host memory at `dst`.
  void CopyToHost(void* dst, const void* src, size_t bytes) {
    if (bytes > 0) {
      cuda_launch::Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_),
                         "keras-trees CUDA copy to the host");
    }
    cuda_launch::Check(cudaStreamSynchronize(stream_), "keras-trees CUDA kernels");
  }

  cudaStream_t stream() const { return stream_; }

 private:
  // From the framework's allocator, or the workspace: buffers are carved in
  // order at 256-byte boundaries; one that does not fit gets its own
  // cudaMalloc (freed, and the workspace grown, with the executor).
  void* Allocate(size_t bytes) {
    if (allocate_) {
      void* p = allocate_(bytes);
      if (p == nullptr) throw std::bad_alloc();
      return p;
    }
    const size_t offset = (used_ + 255) / 256 * 256;
    used_ = offset + bytes;
    if (used_ <= workspace_->capacity) return workspace_->base + offset;
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess || p == nullptr) {
      cudaGetLastError();
      throw std::bad_alloc();
    }
    overflow_.push_back(p);
    return p;
  }

  cudaStream_t stream_;
  Allocator allocate_;
  Workspace* workspace_ = nullptr;
  std::unique_lock<std::mutex> lock_;
  size_t used_ = 0;
  std::vector<void*> overflow_;
};

}  // namespace keras_trees

#endif  // KERAS_TREES_CUDA_LAUNCH_CUH_
