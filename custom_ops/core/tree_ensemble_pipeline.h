// The Tree Ensemble Layer as pipelines of portable bodies
// (core/tree_ensemble_bodies.h) on an executor (core/pipeline.h): the GPU
// kernels (custom_ops/cuda/) and their CPU emulation. Each returns "" or the
// error message of the CPU kernels (core/checks.h), so every binding raises
// the same words. gamma stays in device memory: the bodies read it there, and
// the host copies it only to word the message of a bad gamma.
//
// Forward: value checks (status words), one walk per (sample, tree) pair
// writing the pair's partial output row, then one writer per output element
// adding its sample's rows in tree order.
//
// Backward, without a host-sized trace: the samples go in chunks (fixed
// blocks [s0, s0 + chunk) in sample order; the chunk size comes from the
// shapes and a memory budget, TelChunk). Per chunk:
//   1. the chunk's dense coefficient rows are zeroed ([chunk, trees, nodes]);
//   2. a second walk per (sample, tree) pair writes the coefficients of the
//      nodes it reaches and its pair's grad_x row;
//   3. grad_x per (sample, feature): its pair rows in tree order;
//   4. owner reductions per element of grad_node_weights, grad_node_bias and
//      grad_leaf_weights in two passes: per (block of kTelBlock samples,
//      element), the block's samples in order (tel::ChunkSum); then per
//      element, the previous chunks' sum plus the chunk's blocks in order
//      (pipeline::AddBlocks). Chunks are whole blocks (but the last), so each
//      element is the same sequence of additions whatever the chunk size, and
//      the serial loops are a block long (one loop over all of a chunk's
//      samples per element would leave a few warps, such as the bias
//      gradient's, looping over more than a thousand samples).
// No float atomics; every float output element has one writer per launch.
// The reductions read every coefficient of the chunk (reached or not), so
// their cost is batch * trees * 2**depth * (input_dim + units) reads: dense,
// unlike the walks.
#ifndef KERAS_TREES_CORE_TREE_ENSEMBLE_PIPELINE_H_
#define KERAS_TREES_CORE_TREE_ENSEMBLE_PIPELINE_H_

#include <cstdint>
#include <string>

#include "core/checks.h"
#include "core/pipeline.h"
#include "core/tree_ensemble.h"
#include "core/tree_ensemble_bodies.h"

