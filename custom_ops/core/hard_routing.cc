// Hard-routing engine and its two split forms (see core/hard_routing.h).
// Parallel over samples; each output element is written by exactly one range,
// so results do not depend on the thread count.
#include <atomic>
#include <cmath>
#include "core/hard_routing.h"

#include <algorithm>
#include <utility>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace keras_trees {

namespace {

// Samples routed through one tree before moving to the next (per shard).
// 512 samples of 64 float inputs are 128 KiB: with the rows of one tree
// (256 KiB at depth 10) they stay in L2.
constexpr int64_t kChunk = 512;

// Four dot products <w[q], x[q]> of length n at once.
template <typename T>
inline void Dot4(const T* const* w, const T* const* x, int64_t n, T* out) {
  const T* __restrict w0 = w[0];
  const T* __restrict w1 = w[1];
  const T* __restrict w2 = w[2];
  const T* __restrict w3 = w[3];
  const T* __restrict x0 = x[0];
  const T* __restrict x1 = x[1];
  const T* __restrict x2 = x[2];
  const T* __restrict x3 = x[3];
  T s0 = 0, s1 = 0, s2 = 0, s3 = 0;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
  for (int64_t k = 0; k < n; ++k) {
    s0 += w0[k] * x0[k];
    s1 += w1[k] * x1[k];
    s2 += w2[k] * x2[k];
    s3 += w3[k] * x3[k];
  }
  out[0] = s0;
  out[1] = s1;
  out[2] = s2;
  out[3] = s3;
}

// Samples advanced together through one level of one tree.
constexpr int kGroup = 8;
// Levels from which split rows are prefetched: above it the 2**level rows of a
// level are few and stay in cache; below it most rows are read once per chunk.
constexpr int kPrefetchLevel = 6;
// How many groups ahead of the one being evaluated its rows are prefetched.
constexpr int kPrefetchGroups = 2;

// kGroup dot products <w[q], x[q]> of length n (two Dot4 in the generic form).
template <typename T>
inline void DotGroup(const T* const* w, const T* const* x, int64_t n, T* out) {
  Dot4(w, x, n, out);
  Dot4(w + 4, x + 4, n, out + 4);
}

#if defined(__AVX2__) && defined(__FMA__)
// float with AVX2/FMA: eight independent vector accumulators (no serial FMA
// chain), one transpose-and-add reduction for all eight sums, then a scalar
// tail. The summation order is fixed per lane, so a sample's value does not
// depend on which samples share its group.
template <>
inline void DotGroup<float>(const float* const* w, const float* const* x, int64_t n, float* out) {
  __m256 acc[kGroup];
  for (int q = 0; q < kGroup; ++q) acc[q] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    for (int q = 0; q < kGroup; ++q) {
      acc[q] = _mm256_fmadd_ps(_mm256_loadu_ps(w[q] + k), _mm256_loadu_ps(x[q] + k), acc[q]);
    }
  }
  const __m256 t0 = _mm256_hadd_ps(acc[0], acc[1]);
  const __m256 t1 = _mm256_hadd_ps(acc[2], acc[3]);
  const __m256 t2 = _mm256_hadd_ps(acc[4], acc[5]);
  const __m256 t3 = _mm256_hadd_ps(acc[6], acc[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1);  // lanes: sums of halves of acc[0..3]
  const __m256 u1 = _mm256_hadd_ps(t2, t3);  // lanes: sums of halves of acc[4..7]
  const __m256 sums = _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20),
                                    _mm256_permute2f128_ps(u0, u1, 0x31));
  _mm256_storeu_ps(out, sums);
  for (; k < n; ++k) {
    for (int q = 0; q < kGroup; ++q) out[q] += w[q][k] * x[q][k];
  }
}
#endif

