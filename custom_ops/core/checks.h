// Input checks shared by every framework adapter: each returns an empty string
// when the inputs are valid and otherwise the message of the error to raise,
// naming the argument and what was expected. Shapes are plain vectors of
// dimensions, so TensorFlow tensors and XLA buffers are checked by the same
// code and fail with the same words. Framework-free; see core/common.h.
#ifndef KERAS_TREES_CORE_CHECKS_H_
#define KERAS_TREES_CORE_CHECKS_H_

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/common.h"
#include "core/hard_routing.h"
#include "core/hinge.h"
#include "core/loss_augmented.h"
#include "core/pruned_routing.h"
#include "core/tree_ensemble.h"

namespace keras_trees {

using Shape = std::vector<int64_t>;

namespace checks_internal {

// Text of one part of a message, as an std::ostream with default flags would
// write it (integers in decimal, floating point as %g), but without iostreams:
// the messages are also built inside the CUDA library, loaded into processes
// whose other libraries bring their own C++ runtimes.
inline std::string Text(const std::string& v) { return v; }
inline std::string Text(const char* v) { return v; }
inline std::string Text(char v) { return std::string(1, v); }
inline std::string Text(bool v) { return v ? "1" : "0"; }
template <typename T>
std::string Text(T v) {
  if constexpr (std::is_floating_point<T>::value) {
    char buffer[32];
    std::snprintf(buffer, sizeof(buffer), "%g", static_cast<double>(v));
    return buffer;
  } else {
    return std::to_string(v);
  }
}

template <typename... Args>
std::string Message(const Args&... args) {
  std::string out;
  ((out += Text(args)), ...);
  return out;
}

inline std::string ShapeString(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

inline std::string Rank(const Shape& s, size_t rank, const char* name, const char* layout) {
  if (s.size() == rank) return "";
  return Message(name, " must have rank ", rank, " ", layout, ", got shape ", ShapeString(s));
}

inline std::string Exact(const Shape& s, const Shape& want, const char* name) {
  if (s == want) return "";
  return Message(name, " must have shape ", ShapeString(want), ", got ", ShapeString(s));
}

// The depth of a perfect tree whose `axis` (e.g. "node_weights.shape[1]")
// holds its num_internal = 2**depth - 1 splits, within [1, kMaxDepth].
inline std::string PerfectDepth(int64_t num_internal, const char* axis, int* depth) {
  *depth = DepthFromInternalNodes(num_internal);
  if (*depth < 1 || *depth > kMaxDepth) {
    return Message(axis, " must be 2**depth - 1 with 1 <= depth <= ", kMaxDepth, ", got ", num_internal);
  }
  return "";
}

// A parameter (weights, biases, thresholds, leaf values) must be finite:
// NaN would otherwise route silently one way (NaN > 0 is false) and give a
// finite output. A linear scan of the parameters, which the walks read anyway.
inline std::string NonFinite(const char* name) {
  return Message(name, " contains NaN or Inf (did training diverge?)");
}

template <typename T>
std::string Finite(const T* data, int64_t n, const char* name) {
  if (data == nullptr || AllFinite(data, n)) return "";
  return NonFinite(name);
}

template <typename T>
std::string ExpertWeightsMessage(T value) {
  return Message("expert_weights must be finite and >= 0 (noisy-OR rates), got ", value);
}

// Noisy-OR rates r_k: finite and >= 0 (an infinite rate makes every split of
// the node certain and its gradient NaN).
template <typename T>
std::string ExpertWeights(const T* data, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (!(std::isfinite(data[i]) && data[i] >= T(0))) {
      return ExpertWeightsMessage(data[i]);
    }
  }
  return "";
}

}  // namespace checks_internal

// Returns the first non-empty message of a sequence of checks.
#define KT_RETURN_IF_ERROR(expr)       \
  do {                                 \
    std::string kt_message_ = (expr);  \
    if (!kt_message_.empty()) return kt_message_; \
  } while (0)

// Tree Ensemble Layer: x [batch, input_dim], node_weights [trees, 2**depth - 1,
// input_dim], node_bias [trees, 2**depth - 1], leaf_weights [trees, 2**depth,
// units], gamma a scalar. Fills *d.
inline std::string CheckSoftTreeEnsembleShapes(const Shape& x, const Shape& w, const Shape& b,
                                               const Shape& o, const Shape& g, SoftTreeDims* d) {
  using namespace checks_internal;
  KT_RETURN_IF_ERROR(Rank(x, 2, "x", "[batch, input_dim]"));
  KT_RETURN_IF_ERROR(Rank(w, 3, "node_weights", "[num_trees, 2**depth - 1, input_dim]"));
  KT_RETURN_IF_ERROR(Rank(o, 3, "leaf_weights", "[num_trees, 2**depth, units]"));
  if (!g.empty()) return Message("gamma must be a scalar, got shape ", ShapeString(g));
  d->batch = x[0];
  d->input_dim = x[1];
  d->trees = w[0];
  d->num_internal = w[1];
  d->units = o[2];
  KT_RETURN_IF_ERROR(PerfectDepth(d->num_internal, "node_weights.shape[1]", &d->depth));
  if (w[2] != d->input_dim) {
    return Message("node_weights.shape[2] (", w[2], ") must equal the input dimension x.shape[1] (",
                   d->input_dim, ")");
  }
  if (b != Shape{d->trees, d->num_internal}) {
    return Message("node_bias must have shape [", d->trees, ", ", d->num_internal, "], got ",
                   ShapeString(b));
  }
  if (o[0] != d->trees || o[1] != d->num_internal + 1) {
    return Message("leaf_weights must have shape [", d->trees, ", ", d->num_internal + 1,
                   ", units], got ", ShapeString(o));
  }
  return "";
}

template <typename T>
std::string CheckSoftTreeEnsembleValues(const SoftTreeDims& d, const T* x, const T* node_weights,
                                        const T* node_bias, const T* leaf_weights, T gamma) {
  using checks_internal::Finite;
  using checks_internal::Message;
  if (!(std::isfinite(gamma) && gamma > T(0))) {
    return Message("gamma must be a finite number > 0, got ", gamma);
  }
  if (!AllFinite(x, d.batch * d.input_dim)) {
    return "x contains NaN or Inf; the tree ensemble needs finite inputs";
  }
  KT_RETURN_IF_ERROR(Finite(node_weights, d.trees * d.num_internal * d.input_dim, "node_weights"));
  KT_RETURN_IF_ERROR(Finite(node_bias, d.trees * d.num_internal, "node_bias"));
  return Finite(leaf_weights, d.trees * (d.num_internal + 1) * d.units, "leaf_weights");
}

// Hinge trees and ferns: x [batch, features], thresholds and feature_indices
// [trees, vertices], leaf_weights [trees, 2**depth, units]. Fills *d.
inline std::string CheckHingeShapes(bool fern, const Shape& x, const Shape& t, const Shape& f,
                                    const Shape& w, HingeDims* d) {
  using namespace checks_internal;
  KT_RETURN_IF_ERROR(Rank(x, 2, "x", "[batch, num_features]"));
  KT_RETURN_IF_ERROR(Rank(f, 2, "feature_indices", "[num_trees, num_vertices]"));
  KT_RETURN_IF_ERROR(Rank(w, 3, "leaf_weights", "[num_trees, 2**depth, units]"));
  if (t != f) {
    return Message("thresholds and feature_indices must have the same shape "
                   "[num_trees, num_vertices], got ", ShapeString(t), " and ", ShapeString(f));
  }
  *d = MakeHingeDims(fern, x[0], x[1], f[0], f[1], w[2]);
  if (d->depth < 1) {
    return fern ? Message("a fern has one threshold per level: thresholds.shape[1] is the depth "
                          "and must be in [1, ", kMaxDepth, "], got ", d->vertices)
                : Message("thresholds.shape[1] must be 2**depth - 1 (a perfect tree) with "
                          "1 <= depth <= ", kMaxDepth, ", got ", d->vertices);
  }
  if (w[0] != d->trees || w[1] != d->leaves) {
    return Message("leaf_weights must have shape [", d->trees, ", ", d->leaves, ", units] for ",
                   d->trees, fern ? " ferns" : " trees", " of depth ", d->depth, ", got ",
                   ShapeString(w));
  }
  return "";
}

// The messages of the hinge value checks, shared by the CPU scan below and the
// GPU pipeline's status words (core/hinge_pipeline.h).
inline std::string HingeFeatureMessage(const HingeDims& d, int64_t flat_index, int32_t value) {
  return checks_internal::Message("feature_indices[", flat_index / d.vertices, ", ", flat_index % d.vertices,
                                  "] = ", value, " is out of range: x has ", d.features,
                                  " features (valid indices are 0..", d.features - 1, ")");
}
constexpr const char* kHingeXMessage = "x contains NaN or Inf; hinge trees need finite inputs";
constexpr const char* kHingeThresholdsMessage = "thresholds contain NaN or Inf (did training diverge?)";

template <typename T>
std::string CheckHingeValues(const HingeDims& d, const T* x, const T* thresholds,
                             const int32_t* feature_indices, const T* leaf_weights) {
  const int64_t n = d.trees * d.vertices;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t f = feature_indices[i];
    if (f < 0 || f >= d.features) return HingeFeatureMessage(d, i, f);
  }
  if (!AllFinite(x, d.batch * d.features)) return kHingeXMessage;
  if (!AllFinite(thresholds, n)) return kHingeThresholdsMessage;
  return checks_internal::Finite(leaf_weights, d.trees * d.leaves * d.units, "leaf_weights");
}

