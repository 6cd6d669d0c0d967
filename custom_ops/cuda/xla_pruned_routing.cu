// XLA FFI CUDA handlers (JAX binding, platform "CUDA") of pruned
// probabilistic routing: the pipelines of xla/pruned_routing_handlers.h on the
// CUDA executor (cuda/launch.cuh), on the stream XLA gives the call and with
// scratch memory from the GPU's reusable workspace. Python registers symbol
// "<Target>Cuda" under target name "<Target>" (keras_trees/ops/_library.py),
// the CPU handlers' targets (xla/pruned_routing_ffi.cc). Every pipeline reads
// its status words back before its walks and ends with its kernels queued on
// the stream; the workspace lock of the executor is held until the handler
// returns. Built with nvcc and emulated on the CPU only
// (xla/pruned_routing_portable_ffi.cc): not yet run on a GPU.
#include <cuda_runtime.h>

#include "cuda/launch.cuh"
#include "xla/ffi_utils.h"
#include "xla/pruned_routing_handlers.h"

KT_EXPORT_FFI_HANDLER(KerasTreesPrunedRoutingCuda);
KT_EXPORT_FFI_HANDLER(KerasTreesPrunedRoutingGradCuda);
KT_EXPORT_FFI_HANDLER(KerasTreesPrunedLeafStatisticsCuda);
KT_EXPORT_FFI_HANDLER(KerasTreesPrunedEmStatisticsCuda);

namespace keras_trees {
namespace {

auto Executor(cudaStream_t stream) {
  return [stream] { return CudaExecutor(stream); };
}

ffi::Error Forward(cudaStream_t stream, ffi::RemainingArgs args, ffi::RemainingRets rets, float threshold,
                   bool experts, bool annealed) {
  return pruned_handlers::Forward(Executor(stream), args, rets, threshold, experts, annealed);
}

ffi::Error Backward(cudaStream_t stream, ffi::RemainingArgs args, ffi::RemainingRets rets, float threshold,
                    bool experts, bool annealed, bool x_grad) {
  return pruned_handlers::Backward(Executor(stream), args, rets, threshold, experts, annealed, x_grad);
}

ffi::Error Statistics(cudaStream_t stream, ffi::RemainingArgs args, ffi::Result<ffi::AnyBuffer> statistics,
                      float threshold, bool experts, bool annealed) {
  return pruned_handlers::Statistics(Executor(stream), args, statistics, threshold, experts, annealed);
}

ffi::Error EmStatistics(cudaStream_t stream, ffi::RemainingArgs args, ffi::Result<ffi::AnyBuffer> counts,
                        float threshold) {
  return pruned_handlers::EmStatistics(Executor(stream), args, counts, threshold);
}

}  // namespace
}  // namespace keras_trees

namespace ffi = ::xla::ffi;

XLA_FFI_DEFINE_HANDLER_SYMBOL(KerasTreesPrunedRoutingCuda, keras_trees::Guard<keras_trees::Forward>::Call,
                              keras_trees::pruned_handlers::ForwardSignature(
                                  ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(KerasTreesPrunedRoutingGradCuda, keras_trees::Guard<keras_trees::Backward>::Call,
                              keras_trees::pruned_handlers::BackwardSignature(
                                  ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(KerasTreesPrunedLeafStatisticsCuda, keras_trees::Guard<keras_trees::Statistics>::Call,
                              keras_trees::pruned_handlers::StatisticsSignature(
                                  ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(KerasTreesPrunedEmStatisticsCuda, keras_trees::Guard<keras_trees::EmStatistics>::Call,
                              keras_trees::pruned_handlers::EmSignature(
                                  ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()));
