// The CPU emulation of the GPU kernels (JAX binding): the kernel pipelines of
// xla/pipeline_handlers.h on the GPU-emulating CPU executor (core/launch_cpu.h), exported as
// "KerasTrees<Op>Portable" targets beside the CPU engines' handlers. The test
// suite runs the kernel contract tests through them
// (keras_trees.ops._library.portable_bodies()), so the bodies the GPU runs are
// checked on every CI run, on machines without a GPU.
#include "core/launch_cpu.h"
#include "ffi_utils.h"
#include "pipeline_handlers.h"

KT_EXPORT_FFI_HANDLER(KerasTreesHingeForestPortable);
KT_EXPORT_FFI_HANDLER(KerasTreesHingeForestGradPortable);
KT_EXPORT_FFI_HANDLER(KerasTreesHardRoutingPortable);
KT_EXPORT_FFI_HANDLER(KerasTreesHardRoutingExpertsPortable);
KT_EXPORT_FFI_HANDLER(KerasTreesSoftTreeEnsemblePortable);
KT_EXPORT_FFI_HANDLER(KerasTreesSoftTreeEnsembleGradPortable);

// keras_trees.ops.check_gpu_errors() on the CPU emulation of the GPU's
// deferred checks (KERAS_TREES_GPU_CHECKS=deferred, core/check_modes.h): the
// message an emulated call left, its length (0: none), the message into `buffer`.
extern "C" __attribute__((visibility("default"))) int KerasTreesGpuErrors(int /*wait*/, char* buffer, int size) {
  return keras_trees::gpu_checks::ToBuffer(keras_trees::gpu_checks::EmulatedDevice().Take(), buffer, size);
}

namespace keras_trees {
namespace {

auto Executor(ffi::ThreadPool pool) {
  return [pool] { return GpuEmulationExecutor(XlaParallelFor(pool)); };
}

ffi::Error HingeForward(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer t, ffi::AnyBuffer f,
                        ffi::AnyBuffer w, ffi::Result<ffi::AnyBuffer> out, ffi::Result<ffi::AnyBuffer> leaf,
                        ffi::Result<ffi::AnyBuffer> margin, ffi::Result<ffi::AnyBuffer> vertex, bool fern) {
  return pipeline_handlers::HingeForward(Executor(pool), x, t, f, w, out, leaf, margin, vertex, fern);
}

ffi::Error HingeBackward(ffi::ThreadPool pool, ffi::AnyBuffer gy, ffi::AnyBuffer gm, ffi::AnyBuffer x,
                         ffi::AnyBuffer f, ffi::AnyBuffer w, ffi::AnyBuffer leaf, ffi::AnyBuffer margin,
                         ffi::AnyBuffer vertex, ffi::Result<ffi::AnyBuffer> gx, ffi::Result<ffi::AnyBuffer> gt,
                         ffi::Result<ffi::AnyBuffer> gw, bool fern) {
  return pipeline_handlers::HingeBackward(Executor(pool), gy, gm, x, f, w, leaf, margin, vertex, gx, gt, gw, fern);
}

ffi::Error Route(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer w, ffi::AnyBuffer b,
                 ffi::AnyBuffer is_split, ffi::Result<ffi::AnyBuffer> node,
                 ffi::Result<ffi::AnyBuffer> path_values, bool with_path_values) {
  return pipeline_handlers::Route(Executor(pool), x, w, b, nullptr, nullptr, is_split, node, path_values,
                                  with_path_values);
}

ffi::Error RouteExperts(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer w, ffi::AnyBuffer b,
                        ffi::AnyBuffer r, ffi::AnyBuffer c, ffi::AnyBuffer is_split,
                        ffi::Result<ffi::AnyBuffer> node, ffi::Result<ffi::AnyBuffer> path_values,
                        bool with_path_values) {
  return pipeline_handlers::Route(Executor(pool), x, w, b, &r, &c, is_split, node, path_values, with_path_values);
}

ffi::Error SoftTreeForward(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer w, ffi::AnyBuffer b,
                           ffi::AnyBuffer o, ffi::AnyBuffer g, ffi::Result<ffi::AnyBuffer> out) {
  return pipeline_handlers::SoftTreeForward(Executor(pool), x, w, b, o, g, out);
}

ffi::Error SoftTreeBackward(ffi::ThreadPool pool, ffi::AnyBuffer gy, ffi::AnyBuffer x, ffi::AnyBuffer w,
                            ffi::AnyBuffer b, ffi::AnyBuffer o, ffi::AnyBuffer g, ffi::Result<ffi::AnyBuffer> gx,
                            ffi::Result<ffi::AnyBuffer> gw, ffi::Result<ffi::AnyBuffer> gb,
                            ffi::Result<ffi::AnyBuffer> go) {
  return pipeline_handlers::SoftTreeBackward(Executor(pool), gy, x, w, b, o, g, gx, gw, gb, go);
}

}  // namespace
}  // namespace keras_trees

namespace ffi = ::xla::ffi;

XLA_FFI_DEFINE_HANDLER_SYMBOL(KerasTreesHingeForestPortable, keras_trees::Guard<keras_trees::HingeForward>::Call,
                              keras_trees::HingeForwardSignature(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(KerasTreesHingeForestGradPortable, keras_trees::Guard<keras_trees::HingeBackward>::Call,
                              keras_trees::HingeBackwardSignature(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(KerasTreesHardRoutingPortable, keras_trees::Guard<keras_trees::Route>::Call,
                              keras_trees::RouteSignature(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(KerasTreesHardRoutingExpertsPortable, keras_trees::Guard<keras_trees::RouteExperts>::Call,
                              keras_trees::RouteExpertsSignature(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(KerasTreesSoftTreeEnsemblePortable, keras_trees::Guard<keras_trees::SoftTreeForward>::Call,
                              keras_trees::SoftTreeEnsembleSignature(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(KerasTreesSoftTreeEnsembleGradPortable, keras_trees::Guard<keras_trees::SoftTreeBackward>::Call,
                              keras_trees::SoftTreeEnsembleGradSignature(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));
