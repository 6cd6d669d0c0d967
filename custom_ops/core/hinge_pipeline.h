// The hinge-forest kernels as pipelines of portable bodies (core/hinge_bodies.h)
// on an executor (core/pipeline.h): the GPU kernels (custom_ops/cuda/) and
// their CPU emulation. Each returns "" or the error message of the CPU kernels
// (core/checks.h), so every binding raises the same words.
//
// Forward: value checks (status words), the (sample, tree) walks, then one
// writer per output element. A bad input makes every float output NaN (the
// walks' margins), and exec.Finish words its message (core/check_modes.h).
// Backward (Eq. 11-12), with owner reductions instead of scatter-adds:
//   1. per pair: dL/dr*, the deciding feature, the leaf and vertex keys;
//   2. grad_x per (sample, feature): its trees' coefficients in tree order;
//   3. stable sorts of the pairs by leaf key and by vertex key;
//   4. the run of each key in the sorted arrays;
//   5. grad_leaf_weights per (tree, leaf, unit) and grad_thresholds per
//      (tree, vertex): the sums over their runs, in fixed blocks of 32
//      sorted positions added in block order (pipeline::SumRuns), so no
//      thread walks a long run (a fern vertex's run holds every sample).
// Every output element has one final writer and a fixed summation order:
// trees in order for grad_x (the CPU engine's), samples in order within a
// block and blocks in order for the others.
#ifndef KERAS_TREES_CORE_HINGE_PIPELINE_H_
#define KERAS_TREES_CORE_HINGE_PIPELINE_H_

#include <cstdint>
#include <string>

#include "core/checks.h"
#include "core/hinge_bodies.h"
#include "core/pipeline.h"

