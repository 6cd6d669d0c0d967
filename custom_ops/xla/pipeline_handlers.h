// XLA FFI handlers (JAX binding) that run the kernel pipelines
// (core/*_pipeline.h), written once for every executor: the CUDA handlers
// (custom_ops/cuda/xla_handlers.cu, platform "CUDA", device buffers) and the
// CPU emulation of them (xla/portable_ffi.cc, targets named
// "KerasTrees...Portable", host buffers). Shapes and dtypes are checked here
// with the CPU handlers' words; values by the pipelines' status words.
// `make_exec()` returns the executor of one call.
#ifndef KERAS_TREES_XLA_PIPELINE_HANDLERS_H_
#define KERAS_TREES_XLA_PIPELINE_HANDLERS_H_

#include "core/hard_routing_pipeline.h"
#include "core/hinge_pipeline.h"
#include "core/tree_ensemble_pipeline.h"
#include "ffi_utils.h"

namespace keras_trees {
namespace pipeline_handlers {

template <class MakeExec>
ffi::Error HingeForward(const MakeExec& make_exec, ffi::AnyBuffer x, ffi::AnyBuffer t, ffi::AnyBuffer f,
                        ffi::AnyBuffer w, ffi::Result<ffi::AnyBuffer> out, ffi::Result<ffi::AnyBuffer> leaf,
                        ffi::Result<ffi::AnyBuffer> margin, ffi::Result<ffi::AnyBuffer> vertex, bool fern) {
  HingeDims d;
  if (auto m = CheckHingeShapes(fern, ShapeOf(x), ShapeOf(t), ShapeOf(f), ShapeOf(w), &d); !m.empty()) {
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
    auto exec = make_exec();
    return FromCheck(HingeForestForwardPipeline<T>(exec, d, fern, Data<T>(x), Data<T>(t), Data<int32_t>(f),
                                                   Data<T>(w), Data<T>(out), Data<int32_t>(leaf),
                                                   Data<T>(margin), Data<int32_t>(vertex)));
  });
}

template <class MakeExec>
ffi::Error HingeBackward(const MakeExec& make_exec, ffi::AnyBuffer gy, ffi::AnyBuffer gm, ffi::AnyBuffer x,
                         ffi::AnyBuffer f, ffi::AnyBuffer w, ffi::AnyBuffer leaf, ffi::AnyBuffer margin,
                         ffi::AnyBuffer vertex, ffi::Result<ffi::AnyBuffer> gx, ffi::Result<ffi::AnyBuffer> gt,
                         ffi::Result<ffi::AnyBuffer> gw, bool fern) {
  HingeDims d;
  if (auto m = CheckHingeShapes(fern, ShapeOf(x), ShapeOf(f), ShapeOf(f), ShapeOf(w), &d); !m.empty()) {
    return InvalidArgument(m);
  }
  const Shape pairs{d.batch, d.trees};
  if (ShapeOf(gy) != Shape{d.batch, d.trees, d.units} || ShapeOf(gm) != pairs || ShapeOf(leaf) != pairs ||
      ShapeOf(margin) != pairs || ShapeOf(vertex) != pairs) {
    return InvalidArgument("grad_output, grad_margin, leaf, margin and vertex must come from the "
                           "same forward call");
  }
  return DispatchFloat(x, "x", [&](auto tag) -> ffi::Error {
    using T = decltype(tag);
    auto exec = make_exec();
    return FromCheck(HingeForestBackwardPipeline<T>(
        exec, d, Data<T>(gy), Data<T>(gm), Data<int32_t>(f), Data<T>(w), Data<int32_t>(leaf), Data<T>(margin),
        Data<int32_t>(vertex), Data<T>(gx), Data<T>(gt), Data<T>(gw)));
  });
}

// Oblique splits when r and c are null.
template <class MakeExec>
ffi::Error Route(const MakeExec& make_exec, ffi::AnyBuffer x, ffi::AnyBuffer w, ffi::AnyBuffer b,
                 const ffi::AnyBuffer* r, const ffi::AnyBuffer* c, ffi::AnyBuffer is_split,
                 ffi::Result<ffi::AnyBuffer> node, ffi::Result<ffi::AnyBuffer> path_values, bool with_path_values) {
  const bool experts = r != nullptr;
  RoutingDims d;
  if (auto m = CheckRoutingShapes(experts, ShapeOf(x), ShapeOf(w), ShapeOf(b), ShapeOf(is_split),
                                  experts ? ShapeOf(*r) : Shape{}, experts ? ShapeOf(*c) : Shape{}, &d);
      !m.empty()) {
    return InvalidArgument(m);
  }
  if (auto m = CheckType(is_split, ffi::DataType::PRED, "is_split", "bool"); !m.empty()) {
    return InvalidArgument(m);
  }
  return DispatchFloat(x, "x", [&](auto tag) -> ffi::Error {
    using T = decltype(tag);
    auto m = experts ? CheckSameType<T>({{"split_weights", &w}, {"split_bias", &b}, {"expert_weights", r},
                                         {"threshold", c}})
                     : CheckSameType<T>({{"split_weights", &w}, {"split_bias", &b}});
    if (!m.empty()) return InvalidArgument(m);
    auto exec = make_exec();
    return FromCheck(HardRoutePipeline<T>(exec, d, Data<T>(x), Data<T>(w), Data<T>(b),
                                          experts ? Data<T>(*r) : nullptr, experts ? Data<T>(*c) : nullptr,
                                          Data<bool>(is_split), Data<int32_t>(node),
                                          with_path_values ? Data<T>(path_values) : nullptr));
  });
}

// The Tree Ensemble Layer: gamma stays in device memory (read by the bodies).
template <class MakeExec>
ffi::Error SoftTreeForward(const MakeExec& make_exec, ffi::AnyBuffer x, ffi::AnyBuffer w, ffi::AnyBuffer b,
                           ffi::AnyBuffer o, ffi::AnyBuffer g, ffi::Result<ffi::AnyBuffer> out) {
  SoftTreeDims d;
  if (auto m = CheckSoftTreeEnsembleShapes(ShapeOf(x), ShapeOf(w), ShapeOf(b), ShapeOf(o), ShapeOf(g), &d);
      !m.empty()) {
    return InvalidArgument(m);
  }
  return DispatchFloat(x, "x", [&](auto tag) -> ffi::Error {
    using T = decltype(tag);
    if (auto m = CheckSameType<T>({{"node_weights", &w}, {"node_bias", &b}, {"leaf_weights", &o},
                                   {"gamma", &g}, {"output", &(*out)}});
        !m.empty()) {
      return InvalidArgument(m);
    }
    auto exec = make_exec();
    return FromCheck(SoftTreeEnsembleForwardPipeline<T>(exec, d, Data<T>(x), Data<T>(w), Data<T>(b), Data<T>(o),
                                                        Data<T>(g), Data<T>(out)));
  });
}

template <class MakeExec>
ffi::Error SoftTreeBackward(const MakeExec& make_exec, ffi::AnyBuffer gy, ffi::AnyBuffer x, ffi::AnyBuffer w,
                            ffi::AnyBuffer b, ffi::AnyBuffer o, ffi::AnyBuffer g, ffi::Result<ffi::AnyBuffer> gx,
                            ffi::Result<ffi::AnyBuffer> gw, ffi::Result<ffi::AnyBuffer> gb,
                            ffi::Result<ffi::AnyBuffer> go) {
  SoftTreeDims d;
  if (auto m = CheckSoftTreeEnsembleShapes(ShapeOf(x), ShapeOf(w), ShapeOf(b), ShapeOf(o), ShapeOf(g), &d);
      !m.empty()) {
    return InvalidArgument(m);
  }
  if (ShapeOf(gy) != Shape{d.batch, d.units}) {
    return InvalidArgument("grad_output must have the shape of the forward output");
  }
  return DispatchFloat(x, "x", [&](auto tag) -> ffi::Error {
    using T = decltype(tag);
    if (auto m = CheckSameType<T>({{"grad_output", &gy}, {"node_weights", &w}, {"node_bias", &b},
                                   {"leaf_weights", &o}, {"gamma", &g}});
        !m.empty()) {
      return InvalidArgument(m);
    }
    auto exec = make_exec();
    return FromCheck(SoftTreeEnsembleBackwardPipeline<T>(exec, d, Data<T>(gy), Data<T>(x), Data<T>(w), Data<T>(b),
                                                         Data<T>(o), Data<T>(g), Data<T>(gx), Data<T>(gw),
                                                         Data<T>(gb), Data<T>(go)));
  });
}

}  // namespace pipeline_handlers
}  // namespace keras_trees

#endif  // KERAS_TREES_XLA_PIPELINE_HANDLERS_H_
