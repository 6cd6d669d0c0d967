// The arithmetic that the portable kernel bodies share, written once for the CPU
// (g++) and the GPU (nvcc): every function is KT_HOST_DEVICE and computes the
// same bits on both, so a body run by the CPU launcher (core/launch_cpu.h) is
// the exact emulation of the same body run by a CUDA kernel (custom_ops/cuda/).
//
// What makes the bits agree:
// * no library call whose result differs between glibc and CUDA's libdevice:
//   exp and log are the polynomial approximations below (Cephes' expf/logf
//   and exp/log), built only from +, -, *, fused multiply-add, comparisons
//   and exponent-bit arithmetic, which IEEE 754 rounds identically everywhere;
// * explicit Fma wherever a fused multiply-add is meant, and no implicit
//   contraction elsewhere: the portable translation units are compiled with
//   -ffp-contract=off (g++) and --fmad=false (nvcc);
// * sums in a defined order (Dot: four interleaved partial sums, combined as
//   (s0 + s1) + (s2 + s3), then the tail).
//
// This header includes only <cmath>, <cstdint> and <cstring>, which nvcc
// accepts in device code; nothing here allocates, throws or touches a
// framework.
#ifndef KERAS_TREES_CORE_PORTABLE_H_
#define KERAS_TREES_CORE_PORTABLE_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__CUDACC__)
#define KT_HOST_DEVICE __host__ __device__
#else
#define KT_HOST_DEVICE
#endif
// Full unrolling of a loop with a constant trip count, in device code (the
// host compilers' own pragmas differ; they unroll such loops at -O3 anyway).
#if defined(__CUDA_ARCH__)
#define KT_UNROLL _Pragma("unroll")
#else
#define KT_UNROLL
#endif

