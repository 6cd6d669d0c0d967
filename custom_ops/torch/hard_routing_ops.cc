// PyTorch ops (torch binding) of hard routing, oblique and noisy-OR (experts)
// splits: check the inputs (core/checks.h), then run the routing engine
// (core/hard_routing.h) on PyTorch's intra-op thread pool. No gradient:
// routing is piecewise constant (the Python wrappers detach the inputs).
#include "core/hard_routing.h"
#include "torch_utils.h"

namespace keras_trees {
namespace {

template <typename T>
std::tuple<Tensor, Tensor> Outputs(const RoutingDims& d, bool with_path_values) {
  return {Empty<int32_t>({d.batch, d.trees}), Empty<T>({d.batch, d.trees, with_path_values ? d.depth : 0})};
}

std::tuple<Tensor, Tensor> Route(Tensor x, Tensor w, Tensor b, Tensor is_split, bool with_path_values) {
  RoutingDims d;
  Check(CheckRoutingShapes(false, ShapeOf(x), ShapeOf(w), ShapeOf(b), ShapeOf(is_split), {}, {}, &d));
  Check(CheckType(is_split, ScalarType::Bool, "is_split", "bool"));
  x = Dense(x), w = Dense(w), b = Dense(b), is_split = Dense(is_split);
  return DispatchFloat(x, "x", [&](auto tag) {
    using T = decltype(tag);
    Check(CheckSameType<T>({{"split_weights", &w}, {"split_bias", &b}}));
    Check(CheckRoutingValues<T>(d, Data<T>(x), Data<T>(w), Data<T>(b), nullptr, nullptr));
    auto [node, path] = Outputs<T>(d, with_path_values);
    if (!HardRoute<T>(d, Data<T>(x), Data<T>(w), Data<T>(b), Data<bool>(is_split), Data<int32_t>(node),
                      with_path_values ? Data<T>(path) : nullptr, TorchParallelFor())) {
      Fail(kSplitValueOverflow);
    }
    return std::make_tuple(node, path);
  });
}

std::tuple<Tensor, Tensor> RouteExperts(Tensor x, Tensor w, Tensor b, Tensor r, Tensor c, Tensor is_split,
                                        bool with_path_values) {
  RoutingDims d;
  Check(CheckRoutingShapes(true, ShapeOf(x), ShapeOf(w), ShapeOf(b), ShapeOf(is_split), ShapeOf(r), ShapeOf(c),
                           &d));
  Check(CheckType(is_split, ScalarType::Bool, "is_split", "bool"));
  x = Dense(x), w = Dense(w), b = Dense(b), r = Dense(r), c = Dense(c), is_split = Dense(is_split);
  return DispatchFloat(x, "x", [&](auto tag) {
    using T = decltype(tag);
    Check(CheckSameType<T>({{"split_weights", &w}, {"split_bias", &b}, {"expert_weights", &r}, {"threshold", &c}}));
    Check(CheckRoutingValues<T>(d, Data<T>(x), Data<T>(w), Data<T>(b), Data<T>(r), Data<T>(c)));
    auto [node, path] = Outputs<T>(d, with_path_values);
    if (!HardRouteExperts<T>(d, Data<T>(x), Data<T>(w), Data<T>(b), Data<T>(r), Data<T>(c), Data<bool>(is_split),
                             Data<int32_t>(node), with_path_values ? Data<T>(path) : nullptr, TorchParallelFor())) {
      Fail(kSplitValueOverflow);
    }
    return std::make_tuple(node, path);
  });
}

}  // namespace
}  // namespace keras_trees

STABLE_TORCH_LIBRARY_FRAGMENT(keras_trees, m) {
  m.def("hard_route(Tensor x, Tensor split_weights, Tensor split_bias, Tensor is_split, bool with_path_values) "
        "-> (Tensor node, Tensor path_values)");
  m.def("hard_route_experts(Tensor x, Tensor split_weights, Tensor split_bias, Tensor expert_weights, "
        "Tensor threshold, Tensor is_split, bool with_path_values) -> (Tensor node, Tensor path_values)");
}

STABLE_TORCH_LIBRARY_IMPL(keras_trees, CPU, m) {
  KT_TORCH_IMPL(m, "hard_route", keras_trees::Route);
  KT_TORCH_IMPL(m, "hard_route_experts", keras_trees::RouteExperts);
}
