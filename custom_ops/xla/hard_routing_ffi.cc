// XLA FFI handlers (JAX binding) of hard routing, oblique and noisy-OR
// (experts) splits: check the inputs (core/checks.h), then run the routing
// engine (core/hard_routing.h) on XLA's intra-op thread pool. No gradient:
// routing is piecewise constant.
#include "core/hard_routing.h"
#include "ffi_utils.h"

KT_EXPORT_FFI_HANDLER(KerasTreesHardRouting);
KT_EXPORT_FFI_HANDLER(KerasTreesHardRoutingExperts);

namespace keras_trees {
namespace {

ffi::Error Route(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer w, ffi::AnyBuffer b,
                 ffi::AnyBuffer is_split, ffi::Result<ffi::AnyBuffer> node,
                 ffi::Result<ffi::AnyBuffer> path_values, bool with_path_values) {
  RoutingDims d;
  if (auto m = CheckRoutingShapes(false, ShapeOf(x), ShapeOf(w), ShapeOf(b), ShapeOf(is_split), {},
                                  {}, &d);
      !m.empty()) {
    return InvalidArgument(m);
  }
  if (auto m = CheckType(is_split, ffi::DataType::PRED, "is_split", "bool"); !m.empty()) {
    return InvalidArgument(m);
  }
  return DispatchFloat(x, "x", [&](auto tag) -> ffi::Error {
    using T = decltype(tag);
    if (auto m = CheckSameType<T>({{"split_weights", &w}, {"split_bias", &b}}); !m.empty()) {
      return InvalidArgument(m);
    }
    if (auto m = CheckRoutingValues<T>(d, Data<T>(x), Data<T>(w), Data<T>(b), nullptr, nullptr); !m.empty()) return InvalidArgument(m);
    if (!HardRoute<T>(d, Data<T>(x), Data<T>(w), Data<T>(b), Data<bool>(is_split),
                      Data<int32_t>(node), with_path_values ? Data<T>(path_values) : nullptr,
                      XlaParallelFor(pool))) {
      return InvalidArgument(kSplitValueOverflow);
    }
    return ffi::Error::Success();
  });
}

ffi::Error RouteExperts(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer w, ffi::AnyBuffer b,
                        ffi::AnyBuffer r, ffi::AnyBuffer c, ffi::AnyBuffer is_split,
                        ffi::Result<ffi::AnyBuffer> node, ffi::Result<ffi::AnyBuffer> path_values,
                        bool with_path_values) {
  RoutingDims d;
  if (auto m = CheckRoutingShapes(true, ShapeOf(x), ShapeOf(w), ShapeOf(b), ShapeOf(is_split),
                                  ShapeOf(r), ShapeOf(c), &d);
      !m.empty()) {
    return InvalidArgument(m);
  }
  if (auto m = CheckType(is_split, ffi::DataType::PRED, "is_split", "bool"); !m.empty()) {
    return InvalidArgument(m);
  }
  return DispatchFloat(x, "x", [&](auto tag) -> ffi::Error {
    using T = decltype(tag);
    if (auto m = CheckSameType<T>({{"split_weights", &w}, {"split_bias", &b},
                                   {"expert_weights", &r}, {"threshold", &c}});
        !m.empty()) {
      return InvalidArgument(m);
    }
    if (auto m = CheckRoutingValues<T>(d, Data<T>(x), Data<T>(w), Data<T>(b), Data<T>(r), Data<T>(c)); !m.empty()) {
      return InvalidArgument(m);
    }
    if (!HardRouteExperts<T>(d, Data<T>(x), Data<T>(w), Data<T>(b), Data<T>(r), Data<T>(c),
                             Data<bool>(is_split), Data<int32_t>(node),
                             with_path_values ? Data<T>(path_values) : nullptr,
                             XlaParallelFor(pool))) {
      return InvalidArgument(kSplitValueOverflow);
    }
    return ffi::Error::Success();
  });
}

}  // namespace
}  // namespace keras_trees

namespace ffi = ::xla::ffi;

XLA_FFI_DEFINE_HANDLER_SYMBOL(KerasTreesHardRouting, keras_trees::Guard<keras_trees::Route>::Call,
                              keras_trees::RouteSignature(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(KerasTreesHardRoutingExperts, keras_trees::Guard<keras_trees::RouteExperts>::Call,
                              keras_trees::RouteExpertsSignature(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));

