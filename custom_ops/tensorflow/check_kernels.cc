// CPU kernel of KerasTrees>Check (check_ops.cc): the finiteness scans use the
// core's AllFinite (one vectorized pass per tensor).
#include <string>
#include <vector>

#include "core/common.h"
#include "kernel_utils.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace keras_trees {

using ::tensorflow::OpInputList;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;

class CheckOp : public OpKernel {
 public:
  explicit CheckOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("messages", &messages_));
  }

  void Compute(OpKernelContext* ctx) override {
    OpInputList finite, oks, topologies;
    OP_REQUIRES_OK(ctx, ctx->input_list("finite", &finite));
    OP_REQUIRES_OK(ctx, ctx->input_list("oks", &oks));
    OP_REQUIRES_OK(ctx, ctx->input_list("topologies", &topologies));
    const int64_t checks = finite.size() + oks.size() + topologies.size();
    OP_REQUIRES(ctx, static_cast<int64_t>(messages_.size()) == checks,
                ::tensorflow::errors::InvalidArgument("KerasTrees>Check: expected one message per check, got ",
                                                      messages_.size(), " for ", checks));
    for (int i = 0; i < finite.size(); ++i) {
      const Tensor& t = finite[i];
      const bool ok = t.dtype() == ::tensorflow::DT_DOUBLE ? AllFinite(t.flat<double>().data(), t.NumElements())
                                                           : AllFinite(t.flat<float>().data(), t.NumElements());
      OP_REQUIRES(ctx, ok, ::tensorflow::errors::InvalidArgument(messages_[i]));
    }
    for (int i = 0; i < oks.size(); ++i) {
      const auto flat = oks[i].flat<bool>();
      bool ok = true;
      for (int64_t j = 0; j < flat.size(); ++j) ok = ok && flat(j);
      OP_REQUIRES(ctx, ok, ::tensorflow::errors::InvalidArgument(messages_[finite.size() + i]));
    }
    for (int i = 0; i < topologies.size(); ++i) {
      OP_REQUIRES(ctx, ValidTopology(topologies[i]),
                  ::tensorflow::errors::InvalidArgument(messages_[finite.size() + oks.size() + i]));
    }
    ctx->set_output(0, ctx->input(0));
  }

  // A scan of a few parameters and one batch: run inline on the calling
  // thread rather than scheduled on the inter-op pool (TensorFlow's default for
  // custom kernels), whose hand-off would cost more than the check.
  bool IsExpensive() override { return false; }

 private:
  // The rules of keras_trees/topology.py validate() on a [trees, positions]
  // heap of ABSENT (0) / LEAF (1) / SPLIT (2).
  static bool ValidTopology(const Tensor& state) {
    if (state.dims() != 2) return false;
    const int64_t trees = state.dim_size(0), positions = state.dim_size(1);
    if ((positions & (positions + 1)) != 0 || positions == 0) return false;  // 2**(D+1) - 1
    const int64_t internal = positions / 2;                                  // 2**D - 1
    const auto s = state.matrix<int32_t>();
    for (int64_t t = 0; t < trees; ++t) {
      if (s(t, 0) == 0) return false;
      for (int64_t i = 0; i < positions; ++i) {
        const int32_t v = s(t, i);
        if (v < 0 || v > 2 || (i >= internal && v == 2)) return false;
        if (i > 0 && (v != 0) != (s(t, (i - 1) / 2) == 2)) return false;
      }
    }
    return true;
  }

  std::vector<std::string> messages_;
};

REGISTER_KERNEL_BUILDER(Name("KerasTrees>Check").Device(::tensorflow::DEVICE_CPU), Guarded<CheckOp>);

}  // namespace keras_trees
