// Pruned probabilistic routing as pipelines of portable bodies
// (core/pruned_routing_bodies.h) on an executor (core/pipeline.h): the GPU
// kernels (custom_ops/cuda/) and their CPU emulation. Executor-generic, so
// every binding (XLA FFI CUDA handlers, TensorFlow GPU kernels) runs the same
// sequence. Each returns "" or the error message of the CPU kernels
// (core/checks.h), so every binding raises the same words.
//
// Every pipeline starts with the value checks (one launch) and reads their
// status words back before any walk runs. The walks index in bounds whatever
// the labels (portable::InRange), so the order is for the messages alone.
//
// Forward: one walk per (sample, tree) pair writing its output row, kept
// leaves, visited splits and dropped mass (one writer each).
//
// Backward, leaf statistics and the E-step, without a trace: the samples go in
// chunks [s0, s0 + chunk) in sample order (chunk size from the shapes and a
// memory budget only, PrunedChunk). Per chunk the coefficient buffers
// ([chunk, trees, positions] leaf masses; for the backward pass also
// [chunk, trees, num_internal, experts] dL/dz and dL/dgamma or dL/dr, noisy-OR
// [chunk, trees, num_internal, 2] dL/drate0 and dL/dsteepness, and the pairs'
// dL/dx rows) are zeroed, a second walk per pair writes the coefficients of
// what it keeps, then the owner reductions run in two passes: one writer per
// (block of kPrunedBlock samples, output element) adds the block's samples in
// order (pruned::ChunkSum, pruned::EmCounts), then one writer per element
// adds the chunk's blocks in order to the sums of the previous chunks
// (pipeline::AddBlocks); chunks are whole blocks, so each element is the same
// sequence of additions whatever the chunk size, and the serial loops are a
// block long. dL/dx per (sample, feature) adds its pair rows in tree order.
// No float atomics.
// The reductions read every coefficient of the chunk (kept or not): their
// cost is batch * trees * 2**depth * (experts * input_dim + units) reads,
// dense, unlike the walks.
#ifndef KERAS_TREES_CORE_PRUNED_ROUTING_PIPELINE_H_
#define KERAS_TREES_CORE_PRUNED_ROUTING_PIPELINE_H_

#include <cmath>
#include <cstdint>
#include <string>

#include "core/checks.h"
#include "core/pipeline.h"
#include "core/pruned_routing.h"
#include "core/pruned_routing_bodies.h"