namespace keras_trees {

template <typename T, class Exec>
std::string HingeForestForwardPipeline(Exec& exec, const HingeDims& d, bool fern, const T* x,
                                       const T* thresholds, const int32_t* feature_indices,
                                       const T* leaf_weights, T* output, int32_t* leaf, T* margin,
                                       int32_t* vertex) {
  using namespace hinge;
  unsigned long long* status = pipeline::NewStatus(exec, kStatusWords);
  const int64_t splits = d.trees * d.vertices;
  int32_t* safe = exec.template Scratch<int32_t>(splits);
  pipeline::FiniteChecks<T> checks;
  checks.status = status;
  checks.Add(x, d.batch * d.features, kBadX).Add(leaf_weights, d.trees * d.leaves * d.units, kBadLeafWeight);
  // The split checks and the value checks in one launch.
  const pipeline::Together<Splits<T>, pipeline::FiniteChecks<T>> prepare{
      Splits<T>{feature_indices, thresholds, d.features, safe, status}, splits, checks, checks.Items()};
  exec.For(prepare.Items(), prepare);
  // The walks, and the bad feature id's value for the message beside them.
  const pipeline::Together<Walk<T>, pipeline::Capture<int32_t>> walk{
      Walk<T>{d, fern, x, thresholds, feature_indices, safe, leaf, margin, vertex, status}, d.batch * d.trees,
      pipeline::Capture<int32_t>{status + kBadFeature, feature_indices,
                                 pipeline::Values(status, kStatusWords) + kBadFeature},
      1};
  exec.For(walk.Items(), walk);
  exec.For(d.batch * d.trees * d.units, Output<T>{d, leaf_weights, leaf, margin, output});
  return exec.Finish(status, kStatusWords, [d](const unsigned long long* words, const double* values) {
    if (words[kBadFeature] != portable::kNone) {
      return HingeFeatureMessage(d, static_cast<int64_t>(words[kBadFeature]),
                                 static_cast<int32_t>(values[kBadFeature]));
    }
    if (words[kBadX] != portable::kNone) return std::string(kHingeXMessage);
    if (words[kBadThreshold] != portable::kNone) return std::string(kHingeThresholdsMessage);
    if (words[kBadLeafWeight] != portable::kNone) return checks_internal::NonFinite("leaf_weights");
    return std::string();
  });
}

// The message of a backward call whose leaf, vertex or feature indices are out
// of range (the CPU kernels' words).
constexpr const char* kHingeBadPathMessage =
    "leaf, vertex or feature_indices out of range: pass the leaf, margin and vertex outputs of "
    "the same forward call";

// ... and of one whose margins are not finite (the outputs of a forward call
// whose input was bad, which on a GPU may raise only later).
constexpr const char* kHingeBadMarginMessage =
    "margin contains NaN or Inf: pass the margin output of a forward call whose inputs were finite";

template <typename T, class Exec>
std::string HingeForestBackwardPipeline(Exec& exec, const HingeDims& d, const T* grad_output,
                                        const T* grad_margin, const int32_t* feature_indices,
                                        const T* leaf_weights, const int32_t* leaf, const T* margin,
                                        const int32_t* vertex, T* grad_x, T* grad_thresholds,
                                        T* grad_leaf_weights) {
  using namespace hinge;
  const int64_t pairs = d.batch * d.trees;
  const int64_t leaf_keys = d.trees * d.leaves, vertex_keys = d.trees * d.vertices;
  if (pairs > INT32_MAX || leaf_keys > INT32_MAX) {
    return "hinge forest gradient on the GPU: batch * num_trees and num_trees * 2**depth must be "
           "below 2**31";
  }
  unsigned long long* status = pipeline::NewStatus(exec, kStatusWords);
  T* coeff = exec.template Scratch<T>(pairs);
  int32_t* feature = exec.template Scratch<int32_t>(pairs);
  int32_t* keys = exec.template Scratch<int32_t>(4 * pairs);  // leaf, vertex, sorted leaf, sorted vertex
  int32_t* values = exec.template Scratch<int32_t>(3 * pairs);  // pair, by leaf, by vertex
  int32_t* bounds = exec.template Scratch<int32_t>(2 * (leaf_keys + vertex_keys));
  int32_t *leaf_key = keys, *vertex_key = keys + pairs;
  int32_t *sorted_leaf = keys + 2 * pairs, *sorted_vertex = keys + 3 * pairs;
  int32_t *pair = values, *by_leaf = values + pairs, *by_vertex = values + 2 * pairs;
  int32_t *leaf_start = bounds, *leaf_end = bounds + leaf_keys;
  int32_t *vertex_start = bounds + 2 * leaf_keys, *vertex_end = vertex_start + vertex_keys;

  exec.For(pairs, PairCoefficients<T>{d, grad_output, grad_margin, feature_indices, leaf_weights, leaf,
                                      margin, vertex, coeff, feature, leaf_key, vertex_key, pair,
                                      status});
  exec.For(d.batch * d.features, GradX<T>{d, coeff, feature, grad_x, status});
  exec.For(2 * (leaf_keys + vertex_keys), pipeline::Fill<int32_t>{bounds, 0});
  if (pairs > 0) {
    exec.SortPairs(leaf_key, sorted_leaf, pair, by_leaf, pairs, pipeline::KeyBits(leaf_keys));
    exec.SortPairs(vertex_key, sorted_vertex, pair, by_vertex, pairs, pipeline::KeyBits(vertex_keys));
  }
  exec.For(2 * pairs, pipeline::RunBoundsPair{{sorted_leaf, pairs, leaf_start, leaf_end},
                                               {sorted_vertex, pairs, vertex_start, vertex_end}});
  // A bad path: every gradient NaN (GradX, and the run totals here).
  pipeline::SumRuns(exec, sorted_leaf, pairs, leaf_start, leaf_end, leaf_keys, d.units,
                    LeafTerm<T>{d.units, grad_output, margin, by_leaf}, grad_leaf_weights, status, kStatusWords);
  pipeline::SumRuns(exec, sorted_vertex, pairs, vertex_start, vertex_end, vertex_keys, int64_t{1},
                    ThresholdTerm<T>{coeff, by_vertex}, grad_thresholds, status, kStatusWords);
  return exec.Finish(status, kStatusWords, [](const unsigned long long* words, const double*) {
    if (words[kBadPath] != portable::kNone) return std::string(kHingeBadPathMessage);
    return std::string(words[kBadMargin] != portable::kNone ? kHingeBadMarginMessage : "");
  });
}

}  // namespace keras_trees

#endif  // KERAS_TREES_CORE_HINGE_PIPELINE_H_
