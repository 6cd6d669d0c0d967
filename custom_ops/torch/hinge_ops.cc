// PyTorch ops (torch binding) of random hinge trees and ferns: check the inputs
// (core/checks.h), then run the core (core/hinge.h) on PyTorch's intra-op
// thread pool. The forward op hands leaf, margin and vertex to the backward op,
// as in TensorFlow and JAX; the autograd formula is registered from Python
// (keras_trees/ops/_torch_hinge.py).
#include <vector>

#include "core/hinge.h"
#include "torch_utils.h"

namespace keras_trees {
namespace {

std::tuple<Tensor, Tensor, Tensor, Tensor> Forward(Tensor x, Tensor t, Tensor f, Tensor w, bool fern) {
  HingeDims d;
  Check(CheckHingeShapes(fern, ShapeOf(x), ShapeOf(t), ShapeOf(f), ShapeOf(w), &d));
  Check(CheckType(f, ScalarType::Int, "feature_indices", "int32"));
  x = Dense(x), t = Dense(t), f = Dense(f), w = Dense(w);
  return DispatchFloat(x, "x", [&](auto tag) {
    using T = decltype(tag);
    Check(CheckSameType<T>({{"thresholds", &t}, {"leaf_weights", &w}}));
    const int32_t* fd = Data<int32_t>(f);
    Check(CheckHingeValues<T>(d, Data<T>(x), Data<T>(t), fd, Data<T>(w)));
    const Shape pairs{d.batch, d.trees};
    Tensor out = Empty<T>({d.batch, d.trees, d.units});
    Tensor leaf = Empty<int32_t>(pairs), margin = Empty<T>(pairs), vertex = Empty<int32_t>(pairs);
    HingeForestForward<T>(d, fern, Data<T>(x), Data<T>(t), fd, Data<T>(w), Data<T>(out), Data<int32_t>(leaf),
                          Data<T>(margin), Data<int32_t>(vertex), TorchParallelFor());
    return std::make_tuple(out, leaf, margin, vertex);
  });
}

std::tuple<Tensor, Tensor, Tensor> Backward(Tensor gy, Tensor gm, Tensor x, Tensor f, Tensor w, Tensor leaf,
                                            Tensor margin, Tensor vertex, bool fern, bool need_grad_x) {
  HingeDims d;
  Check(CheckHingeShapes(fern, ShapeOf(x), ShapeOf(f), ShapeOf(f), ShapeOf(w), &d));
  const Shape pairs{d.batch, d.trees};
  if (ShapeOf(gy) != Shape{d.batch, d.trees, d.units} || ShapeOf(gm) != pairs || ShapeOf(leaf) != pairs ||
      ShapeOf(margin) != pairs || ShapeOf(vertex) != pairs) {
    Fail("grad_output, grad_margin, leaf, margin and vertex must come from the same forward call");
  }
  Check(CheckType(f, ScalarType::Int, "feature_indices", "int32"));
  Check(CheckType(leaf, ScalarType::Int, "leaf", "int32"));
  Check(CheckType(vertex, ScalarType::Int, "vertex", "int32"));
  gy = Dense(gy), gm = Dense(gm), x = Dense(x), f = Dense(f), w = Dense(w);
  leaf = Dense(leaf), margin = Dense(margin), vertex = Dense(vertex);
  return DispatchFloat(x, "x", [&](auto tag) {
    using T = decltype(tag);
    Check(CheckSameType<T>({{"grad_output", &gy}, {"grad_margin", &gm}, {"leaf_weights", &w}, {"margin", &margin}}));
    // grad_x comes back empty (batch, 0) when x needs no gradient, and is skipped.
    Tensor gx = Empty<T>({d.batch, need_grad_x ? d.features : 0}), gt = Empty<T>({d.trees, d.vertices});
    Tensor gw = Empty<T>({d.trees, d.leaves, d.units});
    std::vector<T> workspace(HingeForestGradWorkspaceSize(d));
    const bool ok = HingeForestBackward<T>(d, Data<T>(gy), Data<T>(gm), Data<int32_t>(f), Data<T>(w),
                                           Data<int32_t>(leaf), Data<T>(margin), Data<int32_t>(vertex),
                                           workspace.data(), need_grad_x ? Data<T>(gx) : nullptr, Data<T>(gt), Data<T>(gw),
                                           TorchParallelFor());
    if (!ok) {
      Fail("leaf, vertex or feature_indices out of range: pass the leaf, margin and vertex outputs of the same "
           "forward call");
    }
    return std::make_tuple(gx, gt, gw);
  });
}

}  // namespace
}  // namespace keras_trees

STABLE_TORCH_LIBRARY_FRAGMENT(keras_trees, m) {
  m.def("hinge_forest(Tensor x, Tensor thresholds, Tensor feature_indices, Tensor leaf_weights, bool fern) "
        "-> (Tensor output, Tensor leaf, Tensor margin, Tensor vertex)");
  m.def("hinge_forest_grad(Tensor grad_output, Tensor grad_margin, Tensor x, Tensor feature_indices, "
        "Tensor leaf_weights, Tensor leaf, Tensor margin, Tensor vertex, bool fern, bool need_grad_x) "
        "-> (Tensor grad_x, Tensor grad_thresholds, Tensor grad_leaf_weights)");
}

STABLE_TORCH_LIBRARY_IMPL(keras_trees, CPU, m) {
  KT_TORCH_IMPL(m, "hinge_forest", keras_trees::Forward);
  KT_TORCH_IMPL(m, "hinge_forest_grad", keras_trees::Backward);
}
