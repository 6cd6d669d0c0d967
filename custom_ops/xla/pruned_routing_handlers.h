// XLA FFI handlers (JAX binding) of pruned probabilistic routing that run its
// kernel pipelines (core/pruned_routing_pipeline.h), written once for every
// executor: the CUDA handlers (cuda/xla_pruned_routing.cu, platform "CUDA",
// device buffers) and their CPU emulation (xla/pruned_routing_portable_ffi.cc,
// targets "KerasTreesPruned...Portable", host buffers). Same arguments,
// results and attributes as the CPU handlers (xla/pruned_routing_ffi.cc):
//   forward:    x, split inputs, is_split, leaf_values -> output, kept_leaves,
//               split_evaluations, dropped_mass
//   backward:   grad_output, then the forward arguments -> grad_x, the split
//               inputs' gradients, grad_leaf_values
//   statistics: weights, x, split inputs, is_split -> statistics
//   E-step:     x, split_weights, split_bias, gamma, is_split, leaf_values,
//               labels, sample_weight -> counts
// with the split inputs (oblique) split_weights, split_bias, gamma or
// (noisy-OR) split_weights, split_bias, expert_weights, rate0, steepness.
// Shapes and dtypes are checked here with the CPU handlers' words (on the
// host: shapes are static); values by the pipelines' status words on the
// device. `make_exec()` returns the executor of one call.
#ifndef KERAS_TREES_XLA_PRUNED_ROUTING_HANDLERS_H_
#define KERAS_TREES_XLA_PRUNED_ROUTING_HANDLERS_H_

#include <string>
#include <vector>

#include "core/checks.h"
#include "core/pruned_routing_pipeline.h"
#include "xla/ffi_utils.h"

