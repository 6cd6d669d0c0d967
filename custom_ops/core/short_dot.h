// Dot products of short vectors (a split's features, a leaf's units) whose
// result the caller waits for: with AVX2/FMA one vector accumulator and a
// tree-shaped horizontal sum (the omp-simd Dot of common.h ends in a chain of
// dependent scalar adds, which dominates when n is 8 to 32). The summation
// order is fixed, so results are the same on every run and thread count.
// Framework-free; see core/common.h.
#ifndef KERAS_TREES_CORE_SHORT_DOT_H_
#define KERAS_TREES_CORE_SHORT_DOT_H_

#include <cstdint>

#include "core/common.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace keras_trees {

template <typename T>
inline T ShortDot(const T* a, const T* b, int64_t n) {
  return Dot(a, b, n);
}

#if defined(__AVX2__) && defined(__FMA__)
template <>
inline float ShortDot<float>(const float* a, const float* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), acc);
  }
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  float r = _mm_cvtss_f32(s);
  for (; k < n; ++k) r += a[k] * b[k];
  return r;
}

template <>
inline double ShortDot<double>(const double* a, const double* b, int64_t n) {
  __m256d acc = _mm256_setzero_pd();
  int64_t k = 0;
  for (; k + 4 <= n; k += 4) {
    acc = _mm256_fmadd_pd(_mm256_loadu_pd(a + k), _mm256_loadu_pd(b + k), acc);
  }
  __m128d s = _mm_add_pd(_mm256_castpd256_pd128(acc), _mm256_extractf128_pd(acc, 1));
  s = _mm_add_sd(s, _mm_unpackhi_pd(s, s));
  double r = _mm_cvtsd_f64(s);
  for (; k < n; ++k) r += a[k] * b[k];
  return r;
}
#endif

// Eight dot products out[q] = <w[q], x[q]> of length n at once: independent
// accumulators, so the CPU overlaps them; each lane's order is fixed, so a
// value does not depend on which others share its group.
template <typename T>
inline void ShortDot8(const T* const* w, const T* const* x, int64_t n, T* out) {
  for (int q = 0; q < 8; ++q) out[q] = ShortDot(w[q], x[q], n);
}

#if defined(__AVX2__) && defined(__FMA__)
template <>
inline void ShortDot8<float>(const float* const* w, const float* const* x, int64_t n, float* out) {
  __m256 acc[8];
  for (int q = 0; q < 8; ++q) acc[q] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    for (int q = 0; q < 8; ++q) {
      acc[q] = _mm256_fmadd_ps(_mm256_loadu_ps(w[q] + k), _mm256_loadu_ps(x[q] + k), acc[q]);
    }
  }
  const __m256 t0 = _mm256_hadd_ps(acc[0], acc[1]);
  const __m256 t1 = _mm256_hadd_ps(acc[2], acc[3]);
  const __m256 t2 = _mm256_hadd_ps(acc[4], acc[5]);
  const __m256 t3 = _mm256_hadd_ps(acc[6], acc[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1);
  const __m256 u1 = _mm256_hadd_ps(t2, t3);
  _mm256_storeu_ps(out, _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20),
                                      _mm256_permute2f128_ps(u0, u1, 0x31)));
  for (; k < n; ++k) {
    for (int q = 0; q < 8; ++q) out[q] += w[q][k] * x[q][k];
  }
}
#endif

}  // namespace keras_trees

#endif  // KERAS_TREES_CORE_SHORT_DOT_H_
