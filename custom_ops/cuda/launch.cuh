// The CUDA executor of the kernel pipelines (core/pipeline.h): one CUDA kernel
// per body on a stream (a block body: one CUDA block per block, a barrier
// after each phase), scratch memory from the framework's allocator (XLA's
// ffi::ScratchAllocator, TensorFlow's allocate_temp), CUB's stable radix sort,
// device-to-host copies that wait for the work launched so far (CopyToHost,
// and Finish in the sync mode), and deferred checks that never wait
// (core/check_modes.h). The CPU
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
#include <deque>
#include <functional>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <cub/device/device_radix_sort.cuh>

#include "core/check_modes.h"
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

// The current device's index (0 to 63: the tables below).
inline int CurrentDevice() {
  int device = 0;
  cuda_launch::Check(cudaGetDevice(&device), "keras-trees CUDA device");
  return device >= 0 && device < 64 ? device : 0;
}

// A device workspace per GPU, reused by every call of the JAX handlers:
// a per-call device allocation (XLA's FFI scratch allocator ends in
// cudaMalloc/cudaFree there) costs more than the kernels themselves. A call
// holds its GPU's workspace while it launches (the mutex); its kernels use
// it in stream order, so the next call on the same stream finds it free
// without waiting, and a call on another stream first waits on the device
// for `done`, the end of the last call's work. The workspace grows to the
// largest call's needs and stays; growth frees and allocates in stream
// order too (cudaFreeAsync, cudaMallocAsync).
struct Workspace {
  std::mutex mu;
  char* base = nullptr;
  size_t capacity = 0;
  cudaStream_t stream = nullptr;  // of the last call
  cudaEvent_t done = nullptr;     // recorded on `stream` after the last call's work
  bool used = false;

  static Workspace& OfCurrentDevice() {
    static Workspace workspaces[64];
    return workspaces[CurrentDevice()];
  }
};

// The deferred checks of one GPU (core/check_modes.h): each call's status
// words and values go to a slot of pinned host memory with an asynchronous
// copy and an event; slots whose event has completed are read, in call
// order, by every later call and by `Collect`.
class DeviceChecks {
 public:
  static constexpr int kSlots = 1024;
  static constexpr int kSlotWords = 2 * gpu_checks::kMaxWords;

  static DeviceChecks& Of(int device) {
    static DeviceChecks checks[64];
    return checks[device >= 0 && device < 64 ? device : 0];
  }
  static DeviceChecks& OfCurrentDevice() { return Of(CurrentDevice()); }

  // The first message of any GPU's deferred checks not raised yet ("" if
  // none), every queued call's words read first (`wait`) or those arrived.
  static std::string CollectAll(bool wait) {
    std::string message;
    for (int device = 0; device < 64 && message.empty(); ++device) message = Of(device).Collect(wait);
    return message;
  }

  // Queues the copy of `status` (`words` words and their values) behind the
  // work launched on `stream`, then returns the message an earlier call left.
  std::string Defer(cudaStream_t stream, const unsigned long long* status, int words,
                    gpu_checks::Message message) {
    if (words > gpu_checks::kMaxWords) throw std::runtime_error("keras-trees GPU checks: too many status words");
    std::lock_guard<std::mutex> lock(mu_);
    Init();
    Read(false);
    // Every slot in flight (a thousand calls queued ahead of the GPU): wait
    // for the oldest call's words, not for this call's.
    if (free_.empty()) ReadOldest();
    const int slot = free_.back();
    free_.pop_back();
    cuda_launch::Check(cudaMemcpyAsync(host_ + slot * kSlotWords, status, 2 * words * sizeof(unsigned long long),
                                       cudaMemcpyDeviceToHost, stream),
                       "keras-trees CUDA copy of the status words");
    cuda_launch::Check(cudaEventRecord(events_[slot], stream), "keras-trees CUDA event");
    queue_.push_back(Entry{slot, words, std::move(message)});
    return pending_.Take();
  }

  // The message of a call on this device not raised yet ("" if none); with
  // `wait`, after every queued call's words have arrived.
  std::string Collect(bool wait) {
    std::lock_guard<std::mutex> lock(mu_);
    if (host_ != nullptr) Read(wait);
    return pending_.Take();
  }

 private:
  struct Entry {
    int slot;
    int words;
    gpu_checks::Message message;
  };

  void Init() {
    if (host_ != nullptr) return;
    void* host = nullptr;
    cuda_launch::Check(cudaMallocHost(&host, sizeof(unsigned long long) * kSlots * kSlotWords),
                       "keras-trees CUDA pinned memory for the status words");
    for (int i = 0; i < kSlots; ++i) {
      cuda_launch::Check(cudaEventCreateWithFlags(&events_[i], cudaEventDisableTiming), "keras-trees CUDA event");
      free_.push_back(i);
    }
    host_ = static_cast<unsigned long long*>(host);
  }

