"""Training an ensemble of N independent small networks as one vmapped computation.

    setup = ensemble_training(x, y, loss, num_models=20, batch_size=32,
                              learning_rate=1e-3, mesh=ctx.mesh,
                              init_key=..., train_key=..., batch_key=...)
    stage = TrainStage("nce-d1", identity, num_steps=epochs * setup.steps_per_epoch,
                       log_every=setup.steps_per_epoch)
    state, figures = stage.run(ctx, setup.state, setup.step_fn, setup.batches)

The N models (the 1D comparison of the paper's sec. 4.1 trains 20 per method) are held
as one train state whose parameters are stacked over the models. The objective is the
sum of the N models' losses: the models share no parameter, so each gets exactly its
own gradient, and Adam, being element-wise, trains them independently. One jitted call
runs a whole epoch (a `lax.scan` over its steps) for all N models.

`init_ensemble` lives here rather than in `ebm_jax.models`: the model is the plain
`ToyEnergyMLP`; stacking its parameters over a leading axis is the layout this
training (`make_ensemble_loss`, `make_train_step(stacked=True)`) expects.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from ebm_jax.data.pipeline import HostShard
from ebm_jax import checks
from ebm_jax.energy import BatchedEnergy, batch_loss
from ebm_jax.models import ToyEnergyMLP
from ebm_jax.train.state import TrainState, init_train_state
from ebm_jax.train.step import TrainStep, make_mesh, make_train_step


def init_ensemble(key: jax.Array, num_models: int,
                  make_model: Callable[..., nnx.Module] = ToyEnergyMLP):
    """(graphdef, parameters stacked over `num_models` independently initialised
    nets); model j is initialised from `split(key, num_models)[j]`."""
    checks.int_at_least("num_models", num_models, 1)
    graphdef, _ = nnx.split(make_model(rngs=nnx.Rngs(0)))

    def init(k):
        return nnx.state(make_model(rngs=nnx.Rngs(params=k)), nnx.Param)

    return graphdef, jax.vmap(init)(jax.random.split(key, num_models))


@functools.lru_cache(maxsize=16)
def energy_fn(graphdef) -> Callable:
    """energy(params, x, y) -> f(x, y) for the network of `graphdef` (one model). The
    same function for equal graphdefs, so that functions jitted over it (the grid
    scores of `ebm_jax.eval.density`) compile once per process."""

    def energy(params, x, y):
        return nnx.merge(graphdef, params)(x, y)

    return energy


@functools.lru_cache(maxsize=16)
def energy_many_fn(graphdef) -> Callable:
    """many(params, x, ys) -> f(x, y) for every row of ys (one x), the batched form of
    `energy_fn(graphdef)`: the model's `many` method where it has one (as
    `ToyEnergyMLP.many`), else its `__call__` on all rows at once."""

    def many(params, x, ys):
        model = nnx.merge(graphdef, params)
        fn = getattr(model, "many", None)
        return fn(x, ys) if fn is not None else model(x, ys)

    return many


def _chain_weights(graphdef, params) -> dict:
    """The fused Langevin chain's arrays of the network (`ToyEnergyMLP.chain_weights`)."""
    return nnx.merge(graphdef, params).chain_weights()


def bind_energy(graphdef, params) -> BatchedEnergy:
    """The energy of one model with `params` for the losses of `ebm_jax.energy`: f(x, y),
    its batched form over the targets of one example, and the fused chain's arrays where
    the network gives them (`BatchedEnergy`)."""
    has = hasattr(type(nnx.merge(graphdef, params)), "chain_weights")  # at tracing
    return BatchedEnergy(partial(energy_fn(graphdef), params),
                         partial(energy_many_fn(graphdef), params),
                         chain_weights=partial(_chain_weights, graphdef, params) if has
                         else None)