namespace keras_trees {
namespace pruned_handlers {

inline std::vector<ffi::AnyBuffer> Buffers(const ffi::RemainingArgs& args, size_t from = 0) {
  std::vector<ffi::AnyBuffer> out;
  for (size_t i = from; i < args.size(); ++i) out.push_back(*args.get<ffi::AnyBuffer>(i));
  return out;
}

inline std::vector<ffi::Result<ffi::AnyBuffer>> Results(ffi::RemainingRets& rets) {
  std::vector<ffi::Result<ffi::AnyBuffer>> out;
  for (size_t i = 0; i < rets.size(); ++i) out.push_back(*rets.get<ffi::AnyBuffer>(i));
  return out;
}

// x, the split inputs and is_split from args[0]: shapes, dtypes, pointers.
template <typename T>
std::string ReadSplits(const std::vector<ffi::AnyBuffer>& args, bool experts, bool annealed, PrunedRoutingDims* d,
                       pruned::Splits<T>* sp) {
  const size_t splits = experts ? 5 : 3;
  if (args.size() < splits + 2) return "pruned routing: too few arguments";
  std::vector<Shape> shapes;
  for (size_t i = 1; i <= splits; ++i) {
    if (!HasType<T>(args[i])) return "every split input must have the dtype of x";
    shapes.push_back(ShapeOf(args[i]));
  }
  if (auto m = CheckPrunedRoutingShapes(experts, ShapeOf(args[0]), shapes, ShapeOf(args[splits + 1]), d);
      !m.empty()) {
    return m;
  }
  if (auto m = CheckType(args[splits + 1], ffi::DataType::PRED, "is_split", "bool"); !m.empty()) return m;
  sp->weights = Data<T>(args[1]);
  sp->bias = Data<T>(args[2]);
  if (experts) {
    sp->expert_weights = Data<T>(args[3]);
    sp->rate0 = Data<T>(args[4]);
    sp->gamma = Data<T>(args[5]);
  } else {
    sp->gamma = Data<T>(args[3]);
  }
  sp->annealed = annealed;
  return "";
}

template <class MakeExec>
ffi::Error Forward(const MakeExec& make_exec, ffi::RemainingArgs args, ffi::RemainingRets rets, float threshold,
                   bool experts, bool annealed) {
  const std::vector<ffi::AnyBuffer> in = Buffers(args);
  if (in.empty() || rets.size() != 4) return InvalidArgument("pruned routing: wrong arity");
  auto out = Results(rets);
  return DispatchFloat(in[0], "x", [&](auto tag) -> ffi::Error {
    using T = decltype(tag);
    PrunedRoutingDims d;
    pruned::Splits<T> sp;
    if (auto m = ReadSplits<T>(in, experts, annealed, &d, &sp); !m.empty()) return InvalidArgument(m);
    if (in.size() != (experts ? 8u : 6u)) return InvalidArgument("pruned routing: pass leaf_values last");
    const ffi::AnyBuffer& v = in.back();
    if (auto m = CheckPrunedLeafValues(ShapeOf(v), &d); !m.empty()) return InvalidArgument(m);
    if (!HasType<T>(v)) return InvalidArgument("leaf_values must have the dtype of x");
    auto exec = make_exec();
    return FromCheck(PrunedRoutingForwardPipeline<T>(exec, d, Data<T>(in[0]), sp, Data<bool>(in[experts ? 6 : 4]),
                                                     Data<T>(v), T(threshold), Data<T>(out[0]),
                                                     Data<int32_t>(out[1]), Data<int32_t>(out[2]), Data<T>(out[3])));
  });
}

template <class MakeExec>
ffi::Error Backward(const MakeExec& make_exec, ffi::RemainingArgs args, ffi::RemainingRets rets, float threshold,
                    bool experts, bool annealed, bool x_grad) {
  if (args.size() < 2) return InvalidArgument("pruned routing grad: wrong arity");
  const ffi::AnyBuffer gy = *args.get<ffi::AnyBuffer>(0);
  const std::vector<ffi::AnyBuffer> in = Buffers(args, 1);
  auto out = Results(rets);
  const size_t splits = experts ? 5 : 3;
  if (out.size() != splits + 2) return InvalidArgument("pruned routing grad: wrong number of results");
  return DispatchFloat(in[0], "x", [&](auto tag) -> ffi::Error {
    using T = decltype(tag);
    PrunedRoutingDims d;
    pruned::Splits<T> sp;
    if (auto m = ReadSplits<T>(in, experts, annealed, &d, &sp); !m.empty()) return InvalidArgument(m);
    if (in.size() != splits + 3) return InvalidArgument("pruned routing grad: pass leaf_values last");
    const ffi::AnyBuffer& v = in.back();
    if (auto m = CheckPrunedLeafValues(ShapeOf(v), &d); !m.empty()) return InvalidArgument(m);
    if (auto m = CheckPerPair(ShapeOf(gy), "grad_output", &d); !m.empty()) return InvalidArgument(m);
    if (!HasType<T>(gy) || !HasType<T>(v)) return InvalidArgument("grad_output and leaf_values need x's dtype");
    PrunedSplitGrads<T> g;
    g.weights = Data<T>(out[1]);
    g.bias = Data<T>(out[2]);
    if (experts) {
      g.expert_weights = Data<T>(out[3]);
      g.rate0 = Data<T>(out[4]);
      g.gamma = Data<T>(out[5]);
    } else {
      g.gamma = Data<T>(out[3]);
    }
    auto exec = make_exec();
    return FromCheck(PrunedRoutingBackwardPipeline<T>(exec, d, Data<T>(gy), Data<T>(in[0]), sp,
                                                      Data<bool>(in[splits + 1]), Data<T>(v), T(threshold),
                                                      Data<T>(out[0]), x_grad, g, Data<T>(out[splits + 1])));
  });
}

template <class MakeExec>
ffi::Error Statistics(const MakeExec& make_exec, ffi::RemainingArgs args, ffi::Result<ffi::AnyBuffer> statistics,
                      float threshold, bool experts, bool annealed) {
  if (args.size() < 2) return InvalidArgument("pruned leaf statistics: wrong arity");
  const ffi::AnyBuffer weights = *args.get<ffi::AnyBuffer>(0);
  const std::vector<ffi::AnyBuffer> in = Buffers(args, 1);
  return DispatchFloat(in[0], "x", [&](auto tag) -> ffi::Error {
    using T = decltype(tag);
    PrunedRoutingDims d;
    pruned::Splits<T> sp;
    if (auto m = ReadSplits<T>(in, experts, annealed, &d, &sp); !m.empty()) return InvalidArgument(m);
    d.units = -1;
    if (auto m = CheckPerPair(ShapeOf(weights), "weights", &d); !m.empty()) return InvalidArgument(m);
    if (!HasType<T>(weights)) return InvalidArgument("weights must have the dtype of x");
    auto exec = make_exec();
    return FromCheck(PrunedLeafStatisticsPipeline<T>(exec, d, Data<T>(weights), Data<T>(in[0]), sp,
                                                     Data<bool>(in[experts ? 6 : 4]), T(threshold),
                                                     Data<T>(statistics)));
  });
}

template <class MakeExec>
ffi::Error EmStatistics(const MakeExec& make_exec, ffi::RemainingArgs args, ffi::Result<ffi::AnyBuffer> counts,
                        float threshold) {
  const std::vector<ffi::AnyBuffer> in = Buffers(args);
  if (in.size() != 8) return InvalidArgument("pruned EM statistics: wrong arity");
  return DispatchFloat(in[0], "x", [&](auto tag) -> ffi::Error {
    using T = decltype(tag);
    using namespace checks_internal;
    PrunedRoutingDims d;
    pruned::Splits<T> sp;
    if (auto m = ReadSplits<T>(in, false, true, &d, &sp); !m.empty()) return InvalidArgument(m);
    const ffi::AnyBuffer &v = in[5], &labels = in[6], &weights = in[7];
    if (!HasType<T>(v) || !HasType<T>(weights)) return InvalidArgument("leaf_values and sample_weight need x's dtype");
    if (auto m = CheckType(labels, ffi::DataType::S32, "labels", "int32"); !m.empty()) return InvalidArgument(m);
    // CheckEmInputs' shape checks (its value checks run on the device).
    if (auto m = CheckPrunedLeafValues(ShapeOf(v), &d); !m.empty()) return InvalidArgument(m);
    if (d.units < 1) return InvalidArgument("leaf_values must have at least one class (leaf_values.shape[2] >= 1)");
    if (auto m = Exact(ShapeOf(labels), {d.batch}, "labels"); !m.empty()) return InvalidArgument(m);
    if (auto m = Exact(ShapeOf(weights), {d.batch}, "sample_weight"); !m.empty()) return InvalidArgument(m);
    auto exec = make_exec();
    return FromCheck(PrunedEmStatisticsPipeline<T>(exec, d, Data<T>(in[0]), sp, Data<bool>(in[4]), Data<T>(v),
                                                   Data<int32_t>(labels), Data<T>(weights), T(threshold),
                                                   Data<T>(counts)));
  });
}

// The bindings after each platform's context (thread pool or stream): the
// CPU handlers' (xla/pruned_routing_ffi.cc).
template <typename Binding>
auto ForwardSignature(Binding binding) {
  return std::move(binding)
      .RemainingArgs()   // x, split inputs, is_split, leaf_values
      .RemainingRets()   // output, kept_leaves, split_evaluations, dropped_mass
      .template Attr<float>("threshold")
      .template Attr<bool>("experts")
      .template Attr<bool>("annealed");
}

template <typename Binding>
auto BackwardSignature(Binding binding) {
  return std::move(binding)
      .RemainingArgs()   // grad_output, then the forward arguments
      .RemainingRets()   // grad_x, split input grads, grad_leaf_values
      .template Attr<float>("threshold")
      .template Attr<bool>("experts")
      .template Attr<bool>("annealed")
      .template Attr<bool>("x_grad");
}

template <typename Binding>
auto StatisticsSignature(Binding binding) {
  return std::move(binding)
      .RemainingArgs()                  // weights, x, split inputs, is_split
      .template Ret<ffi::AnyBuffer>()  // statistics [trees, positions, units]
      .template Attr<float>("threshold")
      .template Attr<bool>("experts")
      .template Attr<bool>("annealed");
}

template <typename Binding>
auto EmSignature(Binding binding) {
  return std::move(binding)
      .RemainingArgs()                  // x, split inputs, is_split, leaf_values, labels, sample_weight
      .template Ret<ffi::AnyBuffer>()  // counts [trees, positions, classes]
      .template Attr<float>("threshold");
}

}  // namespace pruned_handlers
}  // namespace keras_trees

#endif  // KERAS_TREES_XLA_PRUNED_ROUTING_HANDLERS_H_
