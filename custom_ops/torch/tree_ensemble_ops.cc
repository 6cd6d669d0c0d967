// PyTorch ops (torch binding) of the Tree Ensemble Layer: check the inputs
// (core/checks.h), then run the core (core/tree_ensemble.h) on PyTorch's
// intra-op thread pool.
//
// As in the JAX binding, the output shapes are static (so torch.compile traces
// the ops with plain fake kernels): the forward op records no fractional-tree
// trace, whose length depends on the data; the backward op re-runs the
// conditional forward pass with the trace in scratch memory, then walks it
// (Algorithm 2). Autograd keeps the inputs only.
#include <vector>

#include "core/tree_ensemble.h"
#include "torch_utils.h"

namespace keras_trees {
namespace {

void CheckInputs(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& o, const Tensor& g,
                 SoftTreeDims* d) {
  Check(CheckSoftTreeEnsembleShapes(ShapeOf(x), ShapeOf(w), ShapeOf(b), ShapeOf(o), ShapeOf(g), d));
}

Tensor Forward(Tensor x, Tensor w, Tensor b, Tensor o, Tensor g) {
  SoftTreeDims d;
  CheckInputs(x, w, b, o, g, &d);
  x = Dense(x), w = Dense(w), b = Dense(b), o = Dense(o);
  return DispatchFloat(x, "x", [&](auto tag) {
    using T = decltype(tag);
    Check(CheckSameType<T>({{"node_weights", &w}, {"node_bias", &b}, {"leaf_weights", &o}, {"gamma", &g}}));
    const T gamma = *Data<T>(g);
    Check(CheckSoftTreeEnsembleValues<T>(d, Data<T>(x), Data<T>(w), Data<T>(b), Data<T>(o), gamma));
    Tensor out = Empty<T>({d.batch, d.units});
    SoftTreeEnsembleForward<T>(d, Data<T>(x), Data<T>(w), Data<T>(b), Data<T>(o), gamma, Data<T>(out), nullptr,
                               TorchParallelFor());
    return out;
  });
}

std::tuple<Tensor, Tensor, Tensor, Tensor> Backward(Tensor gy, Tensor x, Tensor w, Tensor b, Tensor o, Tensor g,
                                                    bool need_grad_x) {
  SoftTreeDims d;
  CheckInputs(x, w, b, o, g, &d);
  if (ShapeOf(gy) != Shape{d.batch, d.units}) Fail("grad_output must have the shape of the forward output");
  gy = Dense(gy), x = Dense(x), w = Dense(w), b = Dense(b), o = Dense(o);
  return DispatchFloat(x, "x", [&](auto tag) {
    using T = decltype(tag);
    Check(CheckSameType<T>(
        {{"grad_output", &gy}, {"node_weights", &w}, {"node_bias", &b}, {"leaf_weights", &o}, {"gamma", &g}}));
    const T gamma = *Data<T>(g);
    Check(CheckSoftTreeEnsembleValues<T>(d, Data<T>(x), Data<T>(w), Data<T>(b), Data<T>(o), gamma));
    const ParallelFor parallel_for = TorchParallelFor();
    std::vector<int64_t> offsets(d.batch * d.trees + 1);
    std::vector<int32_t> index;
    std::vector<T> value;
    std::vector<T> output(d.batch * d.units);
    TraceOutput<T> trace;
    trace.offsets = offsets.data();
    trace.allocate = [&](int64_t records, int32_t** index_out, T** value_out) {
      index.resize(records);
      value.resize(2 * records);
      *index_out = index.data();
      *value_out = value.data();
      return true;
    };
    SoftTreeEnsembleForward<T>(d, Data<T>(x), Data<T>(w), Data<T>(b), Data<T>(o), gamma, output.data(), &trace,
                               parallel_for);
    // grad_x comes back empty (batch, 0) when x needs no gradient, and is skipped.
    Tensor gx = Empty<T>({d.batch, need_grad_x ? d.input_dim : 0}), gw = Empty<T>({d.trees, d.num_internal, d.input_dim});
    Tensor gb = Empty<T>({d.trees, d.num_internal}), go = Empty<T>({d.trees, d.num_internal + 1, d.units});
    std::vector<T> workspace(SoftTreeEnsembleGradWorkspaceSize(static_cast<int64_t>(index.size())));
    const bool ok = SoftTreeEnsembleBackward<T>(d, Data<T>(gy), Data<T>(x), Data<T>(w), Data<T>(o), offsets.data(),
                                                index.data(), value.data(), workspace.data(),
                                                need_grad_x ? Data<T>(gx) : nullptr,
                                                Data<T>(gw), Data<T>(gb), Data<T>(go), parallel_for);
    if (!ok) throw std::runtime_error("keras-trees: the recorded fractional trees are invalid");
    return std::make_tuple(gx, gw, gb, go);
  });
}

}  // namespace
}  // namespace keras_trees

STABLE_TORCH_LIBRARY_FRAGMENT(keras_trees, m) {
  m.def("soft_tree_ensemble(Tensor x, Tensor node_weights, Tensor node_bias, Tensor leaf_weights, Tensor gamma) "
        "-> Tensor");
  m.def("soft_tree_ensemble_grad(Tensor grad_output, Tensor x, Tensor node_weights, Tensor node_bias, "
        "Tensor leaf_weights, Tensor gamma, bool need_grad_x) "
        "-> (Tensor grad_x, Tensor grad_node_weights, Tensor grad_node_bias, Tensor grad_leaf_weights)");
}

STABLE_TORCH_LIBRARY_IMPL(keras_trees, CPU, m) {
  KT_TORCH_IMPL(m, "soft_tree_ensemble", keras_trees::Forward);
  KT_TORCH_IMPL(m, "soft_tree_ensemble_grad", keras_trees::Backward);
}