namespace keras_trees {

// The memory budget of one backward chunk's coefficient rows, grad_x rows
// and block partials.
constexpr int64_t kTelChunkBytes = int64_t{64} << 20;
// Samples per block of the backward's owner reductions.
constexpr int64_t kTelBlock = 128;

// The most elements of one owner reduction (node weights or leaf weights).
inline int64_t TelReductionElements(const SoftTreeDims& d) {
  const int64_t weights = d.trees * d.num_internal * d.input_dim;
  const int64_t leaves = d.trees * (d.num_internal + 1) * d.units;
  const int64_t most = weights > leaves ? weights : leaves;
  return most > d.trees * d.num_internal ? most : d.trees * d.num_internal;
}

// Samples per backward chunk (pipeline::ChunkSamples: within `budget_bytes`,
// whole blocks of kTelBlock where one fits, raised towards
// pipeline::kChunkWalkPairs pairs within `wide_bytes`, the executor's
// kWideScratchBytes).
inline int64_t TelChunk(const SoftTreeDims& d, int64_t element_bytes, int64_t budget_bytes = kTelChunkBytes,
                        int64_t wide_bytes = 0) {
  const int64_t partial = (TelReductionElements(d) + kTelBlock - 1) / kTelBlock;  // per sample, amortized
  const int64_t per_sample = (d.trees * (2 * d.num_internal + 1 + d.input_dim) + partial) * element_bytes;
  return pipeline::ChunkSamples(d.batch, d.trees, per_sample, kTelBlock, budget_bytes, wide_bytes);
}

namespace tel_internal {

template <typename T, class Exec>
unsigned long long* Checks(Exec& exec, const SoftTreeDims& d, const T* x, const T* w, const T* b, const T* o,
                           const T* gamma) {
  using namespace tel;
  unsigned long long* status = pipeline::NewStatus(exec, kStatusWords);
  pipeline::FiniteChecks<T> checks;
  checks.status = status;
  checks.Add(x, d.batch * d.input_dim, kBadX)
      .Add(w, d.trees * d.num_internal * d.input_dim, kBadWeights)
      .Add(b, d.trees * d.num_internal, kBadBias)
      .Add(o, d.trees * (d.num_internal + 1) * d.units, kBadLeafWeight);
  const pipeline::Together<GammaCheck<T>, pipeline::FiniteChecks<T>> all{GammaCheck<T>{gamma, status}, 1, checks,
                                                                         checks.Items()};
  exec.For(all.Items(), all);
  return status;
}

// The CPU kernels' message of the first failed check (core/checks.h
// CheckSoftTreeEnsembleValues), or "", from the status words and gamma's
// value captured beside them (Capture).
template <typename T>
std::string Message(const unsigned long long* words, const double* values) {
  using namespace tel;
  if (words[kBadGamma] != portable::kNone) {
    return checks_internal::Message("gamma must be a finite number > 0, got ", static_cast<T>(values[kBadGamma]));
  }
  if (words[kBadX] != portable::kNone) return "x contains NaN or Inf; the tree ensemble needs finite inputs";
  if (words[kBadWeights] != portable::kNone) return checks_internal::NonFinite("node_weights");
  if (words[kBadBias] != portable::kNone) return checks_internal::NonFinite("node_bias");
  if (words[kBadLeafWeight] != portable::kNone) return checks_internal::NonFinite("leaf_weights");
  return "";
}

// gamma's value into its word's value slot, after the checks (for the message).
template <typename T>
pipeline::Capture<T> CaptureGamma(unsigned long long* status, const T* gamma) {
  return pipeline::Capture<T>{status + tel::kBadGamma, gamma,
                              pipeline::Values(status, tel::kStatusWords) + tel::kBadGamma};
}

}  // namespace tel_internal

template <typename T, class Exec>
std::string SoftTreeEnsembleForwardPipeline(Exec& exec, const SoftTreeDims& d, const T* x, const T* node_weights,
                                            const T* node_bias, const T* leaf_weights, const T* gamma,
                                            T* output) {
  using namespace tel;
  unsigned long long* status = tel_internal::Checks(exec, d, x, node_weights, node_bias, leaf_weights, gamma);
  T* partial = exec.template Scratch<T>(d.batch * d.trees * d.units);
  // The walks, and gamma's value for the message beside them.
  const pipeline::Together<Walk<T>, pipeline::Capture<T>> walk{
      Walk<T>{d, x, node_weights, node_bias, leaf_weights, gamma, partial}, d.batch * d.trees,
      tel_internal::CaptureGamma(status, gamma), 1};
  exec.For(walk.Items(), walk);
  // NaN outputs where a check failed: nothing finite and wrong leaves the call.
  exec.For(d.batch * d.units, SumTrees<T>{d.trees, d.units, partial, output, status});
  return exec.Finish(status, kStatusWords, tel_internal::Message<T>);
}

// grad_x may be null (no input gradient wanted).
template <typename T, class Exec>
std::string SoftTreeEnsembleBackwardPipeline(Exec& exec, const SoftTreeDims& d, const T* grad_output, const T* x,
                                             const T* node_weights, const T* node_bias, const T* leaf_weights,
                                             const T* gamma, T* grad_x, T* grad_node_weights, T* grad_node_bias,
                                             T* grad_leaf_weights, int64_t chunk_bytes = kTelChunkBytes) {
  using namespace tel;
  unsigned long long* status = tel_internal::Checks(exec, d, x, node_weights, node_bias, leaf_weights, gamma);
  const int64_t ni = d.num_internal, leaves = ni + 1, nodes = d.Nodes();
  const int64_t chunk = TelChunk(d, sizeof(T), chunk_bytes, Exec::kWideScratchBytes);
  if (chunk == 0) {  // batch 0: every parameter gradient is 0 (NaN where a check failed)
    const pipeline::Together<pipeline::Fill<T>, pipeline::Capture<T>> weights{
        pipeline::Fill<T>{grad_node_weights, T(0), status, kStatusWords}, d.trees * ni * d.input_dim,
        tel_internal::CaptureGamma(status, gamma), 1};
    exec.For(weights.Items(), weights);
    exec.For(d.trees * ni, pipeline::Fill<T>{grad_node_bias, T(0), status, kStatusWords});
    exec.For(d.trees * leaves * d.units, pipeline::Fill<T>{grad_leaf_weights, T(0), status, kStatusWords});
    return exec.Finish(status, kStatusWords, tel_internal::Message<T>);
  }
  T* coeff = exec.template Scratch<T>(chunk * d.trees * nodes);
  T* gx = grad_x != nullptr ? exec.template Scratch<T>(chunk * d.trees * d.input_dim) : nullptr;
  const int64_t max_blocks = (chunk + kTelBlock - 1) / kTelBlock;
  T* partial = exec.template Scratch<T>(max_blocks * TelReductionElements(d));
  // One owner reduction of the chunk: block partials, then their sums in block order.
  const auto reduce = [&](int64_t s0, int64_t n, bool first, int64_t node_base, int64_t node_count,
                          int64_t columns, const T* data, T* out) {
    const int64_t elements = d.trees * node_count * columns, blocks = (n + kTelBlock - 1) / kTelBlock;
    pipeline::ReduceInBlocks(exec, ChunkSum<T>{d.trees, nodes, node_base, node_count, columns, s0, n, kTelBlock,
                                               coeff, data, partial},
                             blocks * elements, elements, blocks, first, partial, out, status, kStatusWords);
  };
  for (int64_t s0 = 0; s0 < d.batch; s0 += chunk) {
    const int64_t n = d.batch - s0 < chunk ? d.batch - s0 : chunk;
    const bool first = s0 == 0;
    const pipeline::Fill<T> zero{coeff, T(0)};
    if (first) {  // with gamma's value for the message
      const pipeline::Together<pipeline::Fill<T>, pipeline::Capture<T>> zero_and_capture{
          zero, n * d.trees * nodes, tel_internal::CaptureGamma(status, gamma), 1};
      exec.For(zero_and_capture.Items(), zero_and_capture);
    } else {
      exec.For(n * d.trees * nodes, zero);
    }
    exec.For(n * d.trees, BackwardWalk<T>{d, s0, n, grad_output, x, node_weights, node_bias, leaf_weights, gamma,
                                          coeff, gx});
    if (grad_x != nullptr) {
      exec.For(n * d.input_dim, SumTrees<T>{d.trees, d.input_dim, gx, grad_x + s0 * d.input_dim, status});
    }
    reduce(s0, n, first, 0, ni, d.input_dim, x, grad_node_weights);
    reduce(s0, n, first, 0, ni, 1, nullptr, grad_node_bias);
    reduce(s0, n, first, ni, leaves, d.units, grad_output, grad_leaf_weights);
  }
  return exec.Finish(status, kStatusWords, tel_internal::Message<T>);
}

}  // namespace keras_trees

#endif  // KERAS_TREES_CORE_TREE_ENSEMBLE_PIPELINE_H_