def make_ensemble_loss(graphdef, loss: Callable) -> Callable:
    """`loss_fn(model, batch, key)` for `ebm_jax.train`: the model holds parameters
    stacked over the ensemble, the batch is (x, y, w) of shape (B, N, 1), (B, N, 1),
    (B, N) (example-major, so that examples shard over devices), w weighs padding 0,
    and optionally a fourth entry, {name: (B,)}: the loss's run-time hyperparameters
    (`make_loss(..., runtime=...)`), one value repeated over the examples, given to
    `loss` as scalars.

    Returns the sum of the N models' batch losses (see the module docstring) and their
    mean and max as metrics. Model j's key is `fold_in(step key, j)`.
    """
    def loss_fn(model, batch, key):
        params = nnx.state(model, nnx.Param)
        x, y, w, *rest = batch
        values = {k: jnp.max(v) for k, v in rest[0].items()} if rest else {}
        bound = partial(loss, **values) if values else loss
        n = w.shape[1]
        keys = jax.vmap(lambda j: jax.random.fold_in(key, j))(jnp.arange(n))

        def one(p, xm, ym, wm, k):
            return batch_loss(bound, bind_energy(graphdef, p), xm, ym, k, wm)

        losses = jax.vmap(one, in_axes=(0, 1, 1, 1, 0))(params, x, y, w, keys)
        return jnp.sum(losses), {"mean_model_loss": jnp.mean(losses),
                                 "max_model_loss": jnp.max(losses)}

    return loss_fn


@functools.partial(jax.jit, static_argnums=(2, 3, 4))
def _epoch_order(key, epoch, n: int, num_models: int, pad: int):
    """(N, n + pad) example indices of an epoch: model j's permutation, padded by
    repeating its first `pad` indices."""
    k = jax.random.fold_in(key, epoch)
    perms = jax.vmap(lambda j: jax.random.permutation(jax.random.fold_in(k, j), n))(
        jnp.arange(num_models))
    return jnp.concatenate([perms, perms[:, :pad]], axis=1)


