// XLA FFI handlers (JAX binding) of pruned probabilistic routing: check the
// inputs (core/checks.h), then run the core (core/pruned_routing.h) on XLA's
// intra-op thread pool. One handler per pass (forward, backward, leaf
// statistics); the `experts` attribute picks the split form, whose inputs
// follow x in the kernels' order:
//   oblique:  split_weights, split_bias, gamma
//   experts:  split_weights, split_bias, expert_weights, rate0, steepness
// then is_split (bool). All shapes are static: the backward pass walks the kept
// paths again instead of reading a trace.
#include <algorithm>
#include <vector>

#include "core/pruned_routing.h"
#include "ffi_utils.h"

KT_EXPORT_FFI_HANDLER(KerasTreesPrunedRouting);
KT_EXPORT_FFI_HANDLER(KerasTreesPrunedRoutingGrad);
KT_EXPORT_FFI_HANDLER(KerasTreesPrunedLeafStatistics);
KT_EXPORT_FFI_HANDLER(KerasTreesPrunedEmStatistics);

namespace keras_trees {
namespace {

// The arguments from `first` on: x, the split inputs, is_split, then `extra`
// more (leaf_values). Checks their shapes and dtypes, fills *d and the split
// pointers of both forms.
template <typename T>
struct Inputs {
  std::vector<ffi::AnyBuffer> buffers;  // x, splits..., is_split, extra...
  ObliqueSplits<T> oblique;
  ExpertSplits<T> experts;
  bool is_experts = false;

