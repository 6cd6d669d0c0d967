// PyTorch op (torch binding) of the loss-augmented inference of non-greedy
// trees: check the inputs (core/checks.h), then run the core
// (core/loss_augmented.h) on PyTorch's intra-op thread pool. No gradient: the
// result is an argmax (the surrogate's gradient flows through keras.ops).
#include "core/loss_augmented.h"
#include "torch_utils.h"

namespace keras_trees {
namespace {

template <typename T, typename TL>
std::tuple<Tensor, Tensor, Tensor> Run(const LossAugmentedDims& d, bool log_loss, bool fast, const Tensor& x,
                                       const Tensor& w, const Tensor& b, const Tensor& theta, const Tensor& y) {
  Check(CheckLossAugmentedValues<T, TL>(d, log_loss, Data<T>(x), Data<T>(w), Data<T>(b), Data<T>(theta),
                                        Data<TL>(y)));
  Tensor g = Empty<int32_t>({d.batch}), h = Empty<int32_t>({d.batch}), score = Empty<T>({d.batch});
  if (!LossAugmentedInference<T, TL>(d, log_loss, fast, Data<T>(x), Data<T>(w), Data<T>(b), Data<T>(theta),
                                     Data<TL>(y), Data<int32_t>(g), Data<int32_t>(h), Data<T>(score),
                                     TorchParallelFor())) {
    Fail(kSplitValueOverflow);
  }
  return {g, h, score};
}

std::tuple<Tensor, Tensor, Tensor> Infer(Tensor x, Tensor w, Tensor b, Tensor theta, Tensor y, bool log_loss,
                                         bool fast) {
  LossAugmentedDims d;
  Check(CheckLossAugmentedShapes(log_loss, ShapeOf(x), ShapeOf(w), ShapeOf(b), ShapeOf(theta), ShapeOf(y), &d));
  x = Dense(x), w = Dense(w), b = Dense(b), theta = Dense(theta), y = Dense(y);
  return DispatchFloat(x, "x", [&](auto tag) {
    using T = decltype(tag);
    Check(CheckSameType<T>({{"split_weights", &w}, {"split_bias", &b}, {"leaf_values", &theta}}));
    if (log_loss) {
      Check(CheckType(y, ScalarType::Int, "labels", "int32 for loss='log'"));
      return Run<T, int32_t>(d, log_loss, fast, x, w, b, theta, y);
    }
    if (!HasType<T>(y)) Fail("loss='squared' needs targets of the same dtype as x");
    return Run<T, T>(d, log_loss, fast, x, w, b, theta, y);
  });
}

}  // namespace
}  // namespace keras_trees

STABLE_TORCH_LIBRARY_FRAGMENT(keras_trees, m) {
  m.def("loss_augmented_inference(Tensor x, Tensor split_weights, Tensor split_bias, Tensor leaf_values, "
        "Tensor labels, bool log_loss, bool fast) -> (Tensor g_leaf, Tensor h_leaf, Tensor score)");
}

STABLE_TORCH_LIBRARY_IMPL(keras_trees, CPU, m) {
  KT_TORCH_IMPL(m, "loss_augmented_inference", keras_trees::Infer);
}