def make_epoch_batches(x, y, key: jax.Array, num_models: int, batch_size: int,
                       shard: HostShard | None = None, loss_args=None):
    """(`batches(step)` for `fit`, steps per epoch). `batches(step)` is the whole epoch
    that starts at `step` (a multiple of the steps per epoch), stacked as (steps, B, N,
    ...). Model j visits the data in the order `permutation(fold_in(fold_in(key,
    epoch), j))`; the last batch is padded with rows of weight 0. With `shard` (process
    p of P), only that process's rows [p B/P, (p+1) B/P) of every batch are built. With
    `loss_args` ({name: number}), every batch carries them as a fourth entry, each
    repeated over (steps, B) in float32 (see `make_ensemble_loss`)."""
    rows = (shard or HostShard()).rows(batch_size)
    x, y = np.asarray(x), np.asarray(y)
    n = x.shape[0]
    steps = math.ceil(n / batch_size)
    pad = steps * batch_size - n
    w = (np.arange(steps * batch_size) < n).astype(np.float32)
    w = np.broadcast_to(w.reshape(steps, batch_size, 1), (steps, batch_size, num_models))
    args = {k: np.full(w[:, rows, 0].shape, v, np.float32)
            for k, v in dict(loss_args or {}).items()}

    def batches(step: int):
        if step % steps:
            raise ValueError(f"step must start an epoch (multiple of {steps}), got {step}")
        order = _epoch_order(key, step // steps, n, num_models, pad)
        idx = np.asarray(order).reshape(num_models, steps, batch_size)
        idx = idx.transpose(1, 2, 0)[:, rows]  # (steps, B / P, N)
        batch = (x[idx], y[idx], np.ascontiguousarray(w[:, rows]))
        return batch + (args,) if args else batch

    return batches, steps


# Bytes of one evaluation of the 10-wide network (about 8 layers of 10 float32
# activations), times 4 for the backward pass and temporaries.
BYTES_PER_EVALUATION = 10 * 8 * 4 * 4


def ensemble_bytes(num_models: int, batch_size: int, num_samples: int,
                   num_train: int) -> int:
    """About the memory one training step of an ensemble holds: the activations of
    num_models x batch_size x (num_samples + 1) network evaluations (M samples and the
    label), and an epoch of batches (x, y, weights for every model). For the checks
    made before training (`ebm_jax.checks.fits_in_memory`)."""
    evaluations = int(num_models) * int(batch_size) * (int(num_samples) + 1)
    padded = math.ceil(int(num_train) / int(batch_size)) * int(batch_size)
    return evaluations * BYTES_PER_EVALUATION + padded * int(num_models) * 3 * 4


class EnsembleTraining(NamedTuple):
    """What `TrainStage.run` (or `fit`) needs to train an ensemble."""

    graphdef: Any  # of one model; `energy_fn(graphdef)` evaluates it
    state: TrainState  # parameters stacked over the models
    step_fn: TrainStep  # one call = one epoch (a scan over its steps)
    batches: Callable[[int], Any]  # batches(step) -> the epoch starting at step
    steps_per_epoch: int


def ensemble_training(
    x,
    y,
    loss: Callable,
    *,
    num_models: int,
    init_key: jax.Array,
    train_key: jax.Array,
    batch_key: jax.Array,
    batch_size: int = 32,
    learning_rate: float = 1e-3,
    mesh=None,
    make_model: Callable[..., nnx.Module] = ToyEnergyMLP,
    loss_args=None,
    step_fn: TrainStep | None = None,
) -> EnsembleTraining:
    """Everything to train `num_models` nets with Adam on (x, y) with a bound
    per-example `loss` (`ebm_jax.energy.make_loss`), the batch sharded over the
    devices of `mesh` (default one device): initial state, the jitted epoch step, and
    the epoch batches. Checks the data (finite, same length, shape (n, d)).

    The data are arguments of the step, never constants in it, and so are `loss_args`
    ({name: number}, the loss's run-time hyperparameters): trainings that differ only
    in them (two datasets of one method) can share one compiled step. `step_fn` is
    such a step, the `step_fn` of an earlier `ensemble_training` with the same loss
    (but its run-time values), model, sizes, learning rate and mesh, used as it is."""
    x = jnp.asarray(checks.finite_array("x", x), jnp.float32)
    y = jnp.asarray(checks.finite_array("y", y), jnp.float32)
    checks.same_batch("x", x, "y", y)
    if x.ndim != 2 or y.ndim != 2:
        raise ValueError(f"x and y must have shape (n, d), got {x.shape} and {y.shape}")
    num_models = checks.int_at_least("num_models", num_models, 1)
    batch_size = checks.int_at_least("batch_size", batch_size, 1)
    checks.positive("learning_rate", learning_rate)

    graphdef, params = init_ensemble(init_key, num_models, make_model)
    single, _, rest = nnx.split(make_model(rngs=nnx.Rngs(0)), nnx.Param, ...)
    optimizer = optax.adam(learning_rate)
    state = init_train_state(params, rest, optimizer, train_key)
    # each process builds only its rows of every batch (the stage's global_batches=False)
    batches, steps = make_epoch_batches(x, y, batch_key, num_models, batch_size,
                                        shard=HostShard.of_jax_process(),
                                        loss_args=loss_args)
    mesh = make_mesh(1) if mesh is None else mesh
    if step_fn is None:
        step_fn = make_train_step(single, make_ensemble_loss(graphdef, loss), optimizer,
                                  mesh, steps_per_call=steps, stacked=True)
    elif step_fn.steps_per_call != steps or step_fn.mesh != mesh:
        raise ValueError(f"step_fn runs {step_fn.steps_per_call} steps per call on "
                         f"{step_fn.mesh}; this training needs {steps} on {mesh}")
    return EnsembleTraining(graphdef, state, step_fn, batches, steps)


__all__ = ["BYTES_PER_EVALUATION", "EnsembleTraining", "bind_energy", "energy_fn",
           "energy_many_fn", "ensemble_bytes",
           "ensemble_training", "init_ensemble", "make_ensemble_loss",
           "make_epoch_batches"]