// Hard routing: x [batch, input_dim]; split_weights [trees, 2**depth - 1,
// input_dim] (experts = 0) or [trees, 2**depth - 1, experts, input_dim];
// split_bias [trees, 2**depth - 1] or [trees, 2**depth - 1, experts];
// is_split [trees, 2**depth - 1]; with experts also expert_weights (like
// split_bias) and threshold [trees, 2**depth - 1] (named `threshold_name` in
// messages). Fills *d.
inline std::string CheckRoutingShapes(bool experts, const Shape& x, const Shape& w, const Shape& b,
                                      const Shape& is_split, const Shape& r, const Shape& c,
                                      RoutingDims* d, const char* threshold_name = "threshold") {
  using namespace checks_internal;
  KT_RETURN_IF_ERROR(Rank(x, 2, "x", "[batch, input_dim]"));
  const size_t rank = experts ? 4 : 3;
  KT_RETURN_IF_ERROR(Rank(w, rank, "split_weights",
                          experts ? "[num_trees, 2**depth - 1, num_experts, input_dim]"
                                  : "[num_trees, 2**depth - 1, input_dim]"));
  d->batch = x[0];
  d->input_dim = x[1];
  d->trees = w[0];
  d->num_internal = w[1];
  d->experts = experts ? w[2] : 1;
  KT_RETURN_IF_ERROR(PerfectDepth(d->num_internal, "split_weights.shape[1]", &d->depth));
  if (w[rank - 1] != d->input_dim) {
    return Message("split_weights.shape[", rank - 1, "] (", w[rank - 1],
                   ") must equal the input dimension x.shape[1] (", d->input_dim, ")");
  }
  if (is_split != Shape{d->trees, d->num_internal}) {
    return Message("is_split must have shape [", d->trees, ", ", d->num_internal, "], got ",
                   ShapeString(is_split));
  }
  if (!experts) return Exact(b, {d->trees, d->num_internal}, "split_bias");
  if (d->experts < 1) return "split_weights.shape[2] (the number of experts) must be >= 1";
  const Shape per_expert{d->trees, d->num_internal, d->experts};
  KT_RETURN_IF_ERROR(Exact(b, per_expert, "split_bias"));
  KT_RETURN_IF_ERROR(Exact(r, per_expert, "expert_weights"));
  return Exact(c, {d->trees, d->num_internal}, threshold_name);
}

