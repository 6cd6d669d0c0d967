"""Tree Ensemble Layer speed: conditional custom op vs dense soft trees.

Times one training step (forward + backward to the input and every tree
parameter) and inference for 10 trees over 64 inputs with 10 outputs, batch
256, depths 2-10, three ways on identical weights, all compiled
(``tf.function`` / ``jax.jit``), side by side in one run:

* ``op``: the compiled conditional forward/backward pass (smooth-step), as a
  TensorFlow custom op or a JAX XLA FFI call,
* ``dense-smooth``: the keras.ops reference, evaluating every node (smooth-step),
* ``dense-logistic``: the same dense tree with the paper's logistic ``sigmoid(6t)``.

Sparse routing appears once the trees have trained, so every depth is timed at
initialization and again after a short training run (Adam on a synthetic
10-class problem), and the mean number of reachable leaves per sample and tree
is printed beside the times. The paper's target is a training step at least 10x
faster than the dense logistic tree at depth 10; on JAX at least 15x faster
than the jit-compiled dense smooth-step tree.

    python benchmarks/tel_speed.py [--quick | --smoke] [--backend tensorflow jax] [--json PATH]

``--smoke`` (CI): depth 2, 2 training steps, one timed call each.
"""

import statistics
import time

import _data
import _speed
import numpy as np

TREES, DIM, UNITS, BATCH = 10, 64, 10, 256


def make_problem(rng, n=8192):
    x = rng.normal(size=(n, DIM)).astype("float32")
    teacher = rng.normal(size=(DIM, UNITS)).astype("float32")
    y = np.argmax(np.tanh(x @ teacher) + 0.5 * np.sin(x[:, :UNITS] * 2), axis=1)
    return x, y.astype("int32")


def init_params(rng, depth):
    n = 2**depth - 1
    limit = np.sqrt(3.0 / DIM)
    w = rng.uniform(-limit, limit, size=(TREES, n, DIM)).astype("float32")
    b = np.zeros((TREES, n), "float32")
    o = rng.normal(scale=0.05, size=(TREES, n + 1, UNITS)).astype("float32")
    return [w, b, o]


def forward_fn(kind):
    from keras_trees import ops as tree_ops

    if kind == "op":
        return lambda x, w, b, o, training: tree_ops.soft_tree_ensemble(x, w, b, o, 1.0, training=training)
    activation = "smooth_step" if kind == "dense-smooth" else "logistic"

    def dense(x, w, b, o, training):
        with tree_ops.reference_only():
            return tree_ops.soft_tree_ensemble_reference(x, w, b, o, 1.0, activation)

    return dense


def loss_fn(forward):
    import keras

    def loss(x, w, b, o, y):
        logits = forward(x, w, b, o, True)
        return keras.ops.mean(keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True))

    return loss


def make_step(backend, kind):
    forward = forward_fn(kind)
    train_step = backend.value_and_grad(loss_fn(forward), argnums=[0, 1, 2, 3])
    infer = backend.jit(lambda x, w, b, o: forward(x, w, b, o, False))
    return train_step, infer


def train(backend, params, x, y, steps, rng, lr=0.01):
    """Adam on the compiled kernel's gradients (host-side update; not timed)."""
    grad = backend.value_and_grad(loss_fn(forward_fn("op")), argnums=[1, 2, 3])
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    for t in range(1, steps + 1):
        idx = rng.integers(0, len(x), BATCH)
        _, grads = grad(backend.constant(x[idx]), *[backend.constant(p) for p in params], backend.constant(y[idx]))
        for i, g in enumerate(backend.numpy(grads)):
            m[i] = 0.9 * m[i] + 0.1 * g
            v[i] = 0.999 * v[i] + 0.001 * g * g
            params[i] -= lr * (m[i] / (1 - 0.9**t)) / (np.sqrt(v[i] / (1 - 0.999**t)) + 1e-7)


def time_interleaved(backend, fns, repeats, inner):
    """Median seconds per call of each fn, calls interleaved to share the noise."""
    times = {name: [] for name in fns}
    for fn in fns.values():
        backend.block(fn())  # warm-up / tracing
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(inner):
                backend.block(fn())
            times[name].append((time.perf_counter() - start) / inner)
    return {name: statistics.median(v) for name, v in times.items()}


def measure(backend, params, xb, yb, repeats, inner):
    from keras_trees import ops as tree_ops

    kinds = ("op", "dense-smooth", "dense-logistic")
    steps = {k: make_step(backend, k) for k in kinds}
    p = [backend.constant(a) for a in params]
    train_t = time_interleaved(backend, {k: (lambda k=k: steps[k][0](xb, *p, yb)) for k in kinds}, repeats, inner)
    infer_t = time_interleaved(backend, {k: (lambda k=k: steps[k][1](xb, *p)) for k in kinds}, repeats, inner)
    reach = float(tree_ops.mean_reachable_leaves(xb, p[0], p[1], 1.0))
    return train_t, infer_t, reach