namespace keras_trees {

// Deepest perfect tree any kernel accepts. 2**24 leaves per tree is far beyond
// anything that fits in memory together with its split weights; the Python
// layers refuse much earlier with a memory estimate.
constexpr int kMaxDepth = 24;

// Returns the depth d of a perfect binary tree with `num_internal` = 2**d - 1
// internal nodes, or -1 when `num_internal` is not of that form.
KT_HOST_DEVICE inline int DepthFromInternalNodes(int64_t num_internal) {
  if (num_internal < 1) return -1;
  const int64_t leaves = num_internal + 1;
  if ((leaves & (leaves - 1)) != 0) return -1;
  int d = 0;
  while ((int64_t{1} << d) < leaves) ++d;
  return d;
}

namespace portable {

KT_HOST_DEVICE inline float Abs(float v) { return fabsf(v); }
KT_HOST_DEVICE inline double Abs(double v) { return fabs(v); }
KT_HOST_DEVICE inline float Fma(float a, float b, float c) { return fmaf(a, b, c); }
KT_HOST_DEVICE inline double Fma(double a, double b, double c) { return fma(a, b, c); }

template <typename T>
KT_HOST_DEVICE inline T Min(T a, T b) { return b < a ? b : a; }
template <typename T>
KT_HOST_DEVICE inline T Max(T a, T b) { return a < b ? b : a; }

// x * 0 is 0 for a finite x and NaN for +-Inf and NaN.
template <typename T>
KT_HOST_DEVICE inline bool IsFinite(T v) {
  const T z = v * T(0);
  return z == z;
}

// -1, 0 or +1 (0 for +-0 and NaN).
template <typename T>
KT_HOST_DEVICE inline T Sign(T v) { return T((T(0) < v) - (v < T(0))); }

template <typename To, typename From>
KT_HOST_DEVICE inline To BitCast(From v) {
  static_assert(sizeof(To) == sizeof(From), "BitCast needs equal sizes");
  To out;
  memcpy(&out, &v, sizeof(To));
  return out;
}

// 2**n for an integer n in the normal range, built from its exponent bits.
KT_HOST_DEVICE inline float Pow2(int n, float) { return BitCast<float>(static_cast<uint32_t>(n + 127) << 23); }
KT_HOST_DEVICE inline double Pow2(int n, double) {
  return BitCast<double>(static_cast<uint64_t>(n + 1023) << 52);
}

// Round to the nearest integer, halves up (floor(v + 0.5)), for |v| < 2**30.
template <typename T>
KT_HOST_DEVICE inline int RoundHalfUp(T v) {
  const T shifted = v + T(0.5);
  int n = static_cast<int>(shifted);  // truncates toward zero
  if (T(n) > shifted) --n;            // floor for negative values
  return n;
}

// exp(x). Cephes' expf (float, relative error about 1e-7) and exp (double,
// about 2e-16): x = n log 2 + r with log 2 split in two parts, a polynomial
// (float) or Pade form (double) in r, then the exponent bits of 2**n. Below
// the smallest normal result it returns 0, above the largest +Inf; NaN stays
// NaN.
KT_HOST_DEVICE inline float Exp(float x) {
  if (!(x == x)) return x;
  if (x > 88.72283f) return BitCast<float>(0x7f800000u);
  if (x < -87.33654f) return 0.0f;
  const int n = RoundHalfUp(x * 1.44269504088896341f);
  const float fn = static_cast<float>(n);
  float r = Fma(-fn, 0.693359375f, x);
  r = Fma(-fn, -2.12194440e-4f, r);
  float y = 1.9875691500e-4f;
  y = Fma(y, r, 1.3981999507e-3f);
  y = Fma(y, r, 8.3334519073e-3f);
  y = Fma(y, r, 4.1665795894e-2f);
  y = Fma(y, r, 1.6666665459e-1f);
  y = Fma(y, r, 5.0000001201e-1f);
  y = Fma(y, r * r, r + 1.0f);
  // n may reach 128 (x near the top): scale in two steps.
  return n > 127 ? y * Pow2(n - 1, 0.0f) * 2.0f : y * Pow2(n, 0.0f);
}

KT_HOST_DEVICE inline double Exp(double x) {
  if (!(x == x)) return x;
  if (x > 709.782712893384) return BitCast<double>(0x7ff0000000000000ull);
  if (x < -708.3964185322641) return 0.0;
  const int n = RoundHalfUp(x * 1.4426950408889634073599);
  const double fn = static_cast<double>(n);
  double r = Fma(-fn, 6.93145751953125e-1, x);
  r = Fma(-fn, 1.42860682030941723212e-6, r);
  const double rr = r * r;
  const double p = r * Fma(Fma(1.26177193074810590878e-4, rr, 3.02994407707441961300e-2), rr,
                           9.99999999999999999910e-1);
  const double q = Fma(Fma(Fma(3.00198505138664455042e-6, rr, 2.52448340349684104192e-3), rr,
                           2.27265548208155028766e-1),
                       rr, 2.00000000000000000009e0);
  const double y = 1.0 + 2.0 * (p / (q - p));
  return n > 1023 ? y * Pow2(n - 1, 0.0) * 2.0 : y * Pow2(n, 0.0);
}

// log(x) for a finite x > 0 in the normal range (the only arguments the
// bodies pass). Cephes' logf and log: x = m 2**e with m in [sqrt(1/2),
// sqrt(2)), a polynomial (float) or rational (double) form in m - 1, and
// e log 2 split in two parts.
KT_HOST_DEVICE inline float Log(float x) {
  const uint32_t bits = BitCast<uint32_t>(x);
  int e = static_cast<int>((bits >> 23) & 0xffu) - 126;
  float m = BitCast<float>((bits & 0x007fffffu) | 0x3f000000u);  // [0.5, 1)
  if (m < 0.707106781186547524f) {
    e -= 1;
    m = m + m - 1.0f;
  } else {
    m = m - 1.0f;
  }
  const float z = m * m;
  float y = 7.0376836292e-2f;
  y = Fma(y, m, -1.1514610310e-1f);
  y = Fma(y, m, 1.1676998740e-1f);
  y = Fma(y, m, -1.2420140846e-1f);
  y = Fma(y, m, 1.4249322787e-1f);
  y = Fma(y, m, -1.6668057665e-1f);
  y = Fma(y, m, 2.0000714765e-1f);
  y = Fma(y, m, -2.4999993993e-1f);
  y = Fma(y, m, 3.3333331174e-1f);
  y = y * m * z;
  const float fe = static_cast<float>(e);
  y = Fma(fe, -2.12194440e-4f, y);
  y = Fma(-0.5f, z, y);
  return Fma(fe, 0.693359375f, m + y);
}

KT_HOST_DEVICE inline double Log(double x) {
  const uint64_t bits = BitCast<uint64_t>(x);
  int e = static_cast<int>((bits >> 52) & 0x7ffu) - 1022;
  double m = BitCast<double>((bits & 0x000fffffffffffffull) | 0x3fe0000000000000ull);  // [0.5, 1)
  if (m < 0.70710678118654752440) {
    e -= 1;
    m = m + m - 1.0;
  } else {
    m = m - 1.0;
  }
  const double z = m * m;
  double p = 1.01875663804580931796e-4;
  p = Fma(p, m, 4.97494994976747001425e-1);
  p = Fma(p, m, 4.70579119878881725854e0);
  p = Fma(p, m, 1.44989225341610930846e1);
  p = Fma(p, m, 1.79368678507819816313e1);
  p = Fma(p, m, 7.70838733755885391666e0);
  double q = m + 1.12873587189167450590e1;
  q = Fma(q, m, 4.52279145837532221105e1);
  q = Fma(q, m, 8.29875266912776603211e1);
  q = Fma(q, m, 7.11544750618563894466e1);
  q = Fma(q, m, 2.31251620126765340583e1);
  double y = m * (z * p / q);
  const double fe = static_cast<double>(e);
  y = Fma(fe, -2.121944400546905827679e-4, y);
  y = Fma(-0.5, z, y);
  return Fma(fe, 0.693359375, m + y);
}

// log(1 + u) for u in [0, 1]: log(w) u / (w - 1) with w = 1 + u, which
// cancels the rounding of w (Goldberg), and u itself when w rounds to 1.
template <typename T>
KT_HOST_DEVICE inline T Log1pUnit(T u) {
  const T w = T(1) + u;
  if (w == T(1)) return u;
  return Log(w) * (u / (w - T(1)));
}

// Smooth-step of Hazimeh et al. (2020), Eq. 4, and its derivative: 0 below
// -gamma/2, 1 above gamma/2, the cubic -2 t^3 / gamma^3 + 3 t / (2 gamma) + 1/2
// in between, clamped to [0, 1] so round-off near the ends never leaves the
// interval. One definition for the CPU core and the GPU bodies.
template <typename T>
KT_HOST_DEVICE inline void SmoothStep(T t, T gamma, T* s, T* ds) {
  const T half = gamma * T(0.5);
  if (t <= -half) {
    *s = T(0);
    *ds = T(0);
  } else if (t >= half) {
    *s = T(1);
    *ds = T(0);
  } else {
    const T inv = T(1) / gamma;
    const T u = t * inv;
    const T v = T(-2) * u * u * u + T(1.5) * u + T(0.5);
    *s = Min(T(1), Max(T(0), v));
    *ds = (T(-6) * u * u + T(1.5)) * inv;
  }
}

// softplus(z) = log(1 + exp(z)) = max(z, 0) + log(1 + exp(-|z|)): no overflow.
template <typename T>
KT_HOST_DEVICE inline T Softplus(T z) {
  return Max(z, T(0)) + Log1pUnit(Exp(-Abs(z)));
}

// The logistic function 1 / (1 + exp(-z)), without cancellation for either sign.
template <typename T>
KT_HOST_DEVICE inline T Logistic(T z) {
  const T e = Exp(-Abs(z));
  const T big = T(1) / (T(1) + e);
  return z >= T(0) ? big : e * big;
}

// <a, b> of length n in a defined order: four interleaved partial sums of
// fused multiply-adds (element k goes to sum k mod 4), combined as
// (s0 + s1) + (s2 + s3), then the last n mod 4 elements in order.
template <typename T>
KT_HOST_DEVICE inline T Dot(const T* a, const T* b, int64_t n) {
  T s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t k = 0;
  for (; k + 4 <= n; k += 4) {
    s0 = Fma(a[k], b[k], s0);
    s1 = Fma(a[k + 1], b[k + 1], s1);
    s2 = Fma(a[k + 2], b[k + 2], s2);
    s3 = Fma(a[k + 3], b[k + 3], s3);
  }
  T s = (s0 + s1) + (s2 + s3);
  for (; k < n; ++k) s = Fma(a[k], b[k], s);
  return s;
}

// out[:len] += coeff * row[:len] for a sequence of rows, kBatch rows at a
// time: per tile of kTile elements one read of `out`, the batch's row reads
// all independent, one write. Each element of `out` gets the same fused
// multiply-adds in the same order as row by row, where a GPU thread would
// wait for every element's read-modify-write in turn (the walks of pruned
// routing and the Tree Ensemble Layer spent most of their time there). The
// sums start from 0 (`out` need not be initialized); call
// Flush() after the last Add(), also when nothing was added (it writes the
// zeros then).
template <typename T>
struct RowSum {
  static constexpr int kBatch = 8;
  static constexpr int kTile = 4;
  T* out;
  int64_t len;
  int count = 0;
  bool started = false;  // `out` holds partial sums (else they are 0)
  const T* row[kBatch];
  T coeff[kBatch];

