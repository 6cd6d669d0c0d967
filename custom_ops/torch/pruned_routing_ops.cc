// PyTorch ops (torch binding) of pruned probabilistic routing: check the
// inputs (core/checks.h), then run the core (core/pruned_routing.h) on
// PyTorch's intra-op thread pool. One op per pass (forward, backward, leaf
// statistics, EM E-step). Every op takes the split inputs by name; the
// noisy-OR form is picked by passing expert_weights and rate0 (gamma is then
// the steepness), and the core reads them in its order:
//   oblique:  split_weights, split_bias, gamma
//   experts:  split_weights, split_bias, expert_weights, rate0, steepness
// All shapes are static: the backward op walks the kept paths again instead of
// reading a trace. The threshold is rounded to float32 first, as the other
// bindings' float attribute is.
#include <algorithm>
#include <optional>
#include <vector>

#include "core/pruned_routing.h"
#include "torch_utils.h"

namespace keras_trees {
namespace {

// The split inputs in the core's order, checked; fills *d (units excepted)
// and the split pointers of both forms.
template <typename T>
struct Splits {
  std::vector<Tensor> tensors;  // the core's order
  ObliqueSplits<T> oblique;
  ExpertSplits<T> experts;
  bool is_experts = false;
};

std::vector<Tensor> CoreOrder(const Tensor& w, const Tensor& b, const Tensor& gamma,
                              const std::optional<Tensor>& expert_weights, const std::optional<Tensor>& rate0) {
  if (expert_weights.has_value() != rate0.has_value()) {
    Fail("pruned routing: pass expert_weights and rate0 together (noisy-OR splits) or neither");
  }
  if (expert_weights.has_value()) return {Dense(w), Dense(b), Dense(*expert_weights), Dense(*rate0), Dense(gamma)};
  return {Dense(w), Dense(b), Dense(gamma)};
}

template <typename T>
Splits<T> Read(const Tensor& x, std::vector<Tensor> splits, const Tensor& is_split, bool annealed, double threshold,
               PrunedRoutingDims* d) {
  Splits<T> in;
  in.is_experts = splits.size() == 5;
  std::vector<Shape> shapes;
  for (const Tensor& s : splits) {
    if (!HasType<T>(s)) Fail("every split input must have the dtype of x");
    shapes.push_back(ShapeOf(s));
  }
  Check(CheckPrunedRoutingShapes(in.is_experts, ShapeOf(x), shapes, ShapeOf(is_split), d));
  Check(CheckType(is_split, ScalarType::Bool, "is_split", "bool"));
  const T* p[5] = {};
  for (size_t i = 0; i < splits.size(); ++i) p[i] = Data<T>(splits[i]);
  if (in.is_experts) {
    in.experts = ExpertSplits<T>{p[0], p[1], p[2], p[3], p[4], annealed};
  } else {
    in.oblique = ObliqueSplits<T>{p[0], p[1], p[2]};
  }
  Check(CheckPrunedRoutingValues<T>(*d, Data<T>(x), in.is_experts, p, threshold));
  in.tensors = std::move(splits);
  return in;
}

std::tuple<Tensor, Tensor, Tensor, Tensor> Forward(Tensor x, Tensor w, Tensor b, Tensor gamma, Tensor is_split,
                                                   Tensor v, std::optional<Tensor> expert_weights,
                                                   std::optional<Tensor> rate0, double threshold_in, bool annealed) {
  const float threshold = static_cast<float>(threshold_in);
  x = Dense(x), is_split = Dense(is_split), v = Dense(v);
  std::vector<Tensor> splits = CoreOrder(w, b, gamma, expert_weights, rate0);
  return DispatchFloat(x, "x", [&](auto tag) {
    using T = decltype(tag);
    PrunedRoutingDims d;
    Splits<T> in = Read<T>(x, splits, is_split, annealed, threshold, &d);
    Check(CheckPrunedLeafValues(ShapeOf(v), &d));
    if (!HasType<T>(v)) Fail("leaf_values must have the dtype of x");
    Check(CheckPrunedLeafValueData<T>(d, Data<T>(v)));
    const Shape pairs{d.batch, d.trees};
    Tensor out = Empty<T>({d.batch, d.trees, d.units}), kept = Empty<int32_t>(pairs);
    Tensor evaluations = Empty<int32_t>(pairs), dropped = Empty<T>(pairs);
    auto run = [&](const auto& s) {
      PrunedRoutingForward<T>(d, Data<T>(x), s, Data<bool>(is_split), Data<T>(v), T(threshold), Data<T>(out),
                              Data<int32_t>(kept), Data<int32_t>(evaluations), Data<T>(dropped), TorchParallelFor());
    };
    in.is_experts ? run(in.experts) : run(in.oblique);
    return std::make_tuple(out, kept, evaluations, dropped);
  });
}

// grad_output, then the forward op's arguments. Without x_grad, grad_x is
// zeros and not computed (the inputs of a forest are often data). The
// gradients of expert_weights and rate0 are empty tensors for oblique splits.
std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor> Backward(
    Tensor gy, Tensor x, Tensor w, Tensor b, Tensor gamma, Tensor is_split, Tensor v,
    std::optional<Tensor> expert_weights, std::optional<Tensor> rate0, double threshold_in, bool annealed,
    bool x_grad) {
  const float threshold = static_cast<float>(threshold_in);
  gy = Dense(gy), x = Dense(x), is_split = Dense(is_split), v = Dense(v);
  std::vector<Tensor> splits = CoreOrder(w, b, gamma, expert_weights, rate0);
  return DispatchFloat(x, "x", [&](auto tag) {
    using T = decltype(tag);
    PrunedRoutingDims d;
    Splits<T> in = Read<T>(x, splits, is_split, annealed, threshold, &d);
    Check(CheckPrunedLeafValues(ShapeOf(v), &d));
    Check(CheckPerPair(ShapeOf(gy), "grad_output", &d));
    if (!HasType<T>(gy) || !HasType<T>(v)) Fail("grad_output and leaf_values need x's dtype");
    std::vector<Tensor> g;
    for (const Tensor& s : in.tensors) g.push_back(Empty<T>(ShapeOf(s)));
    Tensor gx = x_grad ? Empty<T>(ShapeOf(x)) : Zeros<T>(ShapeOf(x));
    Tensor gv = Empty<T>(ShapeOf(v));
    T* grad_x = x_grad ? Data<T>(gx) : nullptr;
    if (in.is_experts) {
      PrunedRoutingBackward<T>(d, Data<T>(gy), Data<T>(x), in.experts, Data<bool>(is_split), Data<T>(v), T(threshold),
                               grad_x,
                               ExpertSplitGrads<T>{Data<T>(g[0]), Data<T>(g[1]), Data<T>(g[2]), Data<T>(g[3]),
                                                   Data<T>(g[4])},
                               Data<T>(gv), TorchParallelFor());
      return std::make_tuple(gx, g[0], g[1], g[4], gv, g[2], g[3]);
    }
    PrunedRoutingBackward<T>(d, Data<T>(gy), Data<T>(x), in.oblique, Data<bool>(is_split), Data<T>(v), T(threshold),
                             grad_x, ObliqueSplitGrads<T>{Data<T>(g[0]), Data<T>(g[1]), Data<T>(g[2])}, Data<T>(gv),
                             TorchParallelFor());
    return std::make_tuple(gx, g[0], g[1], g[2], gv, Empty<T>({0}), Empty<T>({0}));
  });
}

Tensor Statistics(Tensor weights, Tensor x, Tensor w, Tensor b, Tensor gamma, Tensor is_split,
                  std::optional<Tensor> expert_weights, std::optional<Tensor> rate0, double threshold_in,
                  bool annealed) {
  const float threshold = static_cast<float>(threshold_in);
  weights = Dense(weights), x = Dense(x), is_split = Dense(is_split);
  std::vector<Tensor> splits = CoreOrder(w, b, gamma, expert_weights, rate0);
  return DispatchFloat(x, "x", [&](auto tag) {
    using T = decltype(tag);
    PrunedRoutingDims d;
    Splits<T> in = Read<T>(x, splits, is_split, annealed, threshold, &d);
    d.units = -1;
    Check(CheckPerPair(ShapeOf(weights), "weights", &d));
    if (!HasType<T>(weights)) Fail("weights must have the dtype of x");
    Tensor statistics = Empty<T>({d.trees, 2 * d.num_internal + 1, d.units});
    auto run = [&](const auto& s) {
      PrunedLeafStatistics<T>(d, Data<T>(weights), Data<T>(x), s, Data<bool>(is_split), T(threshold),
                              Data<T>(statistics), TorchParallelFor());
    };
    in.is_experts ? run(in.experts) : run(in.oblique);
    return statistics;
  });
}

Tensor EmStatistics(Tensor x, Tensor w, Tensor b, Tensor gamma, Tensor is_split, Tensor v, Tensor labels,
                    Tensor sample_weight, double threshold_in) {
  const float threshold = static_cast<float>(threshold_in);
  x = Dense(x), is_split = Dense(is_split), v = Dense(v), labels = Dense(labels);
  sample_weight = Dense(sample_weight);
  std::vector<Tensor> splits = CoreOrder(w, b, gamma, std::nullopt, std::nullopt);
  return DispatchFloat(x, "x", [&](auto tag) {
    using T = decltype(tag);
    PrunedRoutingDims d;
    Splits<T> in = Read<T>(x, splits, is_split, true, threshold, &d);
    if (!HasType<T>(v) || !HasType<T>(sample_weight)) Fail("leaf_values and sample_weight need x's dtype");
    Check(CheckType(labels, ScalarType::Int, "labels", "int32"));
    Check(CheckEmInputs<T>(ShapeOf(v), ShapeOf(labels), ShapeOf(sample_weight), Data<T>(v), Data<int32_t>(labels),
                           Data<T>(sample_weight), &d));
    Tensor counts = Empty<T>({d.trees, 2 * d.num_internal + 1, d.units});
    PrunedEmStatistics<T>(d, Data<T>(x), in.oblique, Data<bool>(is_split), Data<T>(v), Data<int32_t>(labels),
                          Data<T>(sample_weight), T(threshold), Data<T>(counts), TorchParallelFor());
    return counts;
  });
}

}  // namespace
}  // namespace keras_trees

