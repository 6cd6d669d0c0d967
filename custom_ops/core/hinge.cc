// Forward and backward passes of random hinge trees and ferns (see
// core/hinge.h). Each output element has one writer and a fixed summation
// order, so results are identical on every run and for every thread count.
#include "core/hinge.h"

#include <algorithm>
#include <atomic>

namespace keras_trees {

namespace {

template <typename T, bool kFern>
void ForwardRange(int64_t begin, int64_t end, const HingeDims& d, const T* xd, const T* td,
                  const int32_t* fd, const T* wd, T* od, int32_t* leafd, T* margind,
                  int32_t* vertexd) {
  const int64_t k = d.units;
  // Tree-major inside the shard: one tree's vertices stay in L1 while the
  // shard's samples stream past them.
  for (int64_t m = 0; m < d.trees; ++m) {
    const T* tm = td + m * d.vertices;
    const int32_t* fm = fd + m * d.vertices;
    const T* wm = wd + m * d.leaves * k;
    for (int64_t s = begin; s < end; ++s) {
      const int64_t idx = s * d.trees + m;
      int32_t leaf, vertex;
      T margin;
      if (kFern) {
        TraverseHingeFern(xd + s * d.features, tm, fm, d.depth, &leaf, &margin, &vertex);
      } else {
        TraverseHingeTree(xd + s * d.features, tm, fm, d.depth, &leaf, &margin, &vertex);
      }
      leafd[idx] = leaf;
      margind[idx] = margin;
      vertexd[idx] = vertex;
      const T a = std::abs(margin);
      const T* wl = wm + leaf * k;
      T* o = od + idx * k;
      for (int64_t j = 0; j < k; ++j) o[j] = a * wl[j];
    }
  }
}

}  // namespace

template <typename T>
void HingeForestForward(const HingeDims& d, bool fern, const T* x, const T* thresholds,
                        const int32_t* feature_indices, const T* leaf_weights, T* output,
                        int32_t* leaf, T* margin, int32_t* vertex,
                        const ParallelFor& parallel_for) {
  // Cycles per sample: a dependent load chain per level, then the leaf copy.
  const int64_t cost = d.trees * (d.depth * 8 + 2 * d.units + 10);
  parallel_for(d.batch, cost, [&](int64_t begin, int64_t end) {
    if (fern) {
      ForwardRange<T, true>(begin, end, d, x, thresholds, feature_indices, leaf_weights, output,
                            leaf, margin, vertex);
    } else {
      ForwardRange<T, false>(begin, end, d, x, thresholds, feature_indices, leaf_weights, output,
                             leaf, margin, vertex);
    }
  });
}

template <typename T>
bool HingeForestBackward(const HingeDims& d, const T* grad_output, const T* grad_margin,
                         const int32_t* feature_indices, const T* leaf_weights,
                         const int32_t* leaf, const T* margin, const int32_t* vertex,
                         T* workspace, T* grad_x, T* grad_thresholds, T* grad_leaf_weights,
                         const ParallelFor& parallel_for) {
  // dL/dr* per (sample, tree), shared by both phases.
  T* coeff = workspace;
  const int64_t k = d.units;

  // Phase 1, parallel over samples: dL/dr* and grad_x.
  std::atomic<bool> bad{false};
  parallel_for(d.batch, d.trees * (2 * k + 12), [&](int64_t begin, int64_t end) {
    for (int64_t s = begin; s < end; ++s) {
      T* gxs = grad_x != nullptr ? grad_x + s * d.features : nullptr;
      if (gxs != nullptr) std::fill(gxs, gxs + d.features, T(0));
      for (int64_t m = 0; m < d.trees; ++m) {
        const int64_t idx = s * d.trees + m;
        const int32_t l = leaf[idx], v = vertex[idx];
        if (l < 0 || l >= d.leaves || v < 0 || v >= d.vertices) {
          bad = true;
          return;
        }
        const int32_t feature = feature_indices[m * d.vertices + v];
        if (feature < 0 || feature >= d.features) {
          bad = true;
          return;
        }
        const T r = margin[idx];
        const T sign = T((T(0) < r) - (r < T(0)));
        const T c = sign * Dot(grad_output + idx * k, leaf_weights + (m * d.leaves + l) * k, k) +
                    grad_margin[idx];
        coeff[idx] = c;
        if (gxs != nullptr) gxs[feature] += c;
      }
    }
  });
  if (bad) return false;

  // Phase 2, parallel over trees: threshold and leaf gradients, samples in order.
  parallel_for(d.trees, d.batch * (2 * k + 6) + d.leaves * k + d.vertices,
               [&](int64_t begin, int64_t end) {
                 for (int64_t m = begin; m < end; ++m) {
                   T* gtm = grad_thresholds + m * d.vertices;
                   T* gwm = grad_leaf_weights + m * d.leaves * k;
                   std::fill(gtm, gtm + d.vertices, T(0));
                   std::fill(gwm, gwm + d.leaves * k, T(0));
                   for (int64_t s = 0; s < d.batch; ++s) {
                     const int64_t idx = s * d.trees + m;
                     gtm[vertex[idx]] -= coeff[idx];
                     Axpy(std::abs(margin[idx]), grad_output + idx * k, gwm + leaf[idx] * k, k);
                   }
                 }
               });
  return true;
}

#define KT_INSTANTIATE_HINGE(T)                                                               \
  template void HingeForestForward<T>(const HingeDims&, bool, const T*, const T*,             \
                                      const int32_t*, const T*, T*, int32_t*, T*, int32_t*,   \
                                      const ParallelFor&);                                    \
  template bool HingeForestBackward<T>(const HingeDims&, const T*, const T*, const int32_t*,  \
                                       const T*, const int32_t*, const T*, const int32_t*, T*, \
                                       T*, T*, T*, const ParallelFor&);

KT_INSTANTIATE_HINGE(float)
KT_INSTANTIATE_HINGE(double)
#undef KT_INSTANTIATE_HINGE

}  // namespace keras_trees
