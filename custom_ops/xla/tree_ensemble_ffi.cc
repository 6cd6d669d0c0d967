// XLA FFI handlers (JAX binding) of the Tree Ensemble Layer: check the inputs
// (core/checks.h), then run the core (core/tree_ensemble.h) on XLA's intra-op
// thread pool.
//
// XLA needs static output shapes, and the fractional-tree trace has a
// data-dependent length, so the forward handler records no trace; the backward
// handler re-runs the conditional forward pass with a trace in scratch memory
// and walks it (Algorithm 2). The residuals JAX keeps are the inputs only.
#include <vector>

#include "core/tree_ensemble.h"
#include "ffi_utils.h"

KT_EXPORT_FFI_HANDLER(KerasTreesSoftTreeEnsemble);
KT_EXPORT_FFI_HANDLER(KerasTreesSoftTreeEnsembleGrad);

namespace keras_trees {
namespace {

std::string CheckInputs(const ffi::AnyBuffer& x, const ffi::AnyBuffer& w, const ffi::AnyBuffer& b,
                        const ffi::AnyBuffer& o, const ffi::AnyBuffer& g, SoftTreeDims* d) {
  return CheckSoftTreeEnsembleShapes(ShapeOf(x), ShapeOf(w), ShapeOf(b), ShapeOf(o), ShapeOf(g), d);
}

ffi::Error Forward(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer w, ffi::AnyBuffer b,
                   ffi::AnyBuffer o, ffi::AnyBuffer g, ffi::Result<ffi::AnyBuffer> out) {
  SoftTreeDims d;
  if (auto m = CheckInputs(x, w, b, o, g, &d); !m.empty()) return InvalidArgument(m);
  return DispatchFloat(x, "x", [&](auto tag) -> ffi::Error {
    using T = decltype(tag);
    if (auto m = CheckSameType<T>({{"node_weights", &w}, {"node_bias", &b}, {"leaf_weights", &o},
                                   {"gamma", &g}, {"output", &(*out)}});
        !m.empty()) {
      return InvalidArgument(m);
    }
    const T gamma = *Data<T>(g);
    if (auto m = CheckSoftTreeEnsembleValues<T>(d, Data<T>(x), Data<T>(w), Data<T>(b), Data<T>(o), gamma);
        !m.empty()) {
      return InvalidArgument(m);
    }
    SoftTreeEnsembleForward<T>(d, Data<T>(x), Data<T>(w), Data<T>(b), Data<T>(o), gamma,
                               Data<T>(out), nullptr, XlaParallelFor(pool));
    return ffi::Error::Success();
  });
}

ffi::Error Backward(ffi::ThreadPool pool, ffi::AnyBuffer gy, ffi::AnyBuffer x, ffi::AnyBuffer w,
                    ffi::AnyBuffer b, ffi::AnyBuffer o, ffi::AnyBuffer g,
                    ffi::Result<ffi::AnyBuffer> gx, ffi::Result<ffi::AnyBuffer> gw,
                    ffi::Result<ffi::AnyBuffer> gb, ffi::Result<ffi::AnyBuffer> go) {
  SoftTreeDims d;
  if (auto m = CheckInputs(x, w, b, o, g, &d); !m.empty()) return InvalidArgument(m);
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
    const T gamma = *Data<T>(g);
    if (auto m = CheckSoftTreeEnsembleValues<T>(d, Data<T>(x), Data<T>(w), Data<T>(b), Data<T>(o), gamma);
        !m.empty()) {
      return InvalidArgument(m);
    }
    const ParallelFor parallel_for = XlaParallelFor(pool);
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
    SoftTreeEnsembleForward<T>(d, Data<T>(x), Data<T>(w), Data<T>(b), Data<T>(o), gamma,
                               output.data(), &trace, parallel_for);
    std::vector<T> workspace(SoftTreeEnsembleGradWorkspaceSize(index.size()));
    const bool ok = SoftTreeEnsembleBackward<T>(
        d, Data<T>(gy), Data<T>(x), Data<T>(w), Data<T>(o), offsets.data(), index.data(),
        value.data(), workspace.data(), Data<T>(gx), Data<T>(gw), Data<T>(gb), Data<T>(go),
        parallel_for);
    if (!ok) return ffi::Error::Internal("keras-trees: the recorded fractional trees are invalid");
    return ffi::Error::Success();
  });
}

}  // namespace
}  // namespace keras_trees

namespace ffi = ::xla::ffi;

XLA_FFI_DEFINE_HANDLER_SYMBOL(KerasTreesSoftTreeEnsemble, keras_trees::Guard<keras_trees::Forward>::Call,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::AnyBuffer>()  // x
                                  .Arg<ffi::AnyBuffer>()  // node_weights
                                  .Arg<ffi::AnyBuffer>()  // node_bias
                                  .Arg<ffi::AnyBuffer>()  // leaf_weights
                                  .Arg<ffi::AnyBuffer>()  // gamma
                                  .Ret<ffi::AnyBuffer>()  // output
);

XLA_FFI_DEFINE_HANDLER_SYMBOL(KerasTreesSoftTreeEnsembleGrad, keras_trees::Guard<keras_trees::Backward>::Call,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::AnyBuffer>()  // grad_output
                                  .Arg<ffi::AnyBuffer>()  // x
                                  .Arg<ffi::AnyBuffer>()  // node_weights
                                  .Arg<ffi::AnyBuffer>()  // node_bias
                                  .Arg<ffi::AnyBuffer>()  // leaf_weights
                                  .Arg<ffi::AnyBuffer>()  // gamma
                                  .Ret<ffi::AnyBuffer>()  // grad_x
                                  .Ret<ffi::AnyBuffer>()  // grad_node_weights
                                  .Ret<ffi::AnyBuffer>()  // grad_node_bias
                                  .Ret<ffi::AnyBuffer>()  // grad_leaf_weights
);

