"""Kernel-level profile of the CUDA pipelines, for Nsight Compute on a lent GPU.

Hinge forest fwd+bwd (100 trees, depth 10, 100 inputs, 26 outputs, batch
4096), hard routing fwd (100 oblique trees, depth 10, 64 inputs, batch
1024), the Tree Ensemble Layer fwd+bwd at initialization (20 trees of depth 8,
64 inputs, 10 outputs, batch 4096: the 5-7x slower-than-dense row of the first
H200 run) and pruned routing fwd+bwd (10 trees of depth 10, 16 inputs, 26
classes, batch 1000, threshold 1e-4: the finetune benchmark's --quick shape),
the last two with benchmarks/gpu_speed.py's inputs: one warm-up call each
(compilation), then ``--calls`` timed calls, each waited for. Under ncu, every
kernel (the library's, CUB's sorts and XLA's own fusions between them):

    ncu --metrics gpu__time_duration.sum --print-summary per-kernel python tests/gpu/gpu_profile.py

Prints the wall time per call (host included) too, so the gap between the sum
of the kernels and the call shows the launch and synchronization overhead.
"""

import argparse
import os
import sys
import time

import numpy as np

os.environ.setdefault("KERAS_BACKEND", "jax")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=3)
    args = parser.parse_args(argv)
    import jax

    from keras_trees import ops as tree_ops

    rng = np.random.default_rng(0)
    batch, trees, depth, features, units = 4096, 100, 10, 100, 26
    n = 2**depth - 1
    x = jax.device_put(rng.normal(size=(batch, features)).astype(np.float32))
    t = jax.device_put(rng.normal(size=(trees, n)).astype(np.float32))
    f = jax.device_put(rng.integers(0, features, size=(trees, n)).astype(np.int32))
    w = jax.device_put(rng.normal(size=(trees, 2**depth, units)).astype(np.float32))
    cot = jax.device_put(rng.normal(size=(batch, trees, units)).astype(np.float32))

    @jax.jit
    def hinge(x, t, w):
        out, vjp = jax.vjp(lambda x, t, w: tree_ops.hinge_forest(x, t, f, w), x, t, w)
        return out, vjp(cot)

    rb, rp = 1024, 64
    xr = jax.device_put(rng.normal(size=(rb, rp)).astype(np.float32))
    wr = jax.device_put(rng.normal(size=(trees, n, rp)).astype(np.float32) / 8)
    br = jax.device_put(rng.normal(size=(trees, n)).astype(np.float32))
    split = jax.device_put(np.ones((trees, n), bool))
    route = jax.jit(lambda x, w, b: tree_ops.hard_route(x, w, b, split))

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks"))
    import gpu_speed

    tel = dict(family="tel", state="init", batch=4096, trees=20, depth=8, features=64, units=10, gamma=1.0)
    tel_sets, tel_shared = gpu_speed.tel_inputs(tel, rng, smoke=False)
    pruned = dict(family="pruned", batch=1000, trees=10, depth=10, features=16, units=26, gamma=2.0)
    pruned_sets, pruned_shared = gpu_speed.pruned_inputs(pruned, rng)

    for name, fn, fargs in (("hinge forest fwd+bwd, batch 4096", hinge, (x, t, w)),
                            ("hard routing fwd, batch 1024", route, (xr, wr, br)),
                            ("tree ensemble layer fwd+bwd, batch 4096", gpu_speed.tel_step(1.0),
                             (*tel_sets[0], *tel_shared)),
                            ("pruned routing fwd+bwd, batch 1000", gpu_speed.pruned_step(1e-4),
                             (*pruned_sets[0], *pruned_shared))):
        jax.block_until_ready(fn(*fargs))
        times = []
        for _ in range(args.calls):
            start = time.perf_counter()
            jax.block_until_ready(fn(*fargs))
            times.append((time.perf_counter() - start) * 1e3)
        print(f"{name}: {', '.join(f'{v:.3f}' for v in times)} ms per call (wall, host included)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
