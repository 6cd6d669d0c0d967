// Portable pieces of hard routing (see core/hard_routing.h for the topology,
// the split forms and the layouts): the dimensions, and the kernel bodies that
// the GPU runs (custom_ops/cuda/) and that the CPU launcher runs as their exact
// emulation (core/launch_cpu.h). The CPU engine (core/hard_routing.cc) keeps
// its own SIMD loops. See core/portable.h for the rules that keep CPU and GPU
// bit-identical.
#ifndef KERAS_TREES_CORE_HARD_ROUTING_BODIES_H_
#define KERAS_TREES_CORE_HARD_ROUTING_BODIES_H_

#include <cstdint>

#include "core/portable.h"

namespace keras_trees {

struct RoutingDims {
  int64_t batch = 0;
  int64_t input_dim = 0;
  int64_t trees = 0;
  int64_t num_internal = 0;  // 2**depth - 1
  int64_t experts = 1;       // HardRouteExperts only
  int depth = 0;
};

namespace routing {

// Status words of one call (read back by core/hard_routing_pipeline.h): each
// holds the smallest flat index of an offending element, or portable::kNone.
enum Status : int {
  kBadX = 0,
  kBadWeights,
  kBadBias,
  kBadExpertWeights,  // not finite or < 0
  kBadThreshold,
  kOverflow,          // pair index whose path met a non-finite split value
  kStatusWords
};

// The lanes that share one (sample, tree) walk on the GPU: about four
// elements of each split row per lane (a power of two from 4 to 32). A walk
// waits on one dependent row read per level, so narrower groups (more pairs
// per warp) put more reads in flight: input_dim 64 -> 16 lanes, two pairs
// per warp. The CPU emulation sums in the same order (portable::GroupDot).
inline int Lanes(int64_t input_dim) {
  int lanes = 4;
  while (lanes < portable::kWarp && int64_t{4} * lanes < input_dim) lanes *= 2;
  return lanes;
}

// One (sample, tree) pair per group of `lanes` lanes (launched with
// exec.ForGroups(n, lanes, ...)), item = t * batch + s (tree-major:
// neighbouring groups walk one tree, so the split rows of its top levels are
// read once for many samples), writing pair i = s * trees + t: the walk from
// the root, one split value per level, right iff v > 0 (NaN goes left), until
// a position that is not a split. Oblique splits (expert_weights null):
// v = <w, x> + b. Noisy-OR splits: v = sum_k r_k softplus(<w_k, x> + b_k) -
// threshold, experts in order. Each dot product is split over the group's
// lanes (portable::GroupDot: the row of w and of x read coalesced, a fixed
// butterfly), so every lane of the group holds the same v and takes the same
// branch; the group's leader lane writes.
template <typename T>
struct Walk {
  RoutingDims d;
  const T* x;
  const T* split_weights;
  const T* split_bias;
  const T* expert_weights;  // null: oblique splits
  const T* threshold;
  const bool* is_split;
  int32_t* node;
  T* path_values;  // [batch, trees, depth] or null
  unsigned long long* status;
  int lanes;  // Lanes(input_dim)
  KT_HOST_DEVICE T SplitValue(int64_t split, const T* xs) const {
    const int64_t p = d.input_dim;
    if (expert_weights == nullptr) return portable::GroupDot(split_weights + split * p, xs, p, lanes) + split_bias[split];
    const int64_t k = d.experts;
    T s = T(0);
    for (int64_t e = 0; e < k; ++e) {
      const T z = portable::GroupDot(split_weights + (split * k + e) * p, xs, p, lanes) + split_bias[split * k + e];
      s = portable::Fma(expert_weights[split * k + e], portable::Softplus(z), s);
    }
    return s - threshold[split];
  }
  KT_HOST_DEVICE void operator()(int64_t item) const {
    int64_t t, s;
    portable::DivMod(item, d.batch, &t, &s);
    const int64_t i = s * d.trees + t;
    const T* xs = x + s * d.input_dim;
    const bool* mt = is_split + t * d.num_internal;
    const bool leader = portable::GroupLeader(lanes);
    T* path = path_values != nullptr && leader ? path_values + i * d.depth : nullptr;
    int64_t n = 0;
    int level = 0;
    bool finite = true;
    while (n < d.num_internal) {
      // The split value is computed before is_split is known (every position
      // below num_internal has its row): the two reads of a level are then in
      // flight together instead of one after the other. A position that is
      // not a split ends the walk and its value is dropped.
      const bool split = mt[n];
      const T v = SplitValue(t * d.num_internal + n, xs);
      if (!split) break;
      finite = finite && portable::IsFinite(v);
      if (path != nullptr) path[level] = v;
      n = v > T(0) ? 2 * n + 2 : 2 * n + 1;
      ++level;
    }
    if (!leader) return;
    if (path != nullptr) {
      for (int l = level; l < d.depth; ++l) path[l] = T(0);
    }
    node[i] = static_cast<int32_t>(n);
    if (!finite) portable::AtomicMin(status + kOverflow, static_cast<unsigned long long>(i));
  }
};

}  // namespace routing

}  // namespace keras_trees

#endif  // KERAS_TREES_CORE_HARD_ROUTING_BODIES_H_
