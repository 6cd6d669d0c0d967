// Hard routing as a pipeline of portable bodies (core/hard_routing_bodies.h)
// on an executor (core/pipeline.h): the GPU kernels (custom_ops/cuda/) and
// their CPU emulation. Value checks as status words, then one (sample, tree)
// walk per pair (a group of lanes per pair on the GPU); returns "" or the error message of the CPU kernels
// (core/checks.h).
#ifndef KERAS_TREES_CORE_HARD_ROUTING_PIPELINE_H_
#define KERAS_TREES_CORE_HARD_ROUTING_PIPELINE_H_

#include <cstdint>
#include <string>

#include "core/checks.h"
#include "core/hard_routing.h"
#include "core/hard_routing_bodies.h"
#include "core/pipeline.h"

namespace keras_trees {

// expert_weights and threshold are null for oblique splits; path_values null
// when not wanted.
template <typename T, class Exec>
std::string HardRoutePipeline(Exec& exec, const RoutingDims& d, const T* x, const T* split_weights,
                              const T* split_bias, const T* expert_weights, const T* threshold,
                              const bool* is_split, int32_t* node, T* path_values) {
  using namespace routing;
  unsigned long long* status = pipeline::NewStatus(exec, kStatusWords);
  const int64_t splits = d.trees * d.num_internal;
  // Every value check in one launch.
  pipeline::FiniteChecks<T> checks;
  checks.status = status;
  checks.Add(x, d.batch * d.input_dim, kBadX)
      .Add(split_weights, splits * d.experts * d.input_dim, kBadWeights)
      .Add(split_bias, splits * d.experts, kBadBias);
  if (expert_weights != nullptr) {
    checks.Add(threshold, splits, kBadThreshold).Add(expert_weights, splits * d.experts, kBadExpertWeights, true);
  }
  exec.For(checks.Items(), checks);
  const int lanes = Lanes(d.input_dim);
  exec.ForGroups(d.batch * d.trees, lanes, Walk<T>{d, x, split_weights, split_bias, expert_weights, threshold,
                                                  is_split, node, path_values, status, lanes});
  unsigned long long words[kStatusWords];
  exec.CopyToHost(words, status, sizeof(words));
  if (words[kBadX] != portable::kNone) return kRoutingXMessage;
  if (words[kBadWeights] != portable::kNone) return checks_internal::NonFinite("split_weights");
  if (words[kBadBias] != portable::kNone) return checks_internal::NonFinite("split_bias");
  if (words[kBadThreshold] != portable::kNone) return checks_internal::NonFinite("threshold");
  if (words[kBadExpertWeights] != portable::kNone) {
    T value = T(0);
    exec.CopyToHost(&value, expert_weights + words[kBadExpertWeights], sizeof(value));
    return ExpertWeightsMessage(value);
  }
  if (words[kOverflow] != portable::kNone) return kSplitValueOverflow;
  return "";
}

}  // namespace keras_trees

#endif  // KERAS_TREES_CORE_HARD_ROUTING_PIPELINE_H_
