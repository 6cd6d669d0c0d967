"""One backend-neutral optimizer step on a custom loss (not public).

Layers that train outside ``model.fit`` (greedy growth, refinement) need the
same thing on every backend: minimize ``loss_fn(*args)`` over some Keras
variables with a Keras optimizer. `make_train_step` builds that step:

* TensorFlow: ``tf.function`` + ``tf.GradientTape``. Under a
  ``tf.distribute`` strategy (its scope entered, cross-replica context) the step
  runs in every replica with ``strategy.run`` on the *same* arguments, the loss
  is scaled by ``1 / num_replicas_in_sync`` so that the optimizer's summed
  gradients equal the single-device gradients, and the returned loss is the
  replicas' sum (the unscaled loss). Passing the full batch to every replica
  keeps batch-level objectives (entropies of soft counts, which do not split
  over samples) exact.
* JAX: ``jax.jit`` of a pure function: every variable read by ``loss_fn``
  (``trainable_variables`` and ``state_variables``) enters as an argument
  through a ``keras.StatelessScope``, the update is
  ``optimizer.stateless_apply``, and the new values are assigned back to the
  variables after the call. Variables are never captured as constants, so
  later ``assign`` calls are seen by the next step without retracing.
* PyTorch: eager ``torch.autograd.grad`` and ``optimizer.apply``.

Gradients that do not exist (a variable the loss does not depend on) are
zeros. TensorFlow, JAX and torch are imported only inside the functions.

`distribution_scope` enters the ``tf.distribute`` strategy that owns a
model's variables (when the caller has not), so code that trains outside
``model.fit`` also works when it is called outside the strategy's scope.
"""

import contextlib

import keras

__all__ = ["distribution_scope", "make_train_step"]


def distribution_scope(variables):
    """Context manager for creating the optimizer and running the steps of ``variables``.

    On TensorFlow, when the variables were created under a ``tf.distribute``
    strategy whose scope is not active, this enters that scope (optimizer
    variables are then mirrored like the model's, and the step runs in every
    replica). Otherwise, and on JAX and PyTorch, it does nothing.
    """
    if keras.backend.backend() != "tensorflow":
        return contextlib.nullcontext()
    import tensorflow as tf

    for v in variables:
        strategy = getattr(getattr(v, "value", v), "_distribute_strategy", None)
        if strategy is None:
            continue
        if tf.distribute.has_strategy():  # a scope (or replica context) the caller chose
            return contextlib.nullcontext()
        return strategy.scope()
    return contextlib.nullcontext()