// The messages of the hard-routing value checks, shared by the CPU scan below
// and the GPU pipeline's status words (core/hard_routing_pipeline.h).
constexpr const char* kRoutingXMessage = "x contains NaN or Inf; hard routing needs finite inputs";
template <typename T>
std::string ExpertWeightsMessage(T value) {
  return checks_internal::ExpertWeightsMessage(value);
}

// split_weights and split_bias always; expert_weights and threshold (named
// `threshold_name`) with noisy-OR splits, else null.
template <typename T>
std::string CheckRoutingValues(const RoutingDims& d, const T* x, const T* split_weights, const T* split_bias,
                               const T* expert_weights, const T* threshold,
                               const char* threshold_name = "threshold") {
  using checks_internal::Finite;
  if (!AllFinite(x, d.batch * d.input_dim)) return kRoutingXMessage;
  const int64_t splits = d.trees * d.num_internal;
  KT_RETURN_IF_ERROR(Finite(split_weights, splits * d.experts * d.input_dim, "split_weights"));
  KT_RETURN_IF_ERROR(Finite(split_bias, splits * d.experts, "split_bias"));
  KT_RETURN_IF_ERROR(Finite(threshold, splits, threshold_name));
  if (expert_weights != nullptr) {
    const int64_t n = d.trees * d.num_internal * d.experts;
    KT_RETURN_IF_ERROR(checks_internal::ExpertWeights(expert_weights, n));
  }
  return "";
}

