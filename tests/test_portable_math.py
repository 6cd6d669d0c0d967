"""The portable arithmetic of the GPU kernel bodies (custom_ops/core/portable.h)
against the C library: exp, log, softplus and the logistic function in float32
and float64, over their whole ranges, within a few units in the last place.
The bodies use these instead of libm so that the CPU emulation and the GPU
compute the same bits; this checks that they are also accurate. The program is
compiled as the portable units are (no floating-point contraction)."""

import subprocess

import pytest

from tests.conftest import build_cpp_program

PROGRAM = r"""
#include <cmath>
#include <cstdio>
#include <random>
#include "core/portable.h"
using namespace keras_trees::portable;

template <typename T> double ulps(T got, double want) {
  if (want == 0) return got == 0 ? 0 : 1e30;
  const double eps = sizeof(T) == 4 ? 5.960464477539063e-08 : 1.1102230246251565e-16;
  return std::fabs((double)got - want) / std::fabs(want) / eps;
}

template <typename T> void run(const char* name) {
  std::mt19937_64 g(7);
  const double lo = sizeof(T) == 4 ? -87.0 : -708.0, hi = sizeof(T) == 4 ? 88.0 : 709.0;
  std::uniform_real_distribution<double> arg(lo, hi), exponent(-120.0, 120.0), z(-40.0, 40.0);
  double e_exp = 0, e_log = 0, e_sp = 0, e_lg = 0, e_dot = 0;
  for (int i = 0; i < 200000; ++i) {
    const T x = (T)arg(g);
    e_exp = std::fmax(e_exp, ulps(Exp(x), std::exp((long double)x)));
    const T y = (T)std::exp2(exponent(g));
    e_log = std::fmax(e_log, std::log((long double)y) == 0 ? 0 : ulps(Log(y), std::log((long double)y)));
    const T s = (T)z(g);
    e_sp = std::fmax(e_sp, ulps(Softplus(s), std::log1p(std::exp((long double)s))));
    e_lg = std::fmax(e_lg, ulps(Logistic(s), 1.0L / (1.0L + std::exp(-(long double)s))));
  }
  T a[13], b[13];
  for (int i = 0; i < 13; ++i) { a[i] = (T)(i + 1) / 8; b[i] = (T)(13 - i) / 4; }
  long double want = 0;
  for (int i = 0; i < 13; ++i) want += (long double)a[i] * b[i];
  e_dot = ulps(Dot(a, b, 13), (double)want);
  const bool edges = Exp((T)0) == 1 && Log((T)1) == 0 && std::isinf(Exp((T)1000)) && Exp((T)-1000) == 0 &&
                     std::isnan(Exp((T)NAN)) && Softplus((T)1000) == 1000 && Softplus((T)-1000) == 0 &&
                     Logistic((T)1000) == 1 && Logistic((T)-1000) == 0 && Sign((T)-2) == -1 && !IsFinite((T)INFINITY);
  std::printf("%s %.3f %.3f %.3f %.3f %.3f %d\n", name, e_exp, e_log, e_sp, e_lg, e_dot, (int)edges);
}

int main() { run<float>("float32"); run<double>("float64"); }
"""


@pytest.mark.slow
def test_portable_functions_are_accurate(tmp_path):
    binary = build_cpp_program(tmp_path, "portable_math", PROGRAM, ["-O2", "-ffp-contract=off"])
    out = subprocess.run([str(binary)], check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        name, *errors, edges = line.split()
        exp, log, softplus, logistic, dot = map(float, errors)
        # Units in the last place against long-double libm.
        assert exp <= 3 and log <= 3, line
        assert softplus <= 8 and logistic <= 6 and dot <= 2, line
        assert edges == "1", f"{name}: a special value (0, 1, +-Inf, NaN) comes out wrong"
    assert [line.split()[0] for line in out.splitlines()] == ["float32", "float64"]