def make_train_step(loss_fn, trainable_variables, optimizer, state_variables=()):
    """Returns ``step(*args) -> loss`` doing one optimizer step on ``loss_fn(*args)``.

    Args:
        loss_fn: ``loss_fn(*args)`` returns a scalar loss computed with
            ``keras.ops`` from the arguments and the variables (read as
            attributes, e.g. ``layer.kernel``). It may assign to
            ``state_variables`` (e.g. a seed generator); those updates are kept.
        trainable_variables: the Keras variables to optimize.
        optimizer: a Keras optimizer; built on ``trainable_variables`` here if
            it is not built yet (it must not be built on other variables). Under
            ``tf.distribute`` create it (and call this function) inside the
            strategy's scope.
        state_variables: every other Keras variable ``loss_fn`` reads (e.g.
            ``layer.non_trainable_variables``; passing ``layer.variables`` is
            fine, duplicates of trainable ones are ignored). Only JAX needs them
            (``jax.jit`` would otherwise freeze their current values into the
            compiled step); list them on every backend.

    Returns:
        ``step(*args)``: runs one update and returns the loss before the update
        as a backend scalar (``float(step(...))`` works on every backend).
        ``args`` are NumPy arrays or tensors; on JAX and TensorFlow the step is
        compiled once per distinct argument shape.

        ``step.many(stacked, shared, count)``: ``count`` updates in one call,
        the i-th on ``loss_fn(*[a[i] for a in stacked], *shared)``, in order:
        the same updates as ``count`` calls of ``step`` (up to the rounding of
        a differently compiled program), without a Python round trip per step
        (TensorFlow: a ``tf.while_loop``; JAX: a ``fori_loop``; PyTorch: a
        Python loop). The arrays of ``stacked`` have a leading dimension of at
        least ``count`` (rows past ``count`` are ignored: padding them to one
        size compiles one program for every count); returns the ``count``
        losses as a NumPy float64 vector. Under ``tf.distribute`` it makes the
        ``count`` calls of ``step``.

    Example:

    >>> import keras, numpy as np
    >>> w = keras.Variable(np.zeros(2, "float32"))
    >>> step = make_train_step(lambda t: keras.ops.sum((w - t) ** 2), [w], keras.optimizers.SGD(0.25))
    >>> for _ in range(20):
    ...     _ = step(np.array([1.0, -2.0], "float32"))
    >>> np.round(keras.ops.convert_to_numpy(w), 3).tolist()
    [1.0, -2.0]
    """
    trainable = list(trainable_variables)
    seen = {id(v) for v in trainable}
    state = []
    for v in state_variables:
        if id(v) not in seen:
            seen.add(id(v))
            state.append(v)
    if not getattr(optimizer, "built", False):
        optimizer.build(trainable)
    backend = keras.backend.backend()
    if backend == "tensorflow":
        return _tensorflow_step(loss_fn, trainable, optimizer)
    if backend == "jax":
        return _jax_step(loss_fn, trainable, optimizer, state)
    if backend == "torch":
        step = _torch_step(loss_fn, trainable, optimizer)
        step.many = _python_many(step)
        return step
    raise ValueError(
        f"training outside model.fit needs the tensorflow, jax or torch Keras backend, not {backend!r} "
        "(the numpy and openvino backends cannot compute gradients)"
    )


def _tensorflow_step(loss_fn, trainable, optimizer):
    import tensorflow as tf

    def replica_step(*args):
        context = tf.distribute.get_replica_context()
        replicas = 1 if context is None else context.num_replicas_in_sync
        with tf.GradientTape() as tape:
            loss = loss_fn(*args)
            scaled = loss / replicas if replicas > 1 else loss
        grads = tape.gradient(scaled, trainable)
        grads = [tf.zeros_like(v) if g is None else g for g, v in zip(grads, trainable)]
        optimizer.apply(grads, trainable)
        return scaled

    # Without AutoGraph: the losses are keras.ops code with no tensor-dependent
    # Python control flow (their checks are graph assertions), and AutoGraph's
    # conversion of the convex polytope tree's stump objective took about 5 s
    # of every ConvexPolytopeTreeClassifier fit on 5,000 rows (a new layer per
    # fit traces its step again).
    local = tf.function(replica_step, reduce_retracing=True, autograph=False)
    distributed = {}

    def step(*args):
        if tf.distribute.has_strategy() and tf.distribute.in_cross_replica_context():
            strategy = tf.distribute.get_strategy()
            fn = distributed.get(id(strategy))
            if fn is None:
                def run(*a):
                    per_replica = strategy.run(replica_step, args=a)
                    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

                fn = distributed[id(strategy)] = tf.function(run, reduce_retracing=True, autograph=False)
            return fn(*args)
        return local(*args)

    step.many = _tensorflow_many(replica_step, step)
    return step


def _tensorflow_many(replica_step, step):
    """``step.many``: ``replica_step`` (one update, outside any replica
    context: the unscaled loss) in a ``tf.while_loop``."""
    import numpy as np
    import tensorflow as tf

    def loop(stacked, shared, count):
        def body(i, losses):
            loss = replica_step(*[a[i] for a in stacked], *shared)
            return i + 1, losses.write(i, tf.cast(loss, tf.float64))

        size = tf.shape(stacked[0])[0]
        _, losses = tf.while_loop(lambda i, _: i < count, body,
                                  [tf.constant(0, tf.int32), tf.TensorArray(tf.float64, size=size)])
        return losses.stack()[:count]

    compiled = tf.function(loop, reduce_retracing=True, autograph=False)

    def many(stacked, shared, count):
        if tf.distribute.has_strategy() and tf.distribute.in_cross_replica_context():
            return _python_many(step)(stacked, shared, count)
        count = int(count)
        losses = compiled(list(stacked), list(shared), tf.constant(count, tf.int32))
        return np.asarray(losses.numpy(), dtype=np.float64)

    return many


