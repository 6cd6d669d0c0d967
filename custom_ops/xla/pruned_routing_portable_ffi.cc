// The CPU emulation of the pruned-routing GPU kernels (JAX binding): the
// pipelines of xla/pruned_routing_handlers.h on the GPU-emulating
// CPU executor (core/launch_cpu.h), exported as "KerasTreesPruned...Portable" targets
// beside the CPU engine's handlers (xla/pruned_routing_ffi.cc). The tests run
// the contract tests through them (keras_trees.ops._library.portable_bodies()),
// so the bodies the GPU runs are checked on every CI run without a GPU.
// Compiled with -ffp-contract=off (a *portable* unit, keras_trees/_build.py).
#include "core/launch_cpu.h"
#include "xla/ffi_utils.h"
#include "xla/pruned_routing_handlers.h"

KT_EXPORT_FFI_HANDLER(KerasTreesPrunedRoutingPortable);
KT_EXPORT_FFI_HANDLER(KerasTreesPrunedRoutingGradPortable);
KT_EXPORT_FFI_HANDLER(KerasTreesPrunedLeafStatisticsPortable);
KT_EXPORT_FFI_HANDLER(KerasTreesPrunedEmStatisticsPortable);

namespace keras_trees {
namespace {

auto Executor(ffi::ThreadPool pool) {
  return [pool] { return GpuEmulationExecutor(XlaParallelFor(pool)); };
}

ffi::Error Forward(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::RemainingRets rets, float threshold,
                   bool experts, bool annealed) {
  return pruned_handlers::Forward(Executor(pool), args, rets, threshold, experts, annealed);
}

ffi::Error Backward(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::RemainingRets rets, float threshold,
                    bool experts, bool annealed, bool x_grad) {
  return pruned_handlers::Backward(Executor(pool), args, rets, threshold, experts, annealed, x_grad);
}

ffi::Error Statistics(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::Result<ffi::AnyBuffer> statistics,
                      float threshold, bool experts, bool annealed) {
  return pruned_handlers::Statistics(Executor(pool), args, statistics, threshold, experts, annealed);
}

ffi::Error EmStatistics(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::Result<ffi::AnyBuffer> counts,
                        float threshold) {
  return pruned_handlers::EmStatistics(Executor(pool), args, counts, threshold);
}

}  // namespace
}  // namespace keras_trees

namespace ffi = ::xla::ffi;

XLA_FFI_DEFINE_HANDLER_SYMBOL(KerasTreesPrunedRoutingPortable, keras_trees::Guard<keras_trees::Forward>::Call,
                              keras_trees::pruned_handlers::ForwardSignature(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(KerasTreesPrunedRoutingGradPortable, keras_trees::Guard<keras_trees::Backward>::Call,
                              keras_trees::pruned_handlers::BackwardSignature(
                                  ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(KerasTreesPrunedLeafStatisticsPortable,
                              keras_trees::Guard<keras_trees::Statistics>::Call,
                              keras_trees::pruned_handlers::StatisticsSignature(
                                  ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(KerasTreesPrunedEmStatisticsPortable, keras_trees::Guard<keras_trees::EmStatistics>::Call,
                              keras_trees::pruned_handlers::EmSignature(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));