  const ffi::AnyBuffer& x() const { return buffers[0]; }
  const ffi::AnyBuffer& is_split() const { return buffers[is_experts ? 6 : 4]; }
  const ffi::AnyBuffer& extra(size_t i) const { return buffers[(is_experts ? 7 : 5) + i]; }
};

template <typename T>
std::string Read(const std::vector<ffi::AnyBuffer>& args, bool experts, bool annealed, double threshold,
                 PrunedRoutingDims* d, Inputs<T>* in) {
  const size_t splits = experts ? 5 : 3;
  in->buffers = args;
  in->is_experts = experts;
  if (args.size() < splits + 2) return "pruned routing: too few arguments";
  std::vector<Shape> split_shapes;
  for (size_t i = 1; i <= splits; ++i) {
    if (!HasType<T>(args[i])) return "every split input must have the dtype of x";
    split_shapes.push_back(ShapeOf(args[i]));
  }
  if (auto m = CheckPrunedRoutingShapes(experts, ShapeOf(args[0]), split_shapes, ShapeOf(in->is_split()), d);
      !m.empty()) {
    return m;
  }
  if (auto m = CheckType(in->is_split(), ffi::DataType::PRED, "is_split", "bool"); !m.empty()) return m;
  const T* p[5] = {};
  for (size_t i = 0; i < splits; ++i) p[i] = Data<T>(args[1 + i]);
  if (experts) {
    in->experts = ExpertSplits<T>{p[0], p[1], p[2], p[3], p[4], annealed};
  } else {
    in->oblique = ObliqueSplits<T>{p[0], p[1], p[2]};
  }
  return CheckPrunedRoutingValues<T>(*d, Data<T>(args[0]), experts, p, threshold);
}

std::vector<ffi::AnyBuffer> Buffers(const ffi::RemainingArgs& args, size_t from = 0) {
  std::vector<ffi::AnyBuffer> out;
  for (size_t i = from; i < args.size(); ++i) out.push_back(*args.get<ffi::AnyBuffer>(i));
  return out;
}

template <typename R>
std::vector<R> Results(ffi::RemainingRets& rets) {
  std::vector<R> out;
  for (size_t i = 0; i < rets.size(); ++i) out.push_back(*rets.get<ffi::AnyBuffer>(i));
  return out;
}

ffi::Error Forward(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::RemainingRets rets,
                   float threshold, bool experts, bool annealed) {
  const std::vector<ffi::AnyBuffer> in_args = Buffers(args);
  if (in_args.empty() || rets.size() != 4) return InvalidArgument("pruned routing: wrong arity");
  auto out = Results<ffi::Result<ffi::AnyBuffer>>(rets);
  return DispatchFloat(in_args[0], "x", [&](auto tag) -> ffi::Error {
    using T = decltype(tag);
    PrunedRoutingDims d;
    Inputs<T> in;
    if (auto m = Read<T>(in_args, experts, annealed, threshold, &d, &in); !m.empty()) return InvalidArgument(m);
    if (in_args.size() != (experts ? 8u : 6u)) return InvalidArgument("pruned routing: pass leaf_values last");
    const ffi::AnyBuffer& v = in.extra(0);
    if (auto m = CheckPrunedLeafValues(ShapeOf(v), &d); !m.empty()) return InvalidArgument(m);
    if (!HasType<T>(v)) return InvalidArgument("leaf_values must have the dtype of x");
    if (auto m = CheckPrunedLeafValueData<T>(d, Data<T>(v)); !m.empty()) return InvalidArgument(m);
    auto run = [&](const auto& splits) {
      PrunedRoutingForward<T>(d, Data<T>(in.x()), splits, Data<bool>(in.is_split()), Data<T>(v), T(threshold),
                              Data<T>(out[0]), Data<int32_t>(out[1]), Data<int32_t>(out[2]), Data<T>(out[3]),
                              XlaParallelFor(pool));
    };
    experts ? run(in.experts) : run(in.oblique);
    return ffi::Error::Success();
  });
}

ffi::Error Backward(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::RemainingRets rets,
                    float threshold, bool experts, bool annealed, bool x_grad) {
  // grad_output, then the forward call's arguments. Without x_grad, grad_x is
  // zeros and not computed (the inputs of a forest are often data).
  if (args.size() < 2) return InvalidArgument("pruned routing grad: wrong arity");
  const ffi::AnyBuffer gy = *args.get<ffi::AnyBuffer>(0);
  const std::vector<ffi::AnyBuffer> in_args = Buffers(args, 1);
  auto out = Results<ffi::Result<ffi::AnyBuffer>>(rets);
  const size_t splits = experts ? 5 : 3;
  if (out.size() != splits + 2) return InvalidArgument("pruned routing grad: wrong number of results");
  return DispatchFloat(in_args[0], "x", [&](auto tag) -> ffi::Error {
    using T = decltype(tag);
    PrunedRoutingDims d;
    Inputs<T> in;
    if (auto m = Read<T>(in_args, experts, annealed, threshold, &d, &in); !m.empty()) return InvalidArgument(m);
    const ffi::AnyBuffer& v = in.extra(0);
    if (auto m = CheckPrunedLeafValues(ShapeOf(v), &d); !m.empty()) return InvalidArgument(m);
    if (auto m = CheckPerPair(ShapeOf(gy), "grad_output", &d); !m.empty()) return InvalidArgument(m);
    if (!HasType<T>(gy) || !HasType<T>(v)) return InvalidArgument("grad_output and leaf_values need x's dtype");
    T* g[5] = {};
    for (size_t i = 0; i < splits; ++i) g[i] = Data<T>(out[1 + i]);
    T* grad_x = Data<T>(out[0]);
    if (!x_grad) {
      std::fill_n(grad_x, d.batch * d.input_dim, T(0));
      grad_x = nullptr;
    }
    if (experts) {
      PrunedRoutingBackward<T>(d, Data<T>(gy), Data<T>(in.x()), in.experts, Data<bool>(in.is_split()), Data<T>(v),
                               T(threshold), grad_x, ExpertSplitGrads<T>{g[0], g[1], g[2], g[3], g[4]},
                               Data<T>(out[splits + 1]), XlaParallelFor(pool));
    } else {
      PrunedRoutingBackward<T>(d, Data<T>(gy), Data<T>(in.x()), in.oblique, Data<bool>(in.is_split()), Data<T>(v),
                               T(threshold), grad_x, ObliqueSplitGrads<T>{g[0], g[1], g[2]},
                               Data<T>(out[splits + 1]), XlaParallelFor(pool));
    }
    return ffi::Error::Success();
  });
}

ffi::Error Statistics(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::Result<ffi::AnyBuffer> statistics,
                      float threshold, bool experts, bool annealed) {
  // weights [batch, trees, units], then x, the split inputs and is_split.
  if (args.size() < 2) return InvalidArgument("pruned leaf statistics: wrong arity");
  const ffi::AnyBuffer weights = *args.get<ffi::AnyBuffer>(0);
  const std::vector<ffi::AnyBuffer> in_args = Buffers(args, 1);
  return DispatchFloat(in_args[0], "x", [&](auto tag) -> ffi::Error {
    using T = decltype(tag);
    PrunedRoutingDims d;
    Inputs<T> in;
    if (auto m = Read<T>(in_args, experts, annealed, threshold, &d, &in); !m.empty()) return InvalidArgument(m);
    d.units = -1;
    if (auto m = CheckPerPair(ShapeOf(weights), "weights", &d); !m.empty()) return InvalidArgument(m);
    if (!HasType<T>(weights)) return InvalidArgument("weights must have the dtype of x");
    auto run = [&](const auto& splits) {
      PrunedLeafStatistics<T>(d, Data<T>(weights), Data<T>(in.x()), splits, Data<bool>(in.is_split()),
                              T(threshold), Data<T>(statistics), XlaParallelFor(pool));
    };
    experts ? run(in.experts) : run(in.oblique);
    return ffi::Error::Success();
  });
}

ffi::Error EmStatistics(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::Result<ffi::AnyBuffer> counts,
                        float threshold) {
  // x, split_weights, split_bias, gamma, is_split, leaf_values, labels, sample_weight (oblique splits).
  const std::vector<ffi::AnyBuffer> in_args = Buffers(args);
  if (in_args.size() != 8) return InvalidArgument("pruned EM statistics: wrong arity");
  return DispatchFloat(in_args[0], "x", [&](auto tag) -> ffi::Error {
    using T = decltype(tag);
    PrunedRoutingDims d;
    Inputs<T> in;
    if (auto m = Read<T>(in_args, false, true, threshold, &d, &in); !m.empty()) return InvalidArgument(m);
    const ffi::AnyBuffer &v = in.extra(0), &labels = in.extra(1), &weights = in.extra(2);
    if (!HasType<T>(v) || !HasType<T>(weights)) return InvalidArgument("leaf_values and sample_weight need x's dtype");
    if (auto m = CheckType(labels, ffi::DataType::S32, "labels", "int32"); !m.empty()) return InvalidArgument(m);
    if (auto m = CheckEmInputs<T>(ShapeOf(v), ShapeOf(labels), ShapeOf(weights), Data<T>(v), Data<int32_t>(labels),
                                  Data<T>(weights), &d);
        !m.empty()) {
      return InvalidArgument(m);
    }
    PrunedEmStatistics<T>(d, Data<T>(in.x()), in.oblique, Data<bool>(in.is_split()), Data<T>(v),
                          Data<int32_t>(labels), Data<T>(weights), T(threshold), Data<T>(counts),
                          XlaParallelFor(pool));
    return ffi::Error::Success();
  });
}

}  // namespace
}  // namespace keras_trees