// Loss-augmented inference: x [batch, input_dim], split_weights
// [2**depth - 1, input_dim], split_bias [2**depth - 1], leaf_values
// [2**depth, K]; labels [batch] (log loss) or targets [batch, K] (squared).
inline std::string CheckLossAugmentedShapes(bool log_loss, const Shape& x, const Shape& w,
                                            const Shape& b, const Shape& theta, const Shape& y,
                                            LossAugmentedDims* d) {
  using namespace checks_internal;
  KT_RETURN_IF_ERROR(Rank(x, 2, "x", "[batch, input_dim]"));
  KT_RETURN_IF_ERROR(Rank(w, 2, "split_weights", "[2**depth - 1, input_dim]"));
  d->batch = x[0];
  d->input_dim = x[1];
  d->num_internal = w[0];
  KT_RETURN_IF_ERROR(PerfectDepth(d->num_internal, "split_weights.shape[0]", &d->depth));
  if (w[1] != d->input_dim) {
    return Message("split_weights.shape[1] (", w[1], ") must equal the input dimension x.shape[1] (",
                   d->input_dim, ")");
  }
  if (b != Shape{d->num_internal}) {
    return Message("split_bias must have shape [", d->num_internal, "], got ", ShapeString(b));
  }
  if (!(theta.size() == 2 && theta[0] == d->num_internal + 1 && theta[1] >= 1)) {
    return Message("leaf_values must have shape [", d->num_internal + 1, ", K >= 1], got ",
                   ShapeString(theta));
  }
  d->classes = theta[1];
  if (log_loss && y != Shape{d->batch}) {
    return Message("labels must have shape [", d->batch, "] for loss='log', got ", ShapeString(y));
  }
  if (!log_loss && y != Shape{d->batch, d->classes}) {
    return Message("targets must have shape [", d->batch, ", ", d->classes,
                   "] for loss='squared', got ", ShapeString(y));
  }
  return "";
}

