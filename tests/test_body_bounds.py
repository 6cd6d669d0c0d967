"""The GPU kernel bodies (custom_ops/core/*_bodies.h) read and write only in
bounds whatever the values they are given: a label outside [0, classes) is
recorded by its check body and replaced by 0 where a body indexes with it, so
no body depends on the check having been read back first. Checked by running
the bodies themselves on bad labels under AddressSanitizer and
UndefinedBehaviorSanitizer (and on good labels, against hand-computed values)."""

import subprocess

import pytest

from tests.conftest import build_cpp_program

PROGRAM = r"""
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>
#include "core/loss_augmented_bodies.h"
#include "core/pruned_routing_bodies.h"
using namespace keras_trees;

// lai::LeafLoss: the log loss of one leaf row at the sample's label.
float LeafLogLoss(int32_t label) {
  std::vector<float> leaf_values = {0.5f, -1.0f, 2.0f};  // one leaf, 3 classes
  std::vector<int32_t> labels = {label};
  lai::LeafLoss<float, int32_t> loss{leaf_values.data(), labels.data(), nullptr, 3, true};
  return loss(0, 0);
}

// pruned::EmCounts: one sample's leaf mass times pi at its label, added at the label.
std::vector<float> EmCountsRow(int32_t label) {
  const int64_t trees = 1, positions = 1, classes = 2;
  std::vector<float> mass = {0.5f}, pi = {0.25f, 0.75f}, scale = {2.0f};
  std::vector<int32_t> labels = {label};
  std::vector<float> partial(classes, -1.0f);
  pruned::EmCounts<float> body{trees, positions, classes, 0, 1, 1, mass.data(), pi.data(), labels.data(),
                               scale.data(), partial.data()};
  body(0);
  return partial;
}

// pruned::LeafMassWalk with E-step values: a depth-1 tree, one sample.
float PairValue(int32_t label) {
  PrunedRoutingDims d;
  d.batch = 1; d.input_dim = 1; d.trees = 1; d.num_internal = 1; d.units = 2; d.depth = 1;
  std::vector<float> w = {1.0f}, b = {0.0f}, gamma = {1.0f}, x = {0.0f};
  bool is_split[1] = {true};
  pruned::Splits<float> sp;
  sp.weights = w.data(); sp.bias = b.data(); sp.gamma = gamma.data();
  std::vector<float> mass(3, 0.0f), pi = {0.f, 0.f, 0.1f, 0.2f, 0.3f, 0.4f};  // [positions 3, classes 2]
  std::vector<int32_t> labels = {label};
  float pair = -1.0f;
  pruned::LeafMassWalk<float> body{d, sp, x.data(), is_split, 0.0f, 0, 1, mass.data(), pi.data(), labels.data(),
                                   &pair};
  body(0);
  return pair;
}

int main() {
  const float lse = std::log(std::exp(0.5f) + std::exp(-1.0f) + std::exp(2.0f));
  const std::vector<float> row = EmCountsRow(1);
  const bool good = std::fabs(LeafLogLoss(2) - (lse - 2.0f)) < 1e-5f && row[0] == 0.0f &&
                    std::fabs(row[1] - 0.5f * 0.75f * 2.0f) < 1e-6f &&
                    std::fabs(PairValue(1) - (0.5f * 0.2f + 0.5f * 0.4f)) < 1e-6f;
  // Bad labels: any finite value, no access out of bounds (the sanitizers abort).
  float bad = 0.0f;
  for (int32_t label : {3, -1, 1000000, -2147483647 - 1}) {
    bad += LeafLogLoss(label);
    const std::vector<float> r = EmCountsRow(label);
    bad += r[0] + r[1] + PairValue(label);
  }
  std::printf("good %d bad finite %d\n", (int)good, (int)std::isfinite(bad));
  return 0;
}
"""


@pytest.mark.slow
def test_bodies_index_in_bounds_with_bad_labels(tmp_path):
    binary = build_cpp_program(tmp_path, "bounds", PROGRAM, [
        "-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
        "-fopenmp-simd", "-Wall", "-Werror"])
    run = subprocess.run([str(binary)], capture_output=True, text=True, env={"ASAN_OPTIONS": "detect_leaks=0"})
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == ["good", "1", "bad", "finite", "1"], run.stdout + run.stderr[-2000:]
