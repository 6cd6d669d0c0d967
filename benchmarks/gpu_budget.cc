// The launch plans of the GPU pipelines at the benchmark shapes, recorded by
// core/launch_record.h (no body runs, no GPU needed): one JSON object per
// line, for benchmarks/gpu_budget.py. Built with any C++17 compiler:
//   g++ -std=c++17 -I custom_ops benchmarks/gpu_budget.cc
// The calls pass the same arguments as the JAX CUDA handlers
// (custom_ops/xla/pipeline_handlers.h, pruned_routing_handlers.h,
// loss_augmented_handlers.h): float32, default chunk budgets.
#include <cstdint>
#include <cstdio>
#include <string>

#include "core/hard_routing_pipeline.h"
#include "core/hinge_pipeline.h"
#include "core/launch_record.h"
#include "core/loss_augmented_pipeline.h"
#include "core/pruned_routing_pipeline.h"
#include "core/tree_ensemble_pipeline.h"

namespace {

using keras_trees::Plan;
using keras_trees::PlanRecorder;

// A stand-in for every input and output buffer: the recorder never reads or
// writes one.
template <typename T>
T* Buffer() {
  return reinterpret_cast<T*>(uintptr_t{1} << 12);
}

void Print(const char* call, const std::string& shape, const PlanRecorder& exec, const std::string& message) {
  const Plan& p = exec.plan;
  std::string kernels;
  for (const keras_trees::KernelLaunch& k : p.kernels) {
    kernels += (kernels.empty() ? "" : ", ") + std::string("{\"body\": \"") + k.body + "\", \"launcher\": \"" +
               k.launcher + "\", \"blocks\": " + std::to_string(k.blocks) +
               ", \"threads\": " + std::to_string(k.threads) + "}";
  }
  std::printf(
      "{\"call\": \"%s\", \"shape\": \"%s\", \"launches\": %lld, \"host_copies\": %lld, \"syncs\": %lld, "
      "\"sorts\": %lld, \"scratch_bytes\": %lld, \"zero_fill_bytes\": %lld, \"kernels\": [%s], "
      "\"error\": \"%s\"}\n",
      call, shape.c_str(), static_cast<long long>(p.launches), static_cast<long long>(p.host_copies),
      static_cast<long long>(p.syncs), static_cast<long long>(p.sorts), static_cast<long long>(p.scratch_bytes),
      static_cast<long long>(p.zero_fill_bytes), kernels.c_str(), message.c_str());
}

std::string Shape(const char* format, long long a, long long b, long long c, long long d) {
  char text[128];
  std::snprintf(text, sizeof(text), format, a, b, c, d);
  return text;
}

// The dimensions every routing family shares (units and experts stay 0 / 1).
template <class Dims>
Dims TreeDims(int64_t batch, int64_t trees, int depth, int64_t features) {
  Dims d;
  d.batch = batch;
  d.input_dim = features;
  d.trees = trees;
  d.depth = depth;
  d.num_internal = (int64_t{1} << depth) - 1;
  return d;
}

void Hinge(int64_t batch, int64_t trees, int depth, int64_t features, int64_t units) {
  const keras_trees::HingeDims d =
      keras_trees::MakeHingeDims(false, batch, features, trees, (int64_t{1} << depth) - 1, units);
  const std::string shape = Shape("batch %lld, %lld trees of depth %lld, %lld features", batch, trees, depth, features);
  PlanRecorder fwd;
  Print("hinge_forward", shape, fwd,
        keras_trees::HingeForestForwardPipeline<float>(fwd, d, false, Buffer<float>(), Buffer<float>(),
                                                      Buffer<int32_t>(), Buffer<float>(), Buffer<float>(),
                                                      Buffer<int32_t>(), Buffer<float>(), Buffer<int32_t>()));
  PlanRecorder bwd;
  Print("hinge_backward", shape, bwd,
        keras_trees::HingeForestBackwardPipeline<float>(bwd, d, Buffer<float>(), Buffer<float>(), Buffer<int32_t>(),
                                                       Buffer<float>(), Buffer<int32_t>(), Buffer<float>(),
                                                       Buffer<int32_t>(), Buffer<float>(), Buffer<float>(),
                                                       Buffer<float>()));
}

void HardRouting(int64_t batch, int64_t trees, int depth, int64_t features) {
  keras_trees::RoutingDims d = TreeDims<keras_trees::RoutingDims>(batch, trees, depth, features);
  const std::string shape = Shape("batch %lld, %lld trees of depth %lld, %lld features", batch, trees, depth, features);
  PlanRecorder fwd;
  Print("hard_routing_forward", shape, fwd,
        keras_trees::HardRoutePipeline<float>(fwd, d, Buffer<float>(), Buffer<float>(), Buffer<float>(), nullptr,
                                              nullptr, Buffer<bool>(), Buffer<int32_t>(), nullptr));
}

void TreeEnsemble(int64_t batch, int64_t trees, int depth, int64_t features, int64_t units) {
  keras_trees::SoftTreeDims d = TreeDims<keras_trees::SoftTreeDims>(batch, trees, depth, features);
  d.units = units;
  const std::string shape = Shape("batch %lld, %lld trees of depth %lld, %lld features", batch, trees, depth, features);
  PlanRecorder fwd;
  Print("tree_ensemble_forward", shape, fwd,
        keras_trees::SoftTreeEnsembleForwardPipeline<float>(fwd, d, Buffer<float>(), Buffer<float>(),
                                                            Buffer<float>(), Buffer<float>(), Buffer<float>(),
                                                            Buffer<float>()));
  PlanRecorder bwd;
  Print("tree_ensemble_backward", shape, bwd,
        keras_trees::SoftTreeEnsembleBackwardPipeline<float>(
            bwd, d, Buffer<float>(), Buffer<float>(), Buffer<float>(), Buffer<float>(), Buffer<float>(),
            Buffer<float>(), Buffer<float>(), Buffer<float>(), Buffer<float>(), Buffer<float>()));
}

void PrunedRouting(int64_t batch, int64_t trees, int depth, int64_t features, int64_t units) {
  keras_trees::PrunedRoutingDims d = TreeDims<keras_trees::PrunedRoutingDims>(batch, trees, depth, features);
  d.units = units;
  keras_trees::pruned::Splits<float> sp;  // oblique splits, as the end-to-end forest's
  sp.weights = Buffer<float>();
  sp.bias = Buffer<float>();
  sp.gamma = Buffer<float>();
  const float threshold = 1e-4f;
  const std::string shape = Shape("batch %lld, %lld trees of depth %lld, %lld features", batch, trees, depth, features);
  PlanRecorder fwd;
  Print("pruned_routing_forward", shape, fwd,
        keras_trees::PrunedRoutingForwardPipeline<float>(fwd, d, Buffer<float>(), sp, Buffer<bool>(), Buffer<float>(),
                                                         threshold, Buffer<float>(), Buffer<int32_t>(),
                                                         Buffer<int32_t>(), Buffer<float>()));
  keras_trees::PrunedSplitGrads<float> g;
  g.weights = Buffer<float>();
  g.bias = Buffer<float>();
  g.gamma = Buffer<float>();
  PlanRecorder bwd;
  Print("pruned_routing_backward", shape, bwd,
        keras_trees::PrunedRoutingBackwardPipeline<float>(bwd, d, Buffer<float>(), Buffer<float>(), sp,
                                                          Buffer<bool>(), Buffer<float>(), threshold,
                                                          Buffer<float>(), true, g, Buffer<float>()));
  keras_trees::PrunedRoutingDims s = d;
  s.units = 1;  // the leaf statistics of one weight per sample
  PlanRecorder stats;
  Print("pruned_routing_leaf_statistics", shape, stats,
        keras_trees::PrunedLeafStatisticsPipeline<float>(stats, s, Buffer<float>(), Buffer<float>(), sp,
                                                         Buffer<bool>(), threshold, Buffer<float>()));
  PlanRecorder em;
  Print("pruned_routing_em_statistics", shape, em,
        keras_trees::PrunedEmStatisticsPipeline<float>(em, d, Buffer<float>(), sp, Buffer<bool>(), Buffer<float>(),
                                                       Buffer<int32_t>(), Buffer<float>(), threshold,
                                                       Buffer<float>()));
}

void LossAugmented(int64_t batch, int depth, int64_t features, int64_t classes) {
  keras_trees::LossAugmentedDims d;
  d.batch = batch;
  d.input_dim = features;
  d.depth = depth;
  d.num_internal = (int64_t{1} << depth) - 1;
  d.classes = classes;
  for (const bool fast : {false, true}) {
    const std::string shape = Shape("batch %lld, one tree of depth %lld, %lld features, %lld classes", batch, depth,
                                    features, classes) + (fast ? ", fast search" : ", exact search");
    PlanRecorder exec;
    Print("loss_augmented_forward", shape, exec,
          keras_trees::LossAugmentedPipeline<float, int32_t>(exec, d, true, fast, Buffer<float>(), Buffer<float>(),
                                                            Buffer<float>(), Buffer<float>(), Buffer<int32_t>(),
                                                            Buffer<int32_t>(), Buffer<int32_t>(), Buffer<float>()));
  }
}

}  // namespace

int main() {
  // The shapes of benchmarks/gpu_speed.py.
  Hinge(4096, 100, 10, 100, 26);
  HardRouting(1024, 100, 10, 64);
  TreeEnsemble(4096, 10, 10, 64, 10);
  TreeEnsemble(4096, 20, 8, 64, 10);
  PrunedRouting(4096, 70, 10, 16, 26);
  LossAugmented(1024, 14, 16, 26);
  return 0;
}
