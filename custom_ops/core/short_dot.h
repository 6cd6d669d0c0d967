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

}  // namespace keras_trees

#endif  // KERAS_TREES_CORE_SHORT_DOT_H_