namespace keras_trees {

// The memory budget of one chunk's coefficient buffers and block partials.
constexpr int64_t kPrunedChunkBytes = int64_t{64} << 20;
// Samples per block of the owner reductions.
constexpr int64_t kPrunedBlock = 128;

// The most elements of one owner reduction: the leaf values' (or the
// statistics', the E-step's counts: units = classes) and, with split_grads,
// the split weights'.
inline int64_t PrunedReductionElements(const PrunedRoutingDims& d, bool split_grads) {
  const int64_t leaves = d.trees * pruned::Positions(d) * d.units;
  const int64_t weights = split_grads ? d.trees * d.num_internal * d.experts * d.input_dim : 0;
  const int64_t splits = split_grads ? 2 * d.trees * d.num_internal * d.experts : 0;
  const int64_t most = leaves > weights ? leaves : weights;
  return most > splits ? most : splits;
}

// Samples per chunk (pipeline::ChunkSamples: within `budget_bytes`, whole
// blocks of kPrunedBlock where one fits, raised towards
// pipeline::kChunkWalkPairs pairs within `wide_bytes`, the executor's
// kWideScratchBytes). split_grads: the backward pass's buffers, else leaf
// masses only (plus `extra` elements per sample).
inline int64_t PrunedChunk(const PrunedRoutingDims& d, bool experts, bool split_grads, bool with_gx,
                           int64_t element_bytes, int64_t budget_bytes = kPrunedChunkBytes, int64_t extra = 0,
                           int64_t wide_bytes = 0) {
  const int64_t ni = d.num_internal;
  int64_t per_pair = pruned::Positions(d);
  if (split_grads) per_pair += 2 * ni * d.experts + (experts ? 2 * ni : 0) + (with_gx ? d.input_dim : 0);
  const int64_t partial = (PrunedReductionElements(d, split_grads) + kPrunedBlock - 1) / kPrunedBlock;
  const int64_t per_sample = (d.trees * per_pair + extra + partial) * element_bytes;
  return pipeline::ChunkSamples(d.batch, d.trees, per_sample, kPrunedBlock, budget_bytes, wide_bytes);
}

namespace pruned_internal {

// One owner reduction of a chunk's n samples (the two passes above): the
// ChunkSum partials of `sum` (its s0, n, block_rows, elements and partial
// set here), then each element's previous sum (none when `first`) plus the
// blocks in order.
template <typename T, class Exec>
void Reduce(Exec& exec, pruned::ChunkSum<T> sum, int64_t rows, T* partial, bool first, T* out) {
  sum.elements = rows * sum.cols;
  sum.block_rows = kPrunedBlock;
  sum.partial = partial;
  const int64_t blocks = (sum.n + kPrunedBlock - 1) / kPrunedBlock;
  pipeline::ReduceInBlocks(exec, sum, blocks * sum.elements, sum.elements, blocks, first, partial, out);
}

}  // namespace pruned_internal

// Gradients of the split inputs (the forms' layouts; expert_weights and
// rate0 null for oblique splits; gamma is the steepness of noisy-OR splits).
template <typename T>
struct PrunedSplitGrads {
  T* weights = nullptr;
  T* bias = nullptr;
  T* gamma = nullptr;
  T* expert_weights = nullptr;
  T* rate0 = nullptr;
};

namespace pruned_internal {

// Extra checks of the E-step's own inputs.
template <typename T>
struct EmValues {
  const T* leaf_values = nullptr;
  const int32_t* labels = nullptr;
  const T* sample_weight = nullptr;
};

// Runs the value checks and returns the CPU kernels' message of the first
// failed one, or "". leaf_values non-null: checked finite (forward).
template <typename T, class Exec>
std::string Check(Exec& exec, const PrunedRoutingDims& d, const T* x, const pruned::Splits<T>& sp, double threshold,
                  const T* leaf_values, const EmValues<T>& em = EmValues<T>{}) {
  using namespace pruned;
  using checks_internal::Message;
  using checks_internal::NonFinite;
  if (!(std::isfinite(threshold) && threshold >= 0.0 && threshold < 1.0)) {
    return Message("threshold must be in [0, 1), got ", threshold);
  }
  const bool experts = sp.expert_weights != nullptr;
  const int64_t nodes = d.trees * d.num_internal;
  unsigned long long* status = pipeline::NewStatus(exec, kStatusWords);
  pipeline::FiniteChecks<T> a;
  a.status = status;
  a.Add(x, d.batch * d.input_dim, kBadX)
      .Add(sp.weights, nodes * d.experts * d.input_dim, kBadWeights)
      .Add(sp.bias, nodes * d.experts, kBadBias)
      .Add(sp.gamma, nodes, kBadGamma);
  if (experts) a.Add(sp.rate0, nodes, kBadRate0).Add(sp.expert_weights, nodes * d.experts, kBadExpertWeights, true);
  pipeline::FiniteChecks<T> b;
  b.status = status;
  const int64_t leaf_size = d.trees * Positions(d) * d.units;
  if (leaf_values != nullptr) b.Add(leaf_values, leaf_size, kBadLeafValues);
  if (em.leaf_values != nullptr) {
    b.Add(em.leaf_values, leaf_size, kBadLeafValues, true);
    if (em.sample_weight != nullptr) b.Add(em.sample_weight, d.batch, kBadSampleWeight, true);
  }
  const pipeline::Together<pipeline::FiniteChecks<T>, pipeline::FiniteChecks<T>> values{a, a.Items(), b, b.Items()};
  const LabelCheck labels{em.labels, d.units, status};
  const pipeline::Together<decltype(values), LabelCheck> all{values, values.Items(), labels,
                                                             em.labels != nullptr ? d.batch : 0};
  exec.For(all.Items(), all);
  unsigned long long words[kStatusWords];
  exec.CopyToHost(words, status, sizeof(words));
  if (words[kBadX] != portable::kNone) return "x contains NaN or Inf; pruned routing needs finite inputs";
  if (words[kBadWeights] != portable::kNone) return NonFinite("split_weights");
  if (words[kBadBias] != portable::kNone) return NonFinite("split_bias");
  if (words[kBadRate0] != portable::kNone) return NonFinite("rate0");
  if (words[kBadGamma] != portable::kNone) return NonFinite(experts ? "gamma (the steepness)" : "gamma");
  if (words[kBadExpertWeights] != portable::kNone) {
    T value = T(0);
    exec.CopyToHost(&value, sp.expert_weights + words[kBadExpertWeights], sizeof(value));
    return checks_internal::ExpertWeightsMessage(value);
  }
  if (words[kBadLeafValues] != portable::kNone) {
    if (em.leaf_values == nullptr) return NonFinite("leaf_values");
    T value = T(0);
    exec.CopyToHost(&value, em.leaf_values + words[kBadLeafValues], sizeof(value));
    return Message("leaf_values must be finite and >= 0 (class distributions), got ", value);
  }
  if (words[kBadLabels] != portable::kNone) {
    const int64_t i = static_cast<int64_t>(words[kBadLabels]);
    int32_t label = 0;
    exec.CopyToHost(&label, em.labels + i, sizeof(label));
    return Message("labels must lie in [0, ", d.units, ") (the classes of leaf_values), got labels[", i, "] = ",
                   label);
  }
  if (words[kBadSampleWeight] != portable::kNone) {
    const int64_t i = static_cast<int64_t>(words[kBadSampleWeight]);
    T value = T(0);
    exec.CopyToHost(&value, em.sample_weight + i, sizeof(value));
    return Message("sample_weight[", i, "] = ", value, " must be finite and >= 0");
  }
  return "";
}

}  // namespace pruned_internal

// Forward pass (PrunedRoutingForward): every output is overwritten.
template <typename T, class Exec>
std::string PrunedRoutingForwardPipeline(Exec& exec, const PrunedRoutingDims& d, const T* x,
                                         const pruned::Splits<T>& sp, const bool* is_split, const T* leaf_values,
                                         T threshold, T* output, int32_t* kept_leaves, int32_t* split_evaluations,
                                         T* dropped_mass) {
  if (auto m = pruned_internal::Check(exec, d, x, sp, static_cast<double>(threshold), leaf_values); !m.empty()) {
    return m;
  }
  exec.For(d.batch * d.trees, pruned::ForwardWalk<T>{d, sp, x, is_split, leaf_values, threshold, output,
                                                     kept_leaves, split_evaluations, dropped_mass});
  return "";
}

// Backward pass (PrunedRoutingBackward): every gradient is overwritten;
// without x_grad, grad_x is zeros and dL/dx is not computed.
template <typename T, class Exec>
std::string PrunedRoutingBackwardPipeline(Exec& exec, const PrunedRoutingDims& d, const T* grad_output, const T* x,
                                          const pruned::Splits<T>& sp, const bool* is_split, const T* leaf_values,
                                          T threshold, T* grad_x, bool x_grad, const PrunedSplitGrads<T>& g,
                                          T* grad_leaf_values, int64_t chunk_bytes = kPrunedChunkBytes) {
  if (auto m = pruned_internal::Check<T>(exec, d, x, sp, static_cast<double>(threshold), nullptr); !m.empty()) return m;
  const bool experts = sp.expert_weights != nullptr;
  const int64_t ni = d.num_internal, positions = pruned::Positions(d), k = d.experts, p = d.input_dim;
  const int64_t nodes = d.trees * ni;
  if (!x_grad) exec.For(d.batch * p, pipeline::Fill<T>{grad_x, T(0)});
  const int64_t chunk = PrunedChunk(d, experts, true, x_grad, sizeof(T), chunk_bytes, 0, Exec::kWideScratchBytes);
  if (chunk == 0) {  // batch 0: every gradient is 0
    exec.For(nodes * k * p, pipeline::Fill<T>{g.weights, T(0)});
    exec.For(nodes * k, pipeline::Fill<T>{g.bias, T(0)});
    exec.For(nodes, pipeline::Fill<T>{g.gamma, T(0)});
    if (experts) {
      exec.For(nodes * k, pipeline::Fill<T>{g.expert_weights, T(0)});
      exec.For(nodes, pipeline::Fill<T>{g.rate0, T(0)});
    }
    exec.For(d.trees * positions * d.units, pipeline::Fill<T>{grad_leaf_values, T(0)});
    return "";
  }
  const int64_t per_mass = d.trees * positions, per_z = nodes * k, per_c = nodes * 2;
  T* mass = exec.template Scratch<T>(chunk * per_mass);
  T* cz = exec.template Scratch<T>(chunk * per_z);
  T* cb = exec.template Scratch<T>(chunk * per_z);
  T* cc = experts ? exec.template Scratch<T>(chunk * per_c) : nullptr;
  T* gx = x_grad ? exec.template Scratch<T>(chunk * d.trees * p) : nullptr;
  T* partial = exec.template Scratch<T>((chunk + kPrunedBlock - 1) / kPrunedBlock * PrunedReductionElements(d, true));
  for (int64_t s0 = 0; s0 < d.batch; s0 += chunk) {
    const int64_t n = d.batch - s0 < chunk ? d.batch - s0 : chunk;
    const bool first = s0 == 0;
    exec.For(n * per_mass, pipeline::Fill<T>{mass, T(0)});
    exec.For(n * per_z, pipeline::Fill<T>{cz, T(0)});
    exec.For(n * per_z, pipeline::Fill<T>{cb, T(0)});
    if (experts) exec.For(n * per_c, pipeline::Fill<T>{cc, T(0)});
    exec.For(n * d.trees, pruned::BackwardWalk<T>{d, sp, grad_output, x, is_split, leaf_values, threshold, s0, n,
                                                  mass, cz, cb, cc, gx});
    if (x_grad) exec.For(n * p, pruned::SumTrees<T>{d.trees, p, gx, grad_x + s0 * p});
    using Sum = pruned::ChunkSum<T>;
    const auto reduce = [&](const Sum& sum, int64_t rows, T* out) {
      pruned_internal::Reduce(exec, sum, rows, partial, first, out);
    };
    reduce(Sum{p, cz, per_z, 1, 0, x, p, 0, s0, n}, per_z, g.weights);
    reduce(Sum{1, cz, per_z, 1, 0, nullptr, 0, 0, s0, n}, per_z, g.bias);
    reduce(Sum{1, cb, per_z, 1, 0, nullptr, 0, 0, s0, n}, per_z, experts ? g.expert_weights : g.gamma);
    if (experts) {
      reduce(Sum{1, cc, per_c, 2, 0, nullptr, 0, 0, s0, n}, nodes, g.rate0);
      reduce(Sum{1, cc, per_c, 2, 1, nullptr, 0, 0, s0, n}, nodes, g.gamma);
    }
    reduce(Sum{d.units, mass, per_mass, 1, 0, grad_output, d.trees * d.units, positions, s0, n}, per_mass,
           grad_leaf_values);
  }
  return "";
}

// Leaf statistics (PrunedLeafStatistics): statistics [trees, positions,
// units] = sum_b mu_l(x_b) weights[b, t, :] over the kept leaves (overwritten).
template <typename T, class Exec>
std::string PrunedLeafStatisticsPipeline(Exec& exec, const PrunedRoutingDims& d, const T* weights, const T* x,
                                         const pruned::Splits<T>& sp, const bool* is_split, T threshold,
                                         T* statistics, int64_t chunk_bytes = kPrunedChunkBytes) {
  if (auto m = pruned_internal::Check<T>(exec, d, x, sp, static_cast<double>(threshold), nullptr); !m.empty()) return m;
  const int64_t positions = pruned::Positions(d), per_mass = d.trees * positions;
  const int64_t chunk = PrunedChunk(d, false, false, false, sizeof(T), chunk_bytes, 0, Exec::kWideScratchBytes);
  if (chunk == 0) {
    exec.For(per_mass * d.units, pipeline::Fill<T>{statistics, T(0)});
    return "";
  }
  T* mass = exec.template Scratch<T>(chunk * per_mass);
  T* partial = exec.template Scratch<T>((chunk + kPrunedBlock - 1) / kPrunedBlock * PrunedReductionElements(d, false));
  for (int64_t s0 = 0; s0 < d.batch; s0 += chunk) {
    const int64_t n = d.batch - s0 < chunk ? d.batch - s0 : chunk;
    exec.For(n * per_mass, pipeline::Fill<T>{mass, T(0)});
    exec.For(n * d.trees, pruned::LeafMassWalk<T>{d, sp, x, is_split, threshold, s0, n, mass, nullptr, nullptr,
                                                  nullptr});
    pruned_internal::Reduce(exec, pruned::ChunkSum<T>{d.units, mass, per_mass, 1, 0, weights, d.trees * d.units,
                                                      positions, s0, n},
                            per_mass, partial, s0 == 0, statistics);
  }
  return "";
}

// The fused EM E-step (PrunedEmStatistics, oblique splits): counts [trees,
// positions, classes] (overwritten); d.units = classes; sample_weight may be
// null (weights of 1).
template <typename T, class Exec>
std::string PrunedEmStatisticsPipeline(Exec& exec, const PrunedRoutingDims& d, const T* x,
                                       const pruned::Splits<T>& sp, const bool* is_split, const T* leaf_values,
                                       const int32_t* labels, const T* sample_weight, T threshold, T* counts,
                                       int64_t chunk_bytes = kPrunedChunkBytes) {
  const pruned_internal::EmValues<T> em{leaf_values, labels, sample_weight};
  if (auto m = pruned_internal::Check<T>(exec, d, x, sp, static_cast<double>(threshold), nullptr, em); !m.empty()) {
    return m;
  }
  const int64_t positions = pruned::Positions(d), per_mass = d.trees * positions;
  const int64_t chunk =
      PrunedChunk(d, false, false, false, sizeof(T), chunk_bytes, d.trees + 1, Exec::kWideScratchBytes);
  if (chunk == 0 || d.trees == 0) {
    exec.For(per_mass * d.units, pipeline::Fill<T>{counts, T(0)});
    return "";
  }
  T* mass = exec.template Scratch<T>(chunk * per_mass);
  T* pair_value = exec.template Scratch<T>(chunk * d.trees);
  T* scale = exec.template Scratch<T>(chunk);
  const int64_t elements = per_mass * d.units;  // the counts
  T* partial = exec.template Scratch<T>((chunk + kPrunedBlock - 1) / kPrunedBlock * elements);
  for (int64_t s0 = 0; s0 < d.batch; s0 += chunk) {
    const int64_t n = d.batch - s0 < chunk ? d.batch - s0 : chunk;
    const int64_t blocks = (n + kPrunedBlock - 1) / kPrunedBlock;
    exec.For(n * per_mass, pipeline::Fill<T>{mass, T(0)});
    exec.For(n * d.trees, pruned::LeafMassWalk<T>{d, sp, x, is_split, threshold, s0, n, mass, leaf_values, labels,
                                                  pair_value});
    exec.For(n, pruned::EmScale<T>{d.trees, s0, pair_value, sample_weight, scale});
    pipeline::ReduceInBlocks(exec, pruned::EmCounts<T>{d.trees, positions, d.units, s0, n, kPrunedBlock, mass,
                                                       leaf_values, labels, scale, partial},
                             blocks * per_mass, elements, blocks, s0 == 0, partial, counts);
  }
  return "";
}

}  // namespace keras_trees

#endif  // KERAS_TREES_CORE_PRUNED_ROUTING_PIPELINE_H_
