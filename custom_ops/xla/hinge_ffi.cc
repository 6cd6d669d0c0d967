// XLA FFI handlers (JAX binding) of random hinge trees and ferns: check the
// inputs (core/checks.h), then run the core (core/hinge.h) on XLA's intra-op
// thread pool. The forward pass hands leaf, margin and vertex to the backward
// pass, as in TensorFlow.
#include <vector>

#include "core/hinge.h"
#include "ffi_utils.h"

KT_EXPORT_FFI_HANDLER(KerasTreesHingeForest);
KT_EXPORT_FFI_HANDLER(KerasTreesHingeForestGrad);

namespace keras_trees {
namespace {

ffi::Error Forward(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer t, ffi::AnyBuffer f,
                   ffi::AnyBuffer w, ffi::Result<ffi::AnyBuffer> out,
                   ffi::Result<ffi::AnyBuffer> leaf, ffi::Result<ffi::AnyBuffer> margin,
                   ffi::Result<ffi::AnyBuffer> vertex, bool fern) {
  HingeDims d;
  if (auto m = CheckHingeShapes(fern, ShapeOf(x), ShapeOf(t), ShapeOf(f), ShapeOf(w), &d);
      !m.empty()) {
    return InvalidArgument(m);
  }
  if (auto m = CheckType(f, ffi::DataType::S32, "feature_indices", "int32"); !m.empty()) {
    return InvalidArgument(m);
  }
  return DispatchFloat(x, "x", [&](auto tag) -> ffi::Error {
    using T = decltype(tag);
    if (auto m = CheckSameType<T>({{"thresholds", &t}, {"leaf_weights", &w}}); !m.empty()) {
      return InvalidArgument(m);
    }
    const int32_t* fd = Data<int32_t>(f);
    if (auto m = CheckHingeValues<T>(d, Data<T>(x), Data<T>(t), fd, Data<T>(w)); !m.empty()) {
      return InvalidArgument(m);
    }
    HingeForestForward<T>(d, fern, Data<T>(x), Data<T>(t), fd, Data<T>(w), Data<T>(out),
                          Data<int32_t>(leaf), Data<T>(margin), Data<int32_t>(vertex),
                          XlaParallelFor(pool));
    return ffi::Error::Success();
  });
}

ffi::Error Backward(ffi::ThreadPool pool, ffi::AnyBuffer gy, ffi::AnyBuffer gm, ffi::AnyBuffer x,
                    ffi::AnyBuffer f, ffi::AnyBuffer w, ffi::AnyBuffer leaf,
                    ffi::AnyBuffer margin, ffi::AnyBuffer vertex, ffi::Result<ffi::AnyBuffer> gx,
                    ffi::Result<ffi::AnyBuffer> gt, ffi::Result<ffi::AnyBuffer> gw, bool fern) {
  HingeDims d;
  if (auto m = CheckHingeShapes(fern, ShapeOf(x), ShapeOf(f), ShapeOf(f), ShapeOf(w), &d);
      !m.empty()) {
    return InvalidArgument(m);
  }
  const Shape pairs{d.batch, d.trees};
  if (ShapeOf(gy) != Shape{d.batch, d.trees, d.units} || ShapeOf(gm) != pairs ||
      ShapeOf(leaf) != pairs || ShapeOf(margin) != pairs || ShapeOf(vertex) != pairs) {
    return InvalidArgument("grad_output, grad_margin, leaf, margin and vertex must come from the "
                           "same forward call");
  }
  return DispatchFloat(x, "x", [&](auto tag) -> ffi::Error {
    using T = decltype(tag);
    std::vector<T> workspace(HingeForestGradWorkspaceSize(d));
    const bool ok = HingeForestBackward<T>(
        d, Data<T>(gy), Data<T>(gm), Data<int32_t>(f), Data<T>(w), Data<int32_t>(leaf),
        Data<T>(margin), Data<int32_t>(vertex), workspace.data(), Data<T>(gx), Data<T>(gt),
        Data<T>(gw), XlaParallelFor(pool));
    if (!ok) {
      return InvalidArgument("leaf, vertex or feature_indices out of range: pass the leaf, "
                             "margin and vertex outputs of the same forward call");
    }
    return ffi::Error::Success();
  });
}

}  // namespace
}  // namespace keras_trees

namespace ffi = ::xla::ffi;

XLA_FFI_DEFINE_HANDLER_SYMBOL(KerasTreesHingeForest, keras_trees::Guard<keras_trees::Forward>::Call,
                              keras_trees::HingeForwardSignature(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(KerasTreesHingeForestGrad, keras_trees::Guard<keras_trees::Backward>::Call,
                              keras_trees::HingeBackwardSignature(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));

