// The CPU emulation of the GPU loss-augmented inference (JAX binding): the
// pipeline of core/loss_augmented_pipeline.h on the GPU-emulating
// CPU executor (core/launch_cpu.h), exported as "KerasTreesLossAugmentedInferencePortable"
// beside the CPU engine's handler (xla/loss_augmented_ffi.cc). Compiled
// without floating-point contraction (a *portable* unit, keras_trees/_build.py),
// so it computes the GPU's bits. The tests run it under
// keras_trees.ops._library.portable_bodies().
#include "core/launch_cpu.h"
#include "ffi_utils.h"
#include "loss_augmented_handlers.h"

KT_EXPORT_FFI_HANDLER(KerasTreesLossAugmentedInferencePortable);

namespace keras_trees {
namespace {

ffi::Error Infer(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer w, ffi::AnyBuffer b, ffi::AnyBuffer theta,
                 ffi::AnyBuffer y, ffi::Result<ffi::AnyBuffer> g, ffi::Result<ffi::AnyBuffer> h,
                 ffi::Result<ffi::AnyBuffer> score, bool log_loss, bool fast) {
  return pipeline_handlers::LossAugmented([pool] { return GpuEmulationExecutor(XlaParallelFor(pool)); }, x, w, b, theta,
                                          y, g, h, score, log_loss, fast);
}

}  // namespace
}  // namespace keras_trees

namespace ffi = ::xla::ffi;

XLA_FFI_DEFINE_HANDLER_SYMBOL(KerasTreesLossAugmentedInferencePortable, keras_trees::Guard<keras_trees::Infer>::Call,
                              keras_trees::LossAugmentedSignature(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));
