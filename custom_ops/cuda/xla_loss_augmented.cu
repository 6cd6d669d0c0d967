// XLA FFI CUDA handler (JAX binding, platform "CUDA") of the loss-augmented
// inference: the pipeline of core/loss_augmented_pipeline.h on the CUDA
// executor (cuda/launch.cuh), on the stream XLA gives the call and with
// scratch memory from the GPU's reusable workspace. Python registers symbol
// "KerasTreesLossAugmentedInferenceCuda" under target name
// "KerasTreesLossAugmentedInference" (keras_trees/ops/_library.py). The
// bindings are the CPU handler's (xla/loss_augmented_ffi.cc) with the stream
// in place of the thread pool. Built with nvcc and emulated on the CPU only:
// not yet run on a GPU.
#include <cuda_runtime.h>

#include "cuda/launch.cuh"
#include "xla/ffi_utils.h"
#include "xla/loss_augmented_handlers.h"

KT_EXPORT_FFI_HANDLER(KerasTreesLossAugmentedInferenceCuda);

namespace keras_trees {
namespace {

ffi::Error Infer(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer w, ffi::AnyBuffer b, ffi::AnyBuffer theta,
                 ffi::AnyBuffer y, ffi::Result<ffi::AnyBuffer> g, ffi::Result<ffi::AnyBuffer> h,
                 ffi::Result<ffi::AnyBuffer> score, bool log_loss, bool fast) {
  return pipeline_handlers::LossAugmented([stream] { return CudaExecutor(stream); }, x, w, b, theta, y, g, h,
                                          score, log_loss, fast);
}

}  // namespace
}  // namespace keras_trees

namespace ffi = ::xla::ffi;

XLA_FFI_DEFINE_HANDLER_SYMBOL(KerasTreesLossAugmentedInferenceCuda, keras_trees::Guard<keras_trees::Infer>::Call,
                              keras_trees::LossAugmentedSignature(
                                  ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()));