STABLE_TORCH_LIBRARY_FRAGMENT(keras_trees, m) {
  m.def("pruned_route(Tensor x, Tensor split_weights, Tensor split_bias, Tensor gamma, Tensor is_split, "
        "Tensor leaf_values, Tensor? expert_weights, Tensor? rate0, float threshold, bool annealed) "
        "-> (Tensor output, Tensor kept_leaves, Tensor split_evaluations, Tensor dropped_mass)");
  m.def("pruned_route_grad(Tensor grad_output, Tensor x, Tensor split_weights, Tensor split_bias, Tensor gamma, "
        "Tensor is_split, Tensor leaf_values, Tensor? expert_weights, Tensor? rate0, float threshold, "
        "bool annealed, bool x_grad) -> (Tensor grad_x, Tensor grad_split_weights, Tensor grad_split_bias, "
        "Tensor grad_gamma, Tensor grad_leaf_values, Tensor grad_expert_weights, Tensor grad_rate0)");
  m.def("pruned_leaf_statistics(Tensor weights, Tensor x, Tensor split_weights, Tensor split_bias, Tensor gamma, "
        "Tensor is_split, Tensor? expert_weights, Tensor? rate0, float threshold, bool annealed) -> Tensor");
  m.def("pruned_em_statistics(Tensor x, Tensor split_weights, Tensor split_bias, Tensor gamma, Tensor is_split, "
        "Tensor leaf_values, Tensor labels, Tensor sample_weight, float threshold) -> Tensor");
}

STABLE_TORCH_LIBRARY_IMPL(keras_trees, CPU, m) {
  KT_TORCH_IMPL(m, "pruned_route", keras_trees::Forward);
  KT_TORCH_IMPL(m, "pruned_route_grad", keras_trees::Backward);
  KT_TORCH_IMPL(m, "pruned_leaf_statistics", keras_trees::Statistics);
  KT_TORCH_IMPL(m, "pruned_em_statistics", keras_trees::EmStatistics);
}
