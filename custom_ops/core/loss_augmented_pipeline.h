// Loss-augmented inference as a pipeline of portable bodies
// (core/loss_augmented_bodies.h) on an executor (core/pipeline.h): the GPU
// kernels (custom_ops/cuda/) and their CPU emulation. Value checks as status
// words (the CPU kernels' messages, in their order), the log-sum-exp table of
// the log loss, then the fast search (one thread per sample) or the exact one
// (one block per sample). Returns "" or the error message of the CPU kernels
// (core/checks.h).
//
// The exact search is a block body (lai::Exact), launched with
// exec.ForBlocks (core/pipeline.h).
#ifndef KERAS_TREES_CORE_LOSS_AUGMENTED_PIPELINE_H_
#define KERAS_TREES_CORE_LOSS_AUGMENTED_PIPELINE_H_

#include <cstdint>
#include <string>
#include <type_traits>

#include "core/checks.h"
#include "core/loss_augmented.h"
#include "core/loss_augmented_bodies.h"
#include "core/pipeline.h"

namespace keras_trees {

template <typename T, typename TL, class Exec>
std::string LossAugmentedPipeline(Exec& exec, const LossAugmentedDims& d, bool log_loss, bool fast, const T* x,
                                  const T* split_weights, const T* split_bias, const T* leaf_values,
                                  const TL* labels, int32_t* g_leaf, int32_t* h_leaf, T* score) {
  using namespace lai;
  const int64_t num_leaves = d.num_internal + 1;
  unsigned long long* status = pipeline::NewStatus(exec, kStatusWords);
  pipeline::FiniteChecks<T> checks;
  checks.status = status;
  checks.Add(x, d.batch * d.input_dim, kBadX)
      .Add(split_weights, d.num_internal * d.input_dim, kBadWeights)
      .Add(split_bias, d.num_internal, kBadBias)
      .Add(leaf_values, num_leaves * d.classes, kBadLeafValues);
  if constexpr (std::is_same<TL, T>::value) {
    if (!log_loss) checks.Add(labels, d.batch * d.classes, kBadTargets);
  }
  exec.For(checks.Items(), checks);
  if (log_loss) exec.For(d.batch, LabelCheck<TL>{labels, d.classes, status});
  unsigned long long words[kStatusWords];
  exec.CopyToHost(words, status, sizeof(words));
  if (words[kBadX] != portable::kNone) return "x contains NaN or Inf; loss-augmented inference needs finite inputs";
  if (words[kBadWeights] != portable::kNone || words[kBadBias] != portable::kNone) {
    return "split_weights or split_bias contain NaN or Inf";
  }
  if (words[kBadLeafValues] != portable::kNone) return "leaf_values contain NaN or Inf";
  if (words[kBadLabel] != portable::kNone) {
    const int64_t i = static_cast<int64_t>(words[kBadLabel]);
    TL label = TL(0);
    exec.CopyToHost(&label, labels + i, sizeof(label));
    return checks_internal::Message("labels must lie in [0, ", d.classes, "), got labels[", i,
                                    "] = ", static_cast<int64_t>(label));
  }
  if (words[kBadTargets] != portable::kNone) return "targets contain NaN or Inf";
  if (d.batch == 0) return "";

  // The log-sum-exp of every leaf once per call when the search visits more
  // leaves than there are (the CPU core's rule; the same values either way).
  const bool table = log_loss && (!fast || num_leaves <= d.batch * (d.depth + 1));
  LeafLoss<T, TL> loss{leaf_values, labels, nullptr, d.classes, log_loss};
  if (table) {
    T* lse = exec.template Scratch<T>(num_leaves);
    exec.For(num_leaves, LeafLse<T, TL>{loss, lse});
    loss.lse = lse;
  }
  const SplitValues<T> split{split_weights, split_bias, d.input_dim};
  if (fast) {
    exec.For(d.batch, Fast<T, TL>{d, x, split, loss, g_leaf, h_leaf, score, status});
  } else {
    const int top = d.depth < kTopLevels ? d.depth : kTopLevels;
    exec.ForBlocks(d.batch, Exact<T, TL>{d, x, split, loss, g_leaf, h_leaf, score, top, status});
  }
  // Wait for the kernels (the scratch memory is free for the next call when
  // the pipeline returns) and read the searches' word.
  exec.CopyToHost(words, status, sizeof(words));
  if (words[kOverflow] != portable::kNone) return kSplitValueOverflow;
  return "";
}

}  // namespace keras_trees

#endif  // KERAS_TREES_CORE_LOSS_AUGMENTED_PIPELINE_H_
