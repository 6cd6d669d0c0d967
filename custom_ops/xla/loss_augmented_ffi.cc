// XLA FFI handler (JAX binding) of the loss-augmented inference of non-greedy
// trees: check the inputs (core/checks.h), then run the core
// (core/loss_augmented.h) on XLA's intra-op thread pool. No gradient: the
// result is an argmax (the surrogate's gradient flows through keras.ops).
#include "core/loss_augmented.h"
#include "ffi_utils.h"

KT_EXPORT_FFI_HANDLER(KerasTreesLossAugmentedInference);

namespace keras_trees {
namespace {

template <typename T, typename TL>
ffi::Error Run(ffi::ThreadPool pool, const LossAugmentedDims& d, bool log_loss, bool fast,
               const ffi::AnyBuffer& x, const ffi::AnyBuffer& w, const ffi::AnyBuffer& b,
               const ffi::AnyBuffer& theta, const ffi::AnyBuffer& y, ffi::Result<ffi::AnyBuffer>& g,
               ffi::Result<ffi::AnyBuffer>& h, ffi::Result<ffi::AnyBuffer>& score) {
  if (auto m = CheckLossAugmentedValues<T, TL>(d, log_loss, Data<T>(x), Data<T>(w), Data<T>(b),
                                               Data<T>(theta), Data<TL>(y));
      !m.empty()) {
    return InvalidArgument(m);
  }
  if (!LossAugmentedInference<T, TL>(d, log_loss, fast, Data<T>(x), Data<T>(w), Data<T>(b),
                                     Data<T>(theta), Data<TL>(y), Data<int32_t>(g), Data<int32_t>(h),
                                     Data<T>(score), XlaParallelFor(pool))) {
    return InvalidArgument(kSplitValueOverflow);
  }
  return ffi::Error::Success();
}

ffi::Error Infer(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer w, ffi::AnyBuffer b,
                 ffi::AnyBuffer theta, ffi::AnyBuffer y, ffi::Result<ffi::AnyBuffer> g,
                 ffi::Result<ffi::AnyBuffer> h, ffi::Result<ffi::AnyBuffer> score, bool log_loss,
                 bool fast) {
  LossAugmentedDims d;
  if (auto m = CheckLossAugmentedShapes(log_loss, ShapeOf(x), ShapeOf(w), ShapeOf(b),
                                        ShapeOf(theta), ShapeOf(y), &d);
      !m.empty()) {
    return InvalidArgument(m);
  }
  return DispatchFloat(x, "x", [&](auto tag) -> ffi::Error {
    using T = decltype(tag);
    if (auto m = CheckSameType<T>({{"split_weights", &w}, {"split_bias", &b}, {"leaf_values", &theta}});
        !m.empty()) {
      return InvalidArgument(m);
    }
    if (log_loss) {
      if (auto m = CheckType(y, ffi::DataType::S32, "labels", "int32 for loss='log'"); !m.empty()) {
        return InvalidArgument(m);
      }
      return Run<T, int32_t>(pool, d, log_loss, fast, x, w, b, theta, y, g, h, score);
    }
    if (!HasType<T>(y)) return InvalidArgument("loss='squared' needs targets of the same dtype as x");
    return Run<T, T>(pool, d, log_loss, fast, x, w, b, theta, y, g, h, score);
  });
}

}  // namespace
}  // namespace keras_trees

namespace ffi = ::xla::ffi;

XLA_FFI_DEFINE_HANDLER_SYMBOL(KerasTreesLossAugmentedInference, keras_trees::Guard<keras_trees::Infer>::Call,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::AnyBuffer>()  // x
                                  .Arg<ffi::AnyBuffer>()  // split_weights
                                  .Arg<ffi::AnyBuffer>()  // split_bias
                                  .Arg<ffi::AnyBuffer>()  // leaf_values
                                  .Arg<ffi::AnyBuffer>()  // labels (int32) or targets
                                  .Ret<ffi::AnyBuffer>()  // g_leaf (int32)
                                  .Ret<ffi::AnyBuffer>()  // h_leaf (int32)
                                  .Ret<ffi::AnyBuffer>()  // score
                                  .Attr<bool>("log_loss")
                                  .Attr<bool>("fast"));

