// XLA FFI CUDA handlers (JAX binding, platform "CUDA"): the kernel pipelines of
// xla/pipeline_handlers.h on the CUDA executor (cuda/launch.cuh), on the
// stream XLA gives the call and with scratch memory from a reusable workspace of the GPU.
// Python registers symbol "<Target>Cuda" under target name "<Target>"
// (keras_trees/ops/_library.py). The argument and attribute bindings are the
// CPU handlers' (xla/hinge_ffi.cc, xla/hard_routing_ffi.cc, xla/check_ffi.cc)
// with the stream in place of the thread pool.
//
// A pipeline ends with exec.Finish (core/check_modes.h): by default its status
// words are copied to the host without waiting, and a handler returns with
// its kernels queued; the GPU's workspace (scratch memory, cuda/launch.cuh)
// is reused by the next call in stream order.
#include <cuda_runtime.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "cuda/launch.cuh"
#include "xla/ffi_utils.h"
#include "xla/pipeline_handlers.h"

KT_EXPORT_FFI_HANDLER(KerasTreesHingeForestCuda);
KT_EXPORT_FFI_HANDLER(KerasTreesHingeForestGradCuda);
KT_EXPORT_FFI_HANDLER(KerasTreesHardRoutingCuda);
KT_EXPORT_FFI_HANDLER(KerasTreesHardRoutingExpertsCuda);
KT_EXPORT_FFI_HANDLER(KerasTreesCheckCuda);
KT_EXPORT_FFI_HANDLER(KerasTreesSoftTreeEnsembleCuda);
KT_EXPORT_FFI_HANDLER(KerasTreesSoftTreeEnsembleGradCuda);

// keras_trees.ops.check_gpu_errors(): the message a deferred check of this
// library's GPU calls left (core/check_modes.h), after waiting for every
// queued call's status words when `wait` is nonzero; its length (0: none),
// the message itself into `buffer`. -1: CUDA failed, its error in `buffer`.
extern "C" __attribute__((visibility("default"))) int KerasTreesGpuErrors(int wait, char* buffer, int size) {
  try {
    return keras_trees::gpu_checks::ToBuffer(keras_trees::DeviceChecks::CollectAll(wait != 0), buffer, size);
  } catch (const std::exception& e) {
    keras_trees::gpu_checks::ToBuffer(e.what(), buffer, size);
    return -1;
  }
}