namespace ffi = ::xla::ffi;

XLA_FFI_DEFINE_HANDLER_SYMBOL(KerasTreesPrunedRouting, keras_trees::Guard<keras_trees::Forward>::Call,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .RemainingArgs()  // x, split inputs, is_split, leaf_values
                                  .RemainingRets()  // output, kept_leaves, split_evaluations, dropped_mass
                                  .Attr<float>("threshold")
                                  .Attr<bool>("experts")
                                  .Attr<bool>("annealed"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(KerasTreesPrunedRoutingGrad, keras_trees::Guard<keras_trees::Backward>::Call,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .RemainingArgs()  // grad_output, then the forward arguments
                                  .RemainingRets()  // grad_x, split input grads, grad_leaf_values
                                  .Attr<float>("threshold")
                                  .Attr<bool>("experts")
                                  .Attr<bool>("annealed")
                                  .Attr<bool>("x_grad"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(KerasTreesPrunedLeafStatistics, keras_trees::Guard<keras_trees::Statistics>::Call,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .RemainingArgs()  // weights, x, split inputs, is_split
                                  .Ret<ffi::AnyBuffer>()  // statistics [trees, positions, units]
                                  .Attr<float>("threshold")
                                  .Attr<bool>("experts")
                                  .Attr<bool>("annealed"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(KerasTreesPrunedEmStatistics, keras_trees::Guard<keras_trees::EmStatistics>::Call,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .RemainingArgs()  // x, split inputs, is_split, leaf_values, labels, sample_weight
                                  .Ret<ffi::AnyBuffer>()  // counts [trees, positions, classes]
                                  .Attr<float>("threshold"));