  // The queued calls whose words have arrived (all of them with `wait`), in order.
  void Read(bool wait) {
    while (!queue_.empty()) {
      const cudaError_t state = wait ? cudaEventSynchronize(events_[queue_.front().slot])
                                     : cudaEventQuery(events_[queue_.front().slot]);
      if (state == cudaErrorNotReady) {
        cudaGetLastError();
        return;
      }
      cuda_launch::Check(state, "keras-trees CUDA kernels");
      Pop();
    }
  }

  void ReadOldest() {
    cuda_launch::Check(cudaEventSynchronize(events_[queue_.front().slot]), "keras-trees CUDA kernels");
    Pop();
  }

  void Pop() {
    const Entry& e = queue_.front();
    const unsigned long long* words = host_ + e.slot * kSlotWords;
    pending_.Set(e.message(words, reinterpret_cast<const double*>(words + e.words)));
    free_.push_back(e.slot);
    queue_.pop_front();
  }

  std::mutex mu_;
  unsigned long long* host_ = nullptr;
  cudaEvent_t events_[kSlots] = {};
  std::vector<int> free_;
  std::deque<Entry> queue_;
  gpu_checks::Pending pending_;
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
  // Its calls check in the sync mode: TensorFlow's GPU kernels (never run on
  // a GPU) keep the CPU kernels' contract.
  CudaExecutor(cudaStream_t stream, Allocator allocate)
      : stream_(stream), allocate_(std::move(allocate)), defers_(false) {}
  // Scratch memory from the GPU's reusable workspace (the JAX handlers).
  explicit CudaExecutor(cudaStream_t stream)
      : stream_(stream), workspace_(&Workspace::OfCurrentDevice()), lock_(workspace_->mu) {
    if (workspace_->done == nullptr) {
      cuda_launch::Check(cudaEventCreateWithFlags(&workspace_->done, cudaEventDisableTiming),
                         "keras-trees CUDA event");
    }
    if (workspace_->used && workspace_->stream != stream_) {
      cuda_launch::Check(cudaStreamWaitEvent(stream_, workspace_->done, 0), "keras-trees CUDA stream order");
    }
  }
  CudaExecutor(const CudaExecutor&) = delete;
  CudaExecutor& operator=(const CudaExecutor&) = delete;
  CudaExecutor(CudaExecutor&&) = default;

  // Buffers that did not fit in the workspace go back, and the workspace
  // grows to this call's needs, both in stream order after this call's
  // kernels (nothing waits for them).
  ~CudaExecutor() {
    for (void* p : overflow_) cudaFreeAsync(p, stream_);
    if (workspace_ == nullptr) return;
    if (used_ > workspace_->capacity) {
      if (workspace_->base != nullptr) cudaFreeAsync(workspace_->base, stream_);
      workspace_->base = nullptr;
      workspace_->capacity = 0;
      const size_t capacity = used_ + used_ / 4;
      if (cudaMallocAsync(reinterpret_cast<void**>(&workspace_->base), capacity, stream_) == cudaSuccess) {
        workspace_->capacity = capacity;
      } else {
        workspace_->base = nullptr;
      }
    }
    cudaEventRecord(workspace_->done, stream_);
    workspace_->stream = stream_;
    workspace_->used = true;
    cudaGetLastError();
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

  // The end of a call (core/check_modes.h): with KERAS_TREES_GPU_CHECKS=sync
  // (and always on TensorFlow) its own message, read back and waited for; by
  // default (the JAX handlers) its words are
  // queued without waiting and the message an earlier call left comes back.
  std::string Finish(const unsigned long long* status, int words, const gpu_checks::Message& message) {
    if (!defers_ || !gpu_checks::DeviceDefers()) {
      std::vector<unsigned long long> host(2 * words);
      CopyToHost(host.data(), status, host.size() * sizeof(unsigned long long));
      return message(host.data(), reinterpret_cast<const double*>(host.data() + words));
    }
    return DeviceChecks::OfCurrentDevice().Defer(stream_, status, words, message);
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
    if (cudaMallocAsync(&p, bytes, stream_) != cudaSuccess || p == nullptr) {
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
  bool defers_ = true;  // the JAX handlers' executor: deferred checks unless KERAS_TREES_GPU_CHECKS=sync
  size_t used_ = 0;
  std::vector<void*> overflow_;
};

}  // namespace keras_trees

#endif  // KERAS_TREES_CUDA_LAUNCH_CUH_