template <typename T, typename TL>
std::string CheckLossAugmentedValues(const LossAugmentedDims& d, bool log_loss, const T* x,
                                     const T* w, const T* b, const T* theta, const TL* y) {
  using checks_internal::Message;
  if (!AllFinite(x, d.batch * d.input_dim)) {
    return "x contains NaN or Inf; loss-augmented inference needs finite inputs";
  }
  if (!AllFinite(w, d.num_internal * d.input_dim) || !AllFinite(b, d.num_internal)) {
    return "split_weights or split_bias contain NaN or Inf";
  }
  if (!AllFinite(theta, (d.num_internal + 1) * d.classes)) return "leaf_values contain NaN or Inf";
  if (log_loss) {
    for (int64_t i = 0; i < d.batch; ++i) {
      const int64_t label = static_cast<int64_t>(y[i]);
      if (label < 0 || label >= d.classes) {
        return Message("labels must lie in [0, ", d.classes, "), got labels[", i, "] = ", label);
      }
    }
  } else if (!AllFinite(y, d.batch * d.classes)) {
    return "targets contain NaN or Inf";
  }
  return "";
}

// Pruned probabilistic routing: x [batch, input_dim]; oblique splits
// split_weights [trees, 2**depth - 1, input_dim], split_bias and gamma
// [trees, 2**depth - 1]; noisy-OR splits split_weights [trees, 2**depth - 1,
// experts, input_dim], split_bias and expert_weights [trees, 2**depth - 1,
// experts], rate0 and steepness [trees, 2**depth - 1]; is_split [trees,
// 2**depth - 1]. `splits` holds the split inputs in that order. Fills *d
// (units excepted).
inline std::string CheckPrunedRoutingShapes(bool experts, const Shape& x, const std::vector<Shape>& splits,
                                            const Shape& is_split, PrunedRoutingDims* d) {
  using namespace checks_internal;
  const size_t count = experts ? 5 : 3;
  if (splits.size() != count) return Message("expected ", count, " split inputs, got ", splits.size());
  RoutingDims r;
  KT_RETURN_IF_ERROR(CheckRoutingShapes(experts, x, splits[0], splits[1], is_split,
                                        experts ? splits[2] : Shape{}, experts ? splits[3] : Shape{},
                                        &r, "rate0"));
  d->batch = r.batch;
  d->input_dim = r.input_dim;
  d->trees = r.trees;
  d->num_internal = r.num_internal;
  d->experts = r.experts;
  d->depth = r.depth;
  return Exact(splits.back(), {r.trees, r.num_internal}, experts ? "gamma (the steepness)" : "gamma");
}

// leaf_values [trees, 2 * num_internal + 1, units] (one row per heap position);
// sets d->units.
inline std::string CheckPrunedLeafValues(const Shape& v, PrunedRoutingDims* d) {
  using namespace checks_internal;
  const int64_t positions = 2 * d->num_internal + 1;
  if (!(v.size() == 3 && v[0] == d->trees && v[1] == positions)) {
    return Message("leaf_values must have shape [", d->trees, ", ", positions,
                   ", units] (one row per heap position), got ", ShapeString(v));
  }
  d->units = v[2];
  return "";
}

// The values of leaf_values (after CheckPrunedLeafValues set d.units).
template <typename T>
std::string CheckPrunedLeafValueData(const PrunedRoutingDims& d, const T* leaf_values) {
  return checks_internal::Finite(leaf_values, d.trees * (2 * d.num_internal + 1) * d.units, "leaf_values");
}

// A [batch, trees, units] input (grad_output, weights); units < 0: any. Sets d->units.
inline std::string CheckPerPair(const Shape& t, const char* name, PrunedRoutingDims* d) {
  using namespace checks_internal;
  if (!(t.size() == 3 && t[0] == d->batch && t[1] == d->trees && (d->units < 0 || t[2] == d->units))) {
    return Message(name, " must have shape [", d->batch, ", ", d->trees, ", ",
                   d->units < 0 ? std::string("units") : std::to_string(d->units), "], got ",
                   ShapeString(t));
  }
  d->units = t[2];
  return "";
}

