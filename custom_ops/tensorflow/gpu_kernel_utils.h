// Helpers of the TensorFlow GPU adapter kernels (tensorflow/*_gpu_kernels.cc,
// compiled only in the CUDA build, which defines KERAS_TREES_CUDA=1): the op's
// CUDA stream and scratch memory from TensorFlow's allocator. The kernels
// themselves run in cuda/tf_entry.cu (nvcc) behind cuda/tf_entry.h.
#ifndef KERAS_TREES_TENSORFLOW_GPU_KERNEL_UTILS_H_
#define KERAS_TREES_TENSORFLOW_GPU_KERNEL_UTILS_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <stdexcept>

#include "cuda/tf_entry.h"
#include "kernel_utils.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "xla/stream_executor/stream.h"

namespace keras_trees {

// The cudaStream_t (as void*) on which the op's GPU work runs. Read through
// StreamExecutor's platform handle, so no GPU-specific TensorFlow header (or
// GOOGLE_CUDA build of the adapters) is needed.
inline void* GpuStream(tensorflow::OpKernelContext* ctx) {
  tensorflow::DeviceContext* context = ctx->op_device_context();
  stream_executor::Stream* stream = context != nullptr ? context->stream() : nullptr;
  void* handle = stream != nullptr ? stream->platform_specific_handle().stream : nullptr;
  if (handle == nullptr) throw std::runtime_error("no CUDA stream for the GPU kernel");
  return handle;
}

// Scratch memory of one kernel call from allocate_temp: the tensors are kept
// alive as long as this object (the Compute call, whose pipeline waits for its
// kernels before it returns). Returns nullptr when TensorFlow has none to
// give (the pipeline then throws std::bad_alloc, reported by Guarded as
// ResourceExhausted).
class GpuScratch {
 public:
  explicit GpuScratch(tensorflow::OpKernelContext* ctx) : ctx_(ctx) {}
  GpuScratch(const GpuScratch&) = delete;
  GpuScratch& operator=(const GpuScratch&) = delete;

  gpu::DeviceAllocator Allocator() {
    return [this](size_t bytes) -> void* {
      tensors_.emplace_back();
      tensorflow::Tensor& t = tensors_.back();
      const int64_t size = static_cast<int64_t>(bytes > 0 ? bytes : 1);
      if (!ctx_->allocate_temp(tensorflow::DT_INT8, tensorflow::TensorShape({size}), &t).ok()) return nullptr;
      return t.flat<int8_t>().data();
    };
  }

 private:
  tensorflow::OpKernelContext* ctx_;
  std::deque<tensorflow::Tensor> tensors_;
};

}  // namespace keras_trees

#endif  // KERAS_TREES_TENSORFLOW_GPU_KERNEL_UTILS_H_
