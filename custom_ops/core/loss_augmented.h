// Core of the loss-augmented inference of non-greedy trees (Norouzi et al.
// 2015, Section 6, Eq. 10-13): for each sample, the leaf g maximizing
// g^T v + loss(leaf_values[g], y) exactly over all leaves (fast = false) or over
// the d + 1 leaves one flipped bit from the tree's own path h (fast = true).
// Framework-free; see core/common.h.
//
// Layouts (row-major, T = float or double):
//   x             [batch, input_dim], finite (the caller checks)
//   split_weights [num_internal, input_dim], num_internal = 2**depth - 1; finite
//   split_bias    [num_internal]; finite
//   leaf_values   [num_internal + 1, classes]; finite
//   labels        loss "log": [batch] TL = int32 class ids in [0, classes);
//                 loss "squared": [batch, classes] TL = T targets, finite
//   g_leaf, h_leaf [batch] (int32): leaf indices; score [batch]: the bound
// Parallel over samples; each output element is written by exactly one range,
// so results do not depend on the thread count.
#ifndef KERAS_TREES_CORE_LOSS_AUGMENTED_H_
#define KERAS_TREES_CORE_LOSS_AUGMENTED_H_

#include <cstdint>

#include "core/common.h"

namespace keras_trees {

struct LossAugmentedDims {
  int64_t batch = 0;
  int64_t input_dim = 0;
  int64_t num_internal = 0;  // 2**depth - 1
  int64_t classes = 0;       // K, columns of leaf_values
  int depth = 0;
};

// Instantiated for (T, TL) = (float, int32_t), (double, int32_t), (float, float)
// and (double, double). Returns false when a split value that the search
// reads (every one for the exact search, those on the paths to the d + 1
// candidate leaves for the fast one) is not finite (<w, x> + b overflowed);
// the adapters then raise kSplitValueOverflow (core/common.h).
template <typename T, typename TL>
bool LossAugmentedInference(const LossAugmentedDims& d, bool log_loss, bool fast, const T* x,
                            const T* split_weights, const T* split_bias, const T* leaf_values,
                            const TL* labels, int32_t* g_leaf, int32_t* h_leaf, T* score,
                            const ParallelFor& parallel_for);

}  // namespace keras_trees

#endif  // KERAS_TREES_CORE_LOSS_AUGMENTED_H_
