// The logistic function of eight values at once: right = sigmoid(u) and
// left = sigmoid(-u) = 1 - right, each computed without cancellation as
// 1 / (1 + e) and e / (1 + e) with e = exp(-|u|). With AVX2/FMA (float) the
// exponential is a vectorized Cephes-style polynomial (relative error about
// 2e-7, within float32 rounding of std::exp) and the eight lanes are computed
// together instead of as eight chains of a library call and a division;
// otherwise std::exp per lane. Deterministic: each lane's result depends on
// its own input only. Framework-free; see core/common.h.
#ifndef KERAS_TREES_CORE_LOGISTIC8_H_
#define KERAS_TREES_CORE_LOGISTIC8_H_

#include <cmath>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace keras_trees {

template <typename T>
inline void Logistic8(const T* u, T* right, T* left) {
  for (int q = 0; q < 8; ++q) {
    const T e = std::exp(-std::abs(u[q]));
    const T big = T(1) / (T(1) + e);
    const T small = e * big;
    right[q] = u[q] >= T(0) ? big : small;
    left[q] = u[q] >= T(0) ? small : big;
  }
}

#if defined(__AVX2__) && defined(__FMA__)
// exp(x) for x <= 0 (x >= -87.3 keeps the result normal; below it is clamped).
inline __m256 ExpNonPositive8(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.3f));
  // x = n log 2 + r, |r| <= log(2) / 2, log 2 split in two parts for accuracy.
  const __m256 n = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f),
                                                   _mm256_set1_ps(0.5f)));
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i pow2n = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(pow2n));
}

template <>
inline void Logistic8<float>(const float* u, float* right, float* left) {
  const __m256 v = _mm256_loadu_ps(u);
  const __m256 abs = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
  const __m256 e = ExpNonPositive8(_mm256_sub_ps(_mm256_setzero_ps(), abs));
  const __m256 big = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
  const __m256 small = _mm256_mul_ps(e, big);
  const __m256 positive = _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GE_OQ);
  _mm256_storeu_ps(right, _mm256_blendv_ps(small, big, positive));
  _mm256_storeu_ps(left, _mm256_blendv_ps(big, small, positive));
}
#endif

}  // namespace keras_trees

#endif  // KERAS_TREES_CORE_LOGISTIC8_H_