  KT_HOST_DEVICE void Add(T c, const T* r) {
    row[count] = r;
    coeff[count] = c;
    if (++count == kBatch) Flush();
  }

  KT_HOST_DEVICE void Flush() {
    for (int64_t u0 = 0; u0 < len; u0 += kTile) {
      T acc[kTile];
      T v[kBatch][kTile];
      KT_UNROLL
      for (int j = 0; j < kTile; ++j) acc[j] = started && u0 + j < len ? out[u0 + j] : T(0);
      KT_UNROLL
      for (int k = 0; k < kBatch; ++k) {
        KT_UNROLL
        for (int j = 0; j < kTile; ++j) v[k][j] = k < count && u0 + j < len ? row[k][u0 + j] : T(0);
      }
      KT_UNROLL
      for (int k = 0; k < kBatch; ++k) {
        if (k < count) {
          KT_UNROLL
          for (int j = 0; j < kTile; ++j) acc[j] = Fma(coeff[k], v[k][j], acc[j]);
        }
      }
      KT_UNROLL
      for (int j = 0; j < kTile; ++j) {
        if (u0 + j < len) out[u0 + j] = acc[j];
      }
    }
    count = 0;
    started = true;
  }
};

// Cooperative bodies (launched with exec.ForGroups(n, width, body),
// core/pipeline.h): on the GPU a group of `width` lanes (a
// power of two, 1 to 32, aligned within its warp) runs the body for the same
// item, on the CPU one call runs it for all the group's lanes at once. Values
// every lane of a group computes alike (the results of GroupDot, and
// everything derived from them) keep the group's lanes in step;
// GroupLeader(width) picks the one lane that writes. Groups narrower than a
// warp put several items in one warp: more independent reads in flight per
// warp when a walk waits on one dependent read per level.
constexpr int kWarp = 32;

KT_HOST_DEVICE inline bool GroupLeader(int width) {
#if defined(__CUDA_ARCH__)
  return (threadIdx.x & (width - 1)) == 0;
#else
  (void)width;
  return true;
#endif
}

// Lane `lane`'s share of <a, b> in a group of `width` lanes: elements lane,
// lane + width, ... in order, by fused multiply-adds (neighbouring lanes read
// neighbouring elements: coalesced row reads on the GPU).
template <typename T>
KT_HOST_DEVICE inline T LanePartial(const T* a, const T* b, int64_t n, int lane, int width) {
  T s = T(0);
  for (int64_t k = lane; k < n; k += width) s = Fma(a[k], b[k], s);
  return s;
}

// <a, b> of length n split over a group's `width` lanes, in a defined order:
// the width lane partials (LanePartial), then a butterfly: at each of the
// strides width/2, ..., 2, 1 every lane adds its partner's value
// (lane ^ stride, in the same group) to its own. Addition commutes, so both
// partners hold the same sum after each stride and every lane ends with the
// same bits; the CPU computes the same partials and the same rounds. Called by
// every lane of the group (GPU) together; the shuffles name only the group's
// lanes, so the other groups of the warp may be elsewhere.
template <typename T>
KT_HOST_DEVICE inline T GroupDot(const T* a, const T* b, int64_t n, int width) {
#if defined(__CUDA_ARCH__)
  const unsigned lane = threadIdx.x & (kWarp - 1);
  const unsigned mask = width == kWarp ? 0xffffffffu : ((1u << width) - 1u) << (lane & ~unsigned(width - 1));
  T s = LanePartial(a, b, n, static_cast<int>(lane & (width - 1)), width);
  for (int stride = width / 2; stride > 0; stride >>= 1) s = s + __shfl_xor_sync(mask, s, stride);
  return s;
#else
  T p[kWarp];
  for (int lane = 0; lane < width; ++lane) p[lane] = LanePartial(a, b, n, lane, width);
  for (int stride = width / 2; stride > 0; stride >>= 1) {
    T q[kWarp];
    for (int lane = 0; lane < width; ++lane) q[lane] = p[lane] + p[lane ^ stride];
    for (int lane = 0; lane < width; ++lane) p[lane] = q[lane];
  }
  return p[0];
#endif
}

// q = n / divisor and r = n - q * divisor for n >= 0, divisor > 0: in 32-bit
// arithmetic when both fit (a 64-bit division is a long software sequence on
// the GPU, a 32-bit one a few instructions), the same integers either way.
KT_HOST_DEVICE inline void DivMod(int64_t n, int64_t divisor, int64_t* q, int64_t* r) {
  if (((n | divisor) >> 32) == 0) {
    const uint32_t q32 = static_cast<uint32_t>(n) / static_cast<uint32_t>(divisor);
    *q = q32;
    *r = n - static_cast<int64_t>(q32) * divisor;
  } else {
    *q = n / divisor;
    *r = n - *q * divisor;
  }
}

// A label (or id) a body indexes with, in [0, n): `v` where it lies there,
// else 0. A bad value is recorded by its check body; the bodies that index
// with it read and write in bounds whatever it is, so no body depends on the
// checks having been read back before it runs.
template <typename TI>
KT_HOST_DEVICE inline int64_t InRange(TI v, int64_t n) {
  if constexpr (std::is_integral<TI>::value) {
    const int64_t i = static_cast<int64_t>(v);
    return i >= 0 && i < n ? i : 0;
  } else {
    return v >= TI(0) && v < static_cast<TI>(n) ? static_cast<int64_t>(v) : 0;
  }
}

// Integer atomics for the bodies' status words (never for float results: every
// float output element has one writer). The minimum is the same whatever the
// order of the writers, so status words are deterministic too.
KT_HOST_DEVICE inline void AtomicMin(unsigned long long* address, unsigned long long value) {
#if defined(__CUDA_ARCH__)
  atomicMin(address, value);
#else
  unsigned long long seen = __atomic_load_n(address, __ATOMIC_RELAXED);
  while (value < seen &&
         !__atomic_compare_exchange_n(address, &seen, value, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
#endif
}

// The status words a pipeline reads back after its bodies ran: kNone when
// nothing was found, else the smallest flat index of an offending element.
constexpr unsigned long long kNone = ~0ull;

}  // namespace portable
}  // namespace keras_trees

#endif  // KERAS_TREES_CORE_PORTABLE_H_