// `splits` holds the split inputs in the order of CheckPrunedRoutingShapes
// (oblique: weights, bias, gamma; experts: weights, bias, expert_weights,
// rate0, steepness); each must be finite, expert_weights also >= 0.
template <typename T>
std::string CheckPrunedRoutingValues(const PrunedRoutingDims& d, const T* x, bool experts,
                                     const T* const* splits, double threshold) {
  using checks_internal::Finite;
  using checks_internal::Message;
  if (!(std::isfinite(threshold) && threshold >= 0.0 && threshold < 1.0)) {
    return Message("threshold must be in [0, 1), got ", threshold);
  }
  if (!AllFinite(x, d.batch * d.input_dim)) return "x contains NaN or Inf; pruned routing needs finite inputs";
  const int64_t nodes = d.trees * d.num_internal;
  KT_RETURN_IF_ERROR(Finite(splits[0], nodes * d.experts * d.input_dim, "split_weights"));
  KT_RETURN_IF_ERROR(Finite(splits[1], nodes * d.experts, "split_bias"));
  if (experts) {
    KT_RETURN_IF_ERROR(Finite(splits[3], nodes, "rate0"));
    KT_RETURN_IF_ERROR(Finite(splits[4], nodes, "gamma (the steepness)"));
  } else {
    KT_RETURN_IF_ERROR(Finite(splits[2], nodes, "gamma"));
  }
  const T* expert_weights = experts ? splits[2] : nullptr;
  if (expert_weights != nullptr) {
    const int64_t n = d.trees * d.num_internal * d.experts;
    KT_RETURN_IF_ERROR(checks_internal::ExpertWeights(expert_weights, n));
  }
  return "";
}

// The E-step's own inputs (PrunedEmStatistics): leaf_values, the leaves'
// class distributions [trees, positions, classes] (sets d->units = classes),
// finite and >= 0, labels [batch] in [0, classes) and sample_weight [batch],
// finite and >= 0.
template <typename T>
std::string CheckEmInputs(const Shape& leaf_values, const Shape& labels, const Shape& sample_weight,
                          const T* leaf_data, const int32_t* label_values, const T* weight_values,
                          PrunedRoutingDims* d) {
  using namespace checks_internal;
  if (auto m = CheckPrunedLeafValues(leaf_values, d); !m.empty()) return m;
  if (d->units < 1) return "leaf_values must have at least one class (leaf_values.shape[2] >= 1)";
  if (auto m = Exact(labels, {d->batch}, "labels"); !m.empty()) return m;
  if (auto m = Exact(sample_weight, {d->batch}, "sample_weight"); !m.empty()) return m;
  const int64_t n = d->trees * (2 * d->num_internal + 1) * d->units;
  for (int64_t i = 0; i < n; ++i) {
    if (!(std::isfinite(leaf_data[i]) && leaf_data[i] >= T(0))) {
      return Message("leaf_values must be finite and >= 0 (class distributions), got ", leaf_data[i]);
    }
  }
  for (int64_t i = 0; i < d->batch; ++i) {
    if (label_values[i] < 0 || label_values[i] >= d->units) {
      return Message("labels must lie in [0, ", d->units, ") (the classes of leaf_values), got labels[", i, "] = ",
                     label_values[i]);
    }
  }
  for (int64_t i = 0; i < d->batch; ++i) {
    if (!(std::isfinite(weight_values[i]) && weight_values[i] >= T(0))) {
      return Message("sample_weight[", i, "] = ", weight_values[i], " must be finite and >= 0");
    }
  }
  return "";
}

#undef KT_RETURN_IF_ERROR

}  // namespace keras_trees

#endif  // KERAS_TREES_CORE_CHECKS_H_