// The routing engine shared by both split forms. `split_values(t, node, xr, v)`
// writes the split values of kGroup (sample, node) pairs of tree t:
// v[q] = value of split node[q] at input row xr[q]; a sample goes right iff
// v > 0. Loop order for cache locality: each shard takes a range of samples
// and, chunk by chunk, routes all of them through one tree before the next, so
// the tree's split weights (the rows its paths visit) are reused from cache by
// every sample of the chunk while the chunk's inputs stay in L1/L2. Within a
// tree, samples advance level by level through a compact list of those still
// at a split, kGroup at a time (independent accumulators, so the CPU overlaps
// kGroup dot products instead of waiting on one chain of dependent FMAs; every
// split value goes through the same code, so a sample's result does not depend
// on which samples share its group).
//
// `split_row(t, node)` returns the first byte of split `node`'s parameters and
// `row_bytes` their size: on deep levels, while one group is evaluated, the
// rows of the group after the next are prefetched (kPrefetchGroups ahead),
// which hides the memory latency there (each of their rows is read by only a
// few samples of a chunk).
template <typename T, typename SplitValues, typename SplitRow>
bool RouteForest(const RoutingDims& d, const T* xd, const bool* md, int32_t* nd, T* pd,
                 int64_t cost_per_split, const SplitValues& split_values,
                 const SplitRow& split_row, int64_t row_bytes, const ParallelFor& parallel_for) {
  const int64_t batch = d.batch, p = d.input_dim, trees = d.trees;
  const int64_t num_internal = d.num_internal;
  const int depth = d.depth;
  const int64_t levels = pd != nullptr ? depth : 0;
  const int64_t chunk_size = kChunk;
  const int64_t cost = trees * depth * (cost_per_split + 16);
  std::atomic<bool> finite{true};
  parallel_for(batch, cost, [&](int64_t begin, int64_t end) {
    bool shard_finite = true;
    std::vector<int32_t> node(chunk_size), active(chunk_size), next(chunk_size);
    for (int64_t c0 = begin; c0 < end; c0 += chunk_size) {
      const int64_t count = std::min(chunk_size, end - c0);
      const T* xc = xd + c0 * p;
      for (int64_t t = 0; t < trees; ++t) {
        const bool* mt = md + t * num_internal;
        if (levels) {
          for (int64_t i = 0; i < count; ++i) {
            std::fill_n(pd + ((c0 + i) * trees + t) * levels, levels, T(0));
          }
        }
        int64_t num_active = 0;
        for (int64_t i = 0; i < count; ++i) {
          node[i] = 0;
          if (mt[0]) active[num_active++] = static_cast<int32_t>(i);
        }
        for (int level = 0; level < depth && num_active > 0; ++level) {
          int64_t num_next = 0;
          for (int64_t j = 0; j < num_active; j += kGroup) {
            const int64_t valid = std::min<int64_t>(kGroup, num_active - j);
            const int64_t first = j + kPrefetchGroups * kGroup;
            const int64_t ahead =
                level >= kPrefetchLevel ? std::min<int64_t>(first + kGroup, num_active) : 0;
            for (int64_t a = first; a < ahead; ++a) {
              const char* row = static_cast<const char*>(split_row(t, node[active[a]]));
              for (int64_t off = 0; off < row_bytes; off += 64) __builtin_prefetch(row + off, 0, 1);
            }
            int32_t idx[kGroup], at[kGroup];
            const T* xr[kGroup];
            for (int q = 0; q < kGroup; ++q) {
              idx[q] = active[j + std::min<int64_t>(q, valid - 1)];  // pad with the last
              at[q] = node[idx[q]];
              xr[q] = xc + static_cast<int64_t>(idx[q]) * p;
            }
            T v[kGroup];
            split_values(t, at, xr, v);
            for (int q = 0; q < valid; ++q) {
              const int32_t i = idx[q];
              const int32_t n = node[i];
              const T value = v[q];
              shard_finite &= std::isfinite(value);
              if (levels) pd[((c0 + i) * trees + t) * levels + level] = value;
              const int32_t child = value > T(0) ? 2 * n + 2 : 2 * n + 1;
              node[i] = child;
              if (child < num_internal && mt[child]) next[num_next++] = i;
            }
          }
          std::swap(active, next);
          num_active = num_next;
        }
        for (int64_t i = 0; i < count; ++i) nd[(c0 + i) * trees + t] = node[i];
      }
    }
    if (!shard_finite) finite.store(false, std::memory_order_relaxed);
  });
  return finite.load();
}

}  // namespace