def _jax_pure(loss_fn, trainable, optimizer, state):
    import jax

    def pure(train_values, state_values, opt_values, args):
        def compute(values):
            mapping = list(zip(trainable, values)) + list(zip(state, state_values))
            with keras.StatelessScope(state_mapping=mapping) as scope:
                loss = loss_fn(*args)
            return loss, [scope.get_current_value(v) for v in state]

        (loss, new_state), grads = jax.value_and_grad(compute, has_aux=True)(train_values)
        new_train, new_opt = optimizer.stateless_apply(opt_values, grads, train_values)
        return loss, new_train, new_state, new_opt

    return pure


def _jax_many(pure, trainable, state, opt_vars):
    """``step.many``: the step's ``pure`` update in a ``fori_loop``, one compiled call."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    def loop(train_values, state_values, opt_values, stacked, shared, count):
        def body(i, carry):
            train, st, opt, losses = carry
            args = [a[i] for a in stacked] + list(shared)
            loss, train, st, opt = pure(train, st, opt, args)
            return train, st, opt, losses.at[i].set(jnp.asarray(loss, losses.dtype))

        size = stacked[0].shape[0]
        dtype = jnp.float64 if jax.config.jax_enable_x64 else jnp.float32
        carry = (train_values, state_values, opt_values, jnp.zeros((size,), dtype))
        return jax.lax.fori_loop(0, count, body, carry)

    jitted = jax.jit(loop)

    def many(stacked, shared, count):
        count = int(count)
        train, st, opt, losses = jitted([v.value for v in trainable], [v.value for v in state],
                                        [v.value for v in opt_vars], list(stacked), list(shared),
                                        np.int32(count))
        _assign_all(((trainable, train), (state, st), (opt_vars, opt)))
        return np.asarray(losses, dtype=np.float64)[:count]

    return many


def _assign_all(groups):
    """Writes a compiled JAX step's new values back: ``(variables, values)`` pairs."""
    for variables, values in groups:
        for v, value in zip(variables, values):
            v.assign(value)


def _python_many(step):
    import numpy as np

    def many(stacked, shared, count):
        losses = [step(*[a[i] for a in stacked], *shared) for i in range(int(count))]
        return np.asarray([float(keras.ops.convert_to_numpy(loss)) for loss in losses], dtype=np.float64)

    return many


def _jax_step(loss_fn, trainable, optimizer, state):
    import jax

    opt_vars = list(optimizer.variables)
    pure = _jax_pure(loss_fn, trainable, optimizer, state)
    jitted = jax.jit(pure)

    def step(*args):
        loss, new_train, new_state, new_opt = jitted(
            [v.value for v in trainable], [v.value for v in state], [v.value for v in opt_vars], args
        )
        _assign_all(((trainable, new_train), (state, new_state), (opt_vars, new_opt)))
        return loss

    step.many = _jax_many(pure, trainable, state, opt_vars)
    return step


def _torch_step(loss_fn, trainable, optimizer):
    import torch

    def step(*args):
        values = [v.value for v in trainable]
        with torch.enable_grad():
            loss = loss_fn(*args)
            if getattr(loss, "requires_grad", False):
                grads = torch.autograd.grad(loss, values, allow_unused=True)
            else:  # the loss depends on none of the variables
                grads = [None] * len(values)
        grads = [torch.zeros_like(x) if g is None else g for g, x in zip(grads, values)]
        optimizer.apply(grads, trainable)
        return loss.detach() if hasattr(loss, "detach") else loss

    return step