def summarize(results):
    _speed.side_by_side(
        results, key=lambda r: (r["depth"], r["state"]),
        label=lambda k: f"{'depth':>5} {'state':>7}" if k is None else f"{k[0]:>5} {k[1]:>7}",
        header=lambda b: f"{b + ' train op':>19} {'x smooth':>8} {'x logist':>8}",
        cell=lambda r: f"{r['train_ms']['op']:>16.2f} ms {r['train_speedup_vs_smooth']:>7.1f}x "
                       f"{r['train_speedup_vs_logistic']:>7.1f}x")


def main():
    parser = _data.arg_parser(__doc__.splitlines()[0])
    _speed.add_backend_argument(parser)
    parser.add_argument("--depths", type=int, nargs="+")
    parser.add_argument("--train-steps", type=int)
    args = parser.parse_args()
    if _speed.run_per_backend(args, summarize):
        return
    backend = _speed.Backend()
    depths = args.depths or ([2] if args.smoke else [2, 4, 6, 8, 10] if args.quick else list(range(2, 11)))
    train_steps = args.train_steps or (2 if args.smoke else 150 if args.quick else 400)
    repeats, inner = (1, 1) if args.smoke else (3, 2) if args.quick else (5, 3)
    rng = np.random.default_rng(0)
    x, y = make_problem(rng)
    xb, yb = backend.constant(x[:BATCH]), backend.constant(y[:BATCH])
    print(f"{TREES} trees, input dim {DIM}, {UNITS} outputs, batch {BATCH}; transition_width 1.0; "
          f"{backend.describe()}; times in ms (median of {repeats}x{inner}); trained {train_steps} Adam steps")
    header = (f"{'depth':>5} {'state':>7} {'leaves':>7} | {'train op':>9} {'smooth':>8} {'logistic':>9}"
              f" {'x smooth':>8} {'x logist':>8} | {'infer op':>8} {'smooth':>8} {'logistic':>9}"
              f" {'x smooth':>8} {'x logist':>8}")
    print(header)
    print("-" * len(header))
    rows = []
    for depth in depths:
        params = init_params(rng, depth)
        for state in ("init", "trained"):
            if state == "trained":
                train(backend, params, x, y, train_steps, rng)
            tr, inf, reach = measure(backend, params, xb, yb, repeats, inner)
            row = {
                "depth": depth, "state": state, "mean_reachable_leaves": reach,
                "train_ms": {k: v * 1e3 for k, v in tr.items()},
                "infer_ms": {k: v * 1e3 for k, v in inf.items()},
                "train_speedup_vs_logistic": tr["dense-logistic"] / tr["op"],
                "train_speedup_vs_smooth": tr["dense-smooth"] / tr["op"],
                "infer_speedup_vs_logistic": inf["dense-logistic"] / inf["op"],
                "infer_speedup_vs_smooth": inf["dense-smooth"] / inf["op"],
            }
            rows.append(row)
            print(f"{depth:>5} {state:>7} {reach:>7.1f} | {tr['op']*1e3:>9.2f} {tr['dense-smooth']*1e3:>8.2f}"
                  f" {tr['dense-logistic']*1e3:>9.2f} {row['train_speedup_vs_smooth']:>7.1f}x"
                  f" {row['train_speedup_vs_logistic']:>7.1f}x | {inf['op']*1e3:>8.2f}"
                  f" {inf['dense-smooth']*1e3:>8.2f} {inf['dense-logistic']*1e3:>9.2f}"
                  f" {row['infer_speedup_vs_smooth']:>7.1f}x {row['infer_speedup_vs_logistic']:>7.1f}x",
                  flush=True)
    deepest = [r for r in rows if r["depth"] == max(depths) and r["state"] == "trained"][0]
    print(f"\ndepth {deepest['depth']} after training: training step {deepest['train_speedup_vs_logistic']:.1f}x "
          f"faster than the dense logistic tree (paper: >10x), inference "
          f"{deepest['infer_speedup_vs_logistic']:.1f}x; {deepest['mean_reachable_leaves']:.1f} reachable "
          f"leaves per sample and tree of {2**deepest['depth']}")
    _data.write_json(args.json, {"benchmark": "tel_speed", "backend": backend.name, "quick": args.quick,
                                 "smoke": args.smoke, "rows": rows})


if __name__ == "__main__":
    main()
