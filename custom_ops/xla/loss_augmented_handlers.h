// XLA FFI handler (JAX binding) of the loss-augmented inference pipeline
// (core/loss_augmented_pipeline.h), written once for every executor: the CUDA
// handler (cuda/xla_loss_augmented.cu, platform "CUDA", device buffers) and
// its CPU emulation (xla/loss_augmented_portable_ffi.cc, target
// "KerasTreesLossAugmentedInferencePortable", host buffers). Shapes and dtypes
// are checked here with the CPU handler's words (xla/loss_augmented_ffi.cc);
// values by the pipeline's status words. `make_exec()` returns the executor
// of one call.
#ifndef KERAS_TREES_XLA_LOSS_AUGMENTED_HANDLERS_H_
#define KERAS_TREES_XLA_LOSS_AUGMENTED_HANDLERS_H_

#include "core/checks.h"
#include "core/loss_augmented_pipeline.h"
#include "ffi_utils.h"

namespace keras_trees {

// The CPU handler's arguments, results and attributes, after each platform's
// context.
template <typename Binding>
auto LossAugmentedSignature(Binding binding) {
  return std::move(binding).template Arg<ffi::AnyBuffer>()  // x
      .template Arg<ffi::AnyBuffer>()            // split_weights
      .template Arg<ffi::AnyBuffer>()            // split_bias
      .template Arg<ffi::AnyBuffer>()            // leaf_values
      .template Arg<ffi::AnyBuffer>()            // labels (int32) or targets
      .template Ret<ffi::AnyBuffer>()            // g_leaf (int32)
      .template Ret<ffi::AnyBuffer>()            // h_leaf (int32)
      .template Ret<ffi::AnyBuffer>()            // score
      .template Attr<bool>("log_loss")
      .template Attr<bool>("fast");
}

namespace pipeline_handlers {

template <class MakeExec>
ffi::Error LossAugmented(const MakeExec& make_exec, ffi::AnyBuffer x, ffi::AnyBuffer w, ffi::AnyBuffer b,
                         ffi::AnyBuffer theta, ffi::AnyBuffer y, ffi::Result<ffi::AnyBuffer> g,
                         ffi::Result<ffi::AnyBuffer> h, ffi::Result<ffi::AnyBuffer> score, bool log_loss,
                         bool fast) {
  LossAugmentedDims d;
  if (auto m = CheckLossAugmentedShapes(log_loss, ShapeOf(x), ShapeOf(w), ShapeOf(b), ShapeOf(theta), ShapeOf(y),
                                        &d);
      !m.empty()) {
    return InvalidArgument(m);
  }
  return DispatchFloat(x, "x", [&](auto tag) -> ffi::Error {
    using T = decltype(tag);
    if (auto m = CheckSameType<T>({{"split_weights", &w}, {"split_bias", &b}, {"leaf_values", &theta}});
        !m.empty()) {
      return InvalidArgument(m);
    }
    auto exec = make_exec();
    if (log_loss) {
      if (auto m = CheckType(y, ffi::DataType::S32, "labels", "int32 for loss='log'"); !m.empty()) {
        return InvalidArgument(m);
      }
      return FromCheck(LossAugmentedPipeline<T, int32_t>(exec, d, log_loss, fast, Data<T>(x), Data<T>(w),
                                                         Data<T>(b), Data<T>(theta), Data<int32_t>(y),
                                                         Data<int32_t>(g), Data<int32_t>(h), Data<T>(score)));
    }
    if (!HasType<T>(y)) return InvalidArgument("loss='squared' needs targets of the same dtype as x");
    return FromCheck(LossAugmentedPipeline<T, T>(exec, d, log_loss, fast, Data<T>(x), Data<T>(w), Data<T>(b),
                                                 Data<T>(theta), Data<T>(y), Data<int32_t>(g), Data<int32_t>(h),
                                                 Data<T>(score)));
  });
}

}  // namespace pipeline_handlers
}  // namespace keras_trees

#endif  // KERAS_TREES_XLA_LOSS_AUGMENTED_HANDLERS_H_