// Oblique splits: v = <split_weights[t, n], x> + split_bias[t, n].
template <typename T>
bool HardRoute(const RoutingDims& d, const T* x, const T* split_weights, const T* split_bias,
               const bool* is_split, int32_t* node, T* path_values,
               const ParallelFor& parallel_for) {
  const int64_t p = d.input_dim, num_internal = d.num_internal;
  auto split_values = [&](int64_t t, const int32_t* at, const T* const* xr, T* v) {
    const T* wt = split_weights + t * num_internal * p;
    const T* wr[kGroup];
    for (int q = 0; q < kGroup; ++q) wr[q] = wt + static_cast<int64_t>(at[q]) * p;
    DotGroup(wr, xr, p, v);
    for (int q = 0; q < kGroup; ++q) v[q] += split_bias[t * num_internal + at[q]];
  };
  auto split_row = [&](int64_t t, int32_t n) -> const void* {
    return split_weights + (t * num_internal + n) * p;
  };
  return RouteForest<T>(d, x, is_split, node, path_values, 2 * p, split_values, split_row,
                 p * static_cast<int64_t>(sizeof(T)), parallel_for);
}

// Noisy-OR (convex polytope) splits with K experts:
// v = sum_k r[t, n, k] * softplus(<w[t, n, k], x> + b[t, n, k]) - threshold[t, n].
template <typename T>
bool HardRouteExperts(const RoutingDims& d, const T* x, const T* split_weights,
                      const T* split_bias, const T* expert_weights, const T* threshold,
                      const bool* is_split, int32_t* node, T* path_values,
                      const ParallelFor& parallel_for) {
  const int64_t p = d.input_dim, num_internal = d.num_internal, k = d.experts;
  auto split_values = [&](int64_t t, const int32_t* at, const T* const* xr, T* v) {
    for (int q = 0; q < kGroup; ++q) {
      const int64_t split = t * num_internal + at[q];
      const T* ws = split_weights + split * k * p;
      const T* bs = split_bias + split * k;
      const T* rs = expert_weights + split * k;
      T s = 0;
      int64_t e = 0;
      for (; e + 4 <= k; e += 4) {  // four experts at once
        const T* wr[4] = {ws + e * p, ws + (e + 1) * p, ws + (e + 2) * p, ws + (e + 3) * p};
        const T* xs[4] = {xr[q], xr[q], xr[q], xr[q]};
        T z[4];
        Dot4(wr, xs, p, z);
        for (int u = 0; u < 4; ++u) s += rs[e + u] * Softplus(z[u] + bs[e + u]);
      }
      for (; e < k; ++e) s += rs[e] * Softplus(Dot(ws + e * p, xr[q], p) + bs[e]);
      v[q] = s - threshold[split];
    }
  };
  auto split_row = [&](int64_t t, int32_t n) -> const void* {
    return split_weights + (t * num_internal + n) * k * p;
  };
  return RouteForest<T>(d, x, is_split, node, path_values, k * (2 * p + 40), split_values, split_row,
                 k * p * static_cast<int64_t>(sizeof(T)), parallel_for);
}

#define KT_INSTANTIATE_HARD_ROUTING(T)                                                        \
  template bool HardRoute<T>(const RoutingDims&, const T*, const T*, const T*, const bool*,   \
                             int32_t*, T*, const ParallelFor&);                               \
  template bool HardRouteExperts<T>(const RoutingDims&, const T*, const T*, const T*,         \
                                    const T*, const T*, const bool*, int32_t*, T*,            \
                                    const ParallelFor&);

KT_INSTANTIATE_HARD_ROUTING(float)
KT_INSTANTIATE_HARD_ROUTING(double)
#undef KT_INSTANTIATE_HARD_ROUTING

}  // namespace keras_trees