namespace keras_trees {
namespace {

// The executor of one call: XLA's stream and the GPU's reusable workspace
// (cuda/launch.cuh).
auto Executor(cudaStream_t stream) {
  return [stream] { return CudaExecutor(stream); };
}

ffi::Error HingeForward(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer t,
                        ffi::AnyBuffer f, ffi::AnyBuffer w, ffi::Result<ffi::AnyBuffer> out,
                        ffi::Result<ffi::AnyBuffer> leaf, ffi::Result<ffi::AnyBuffer> margin,
                        ffi::Result<ffi::AnyBuffer> vertex, bool fern) {
  return pipeline_handlers::HingeForward(Executor(stream), x, t, f, w, out, leaf, margin, vertex, fern);
}

ffi::Error HingeBackward(cudaStream_t stream, ffi::AnyBuffer gy, ffi::AnyBuffer gm,
                         ffi::AnyBuffer x, ffi::AnyBuffer f, ffi::AnyBuffer w, ffi::AnyBuffer leaf,
                         ffi::AnyBuffer margin, ffi::AnyBuffer vertex, ffi::Result<ffi::AnyBuffer> gx,
                         ffi::Result<ffi::AnyBuffer> gt, ffi::Result<ffi::AnyBuffer> gw, bool fern) {
  return pipeline_handlers::HingeBackward(Executor(stream), gy, gm, x, f, w, leaf, margin, vertex, gx, gt,
                                          gw, fern);
}

ffi::Error Route(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer w,
                 ffi::AnyBuffer b, ffi::AnyBuffer is_split, ffi::Result<ffi::AnyBuffer> node,
                 ffi::Result<ffi::AnyBuffer> path_values, bool with_path_values) {
  return pipeline_handlers::Route(Executor(stream), x, w, b, nullptr, nullptr, is_split, node,
                                  path_values, with_path_values);
}

ffi::Error RouteExperts(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer w,
                        ffi::AnyBuffer b, ffi::AnyBuffer r, ffi::AnyBuffer c, ffi::AnyBuffer is_split,
                        ffi::Result<ffi::AnyBuffer> node, ffi::Result<ffi::AnyBuffer> path_values,
                        bool with_path_values) {
  return pipeline_handlers::Route(Executor(stream), x, w, b, &r, &c, is_split, node, path_values,
                                  with_path_values);
}

// The Tree Ensemble Layer (core/tree_ensemble_pipeline.h): gamma is read on
// the device by the bodies, never on the host except to word a bad gamma's
// message. Built with nvcc and emulated on the CPU only: not yet run on a GPU.
ffi::Error SoftTreeForward(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer w, ffi::AnyBuffer b,
                           ffi::AnyBuffer o, ffi::AnyBuffer g, ffi::Result<ffi::AnyBuffer> out) {
  return pipeline_handlers::SoftTreeForward(Executor(stream), x, w, b, o, g, out);
}

ffi::Error SoftTreeBackward(cudaStream_t stream, ffi::AnyBuffer gy, ffi::AnyBuffer x, ffi::AnyBuffer w,
                            ffi::AnyBuffer b, ffi::AnyBuffer o, ffi::AnyBuffer g, ffi::Result<ffi::AnyBuffer> gx,
                            ffi::Result<ffi::AnyBuffer> gw, ffi::Result<ffi::AnyBuffer> gb,
                            ffi::Result<ffi::AnyBuffer> go) {
  return pipeline_handlers::SoftTreeBackward(Executor(stream), gy, x, w, b, o, g, gx, gw, gb, go);
}

// The runtime input checks under jax.jit on the GPU (xla/check_ffi.cc): the
// conditions come to the host, and the call fails with the message of the
// first false one (`messages`: one per condition, each ended by '\n').
ffi::Error Check(cudaStream_t stream, ffi::AnyBuffer oks, ffi::Result<ffi::AnyBuffer> token,
                 std::string_view messages) {
  if (oks.element_type() != ffi::DataType::PRED) {
    return InvalidArgument("keras-trees check: the conditions must be booleans");
  }
  const size_t n = oks.element_count();
  std::vector<unsigned char> ok(n);  // PRED: one byte per element, 0 or 1
  if (n > 0) {
    cuda_launch::Check(cudaMemcpyAsync(ok.data(), oks.untyped_data(), n, cudaMemcpyDeviceToHost, stream),
                       "keras-trees check: copying the conditions to the host");
  }
  cuda_launch::Check(cudaStreamSynchronize(stream), "keras-trees check");
  size_t start = 0;
  for (size_t i = 0; i < n; ++i) {
    const size_t end = messages.find('\n', start);
    if (ok[i] == 0) {
      return InvalidArgument(std::string(
          messages.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start)));
    }
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  cuda_launch::Check(cudaMemsetAsync(token->untyped_data(), 1, 1, stream), "keras-trees check: writing the token");
  return ffi::Error::Success();
}

}  // namespace
}  // namespace keras_trees

namespace ffi = ::xla::ffi;

XLA_FFI_DEFINE_HANDLER_SYMBOL(KerasTreesHingeForestCuda, keras_trees::Guard<keras_trees::HingeForward>::Call,
                              keras_trees::HingeForwardSignature(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(KerasTreesHingeForestGradCuda, keras_trees::Guard<keras_trees::HingeBackward>::Call,
                              keras_trees::HingeBackwardSignature(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(KerasTreesHardRoutingCuda, keras_trees::Guard<keras_trees::Route>::Call,
                              keras_trees::RouteSignature(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(KerasTreesHardRoutingExpertsCuda, keras_trees::Guard<keras_trees::RouteExperts>::Call,
                              keras_trees::RouteExpertsSignature(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(KerasTreesCheckCuda, keras_trees::Guard<keras_trees::Check>::Call,
                              keras_trees::CheckSignature(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(KerasTreesSoftTreeEnsembleCuda, keras_trees::Guard<keras_trees::SoftTreeForward>::Call,
                              keras_trees::SoftTreeEnsembleSignature(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(KerasTreesSoftTreeEnsembleGradCuda, keras_trees::Guard<keras_trees::SoftTreeBackward>::Call,
                              keras_trees::SoftTreeEnsembleGradSignature(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()));
