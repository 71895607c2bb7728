"""The train state: everything a step changes, as one pytree.

    state = TrainState(params, rest, opt_state, step, key)

- `params`: the model's trainable variables (an `nnx.State`; by default every
  `nnx.Param`, or what the `trainable` filter selects), what the optimizer updates;
- `rest`: every other model variable (batch-norm statistics, momentum-encoder weights,
  queues, ...), updated by the model itself in the forward pass;
- `opt_state`: the optax state of `params`;
- `step`: int32 scalar, the number of steps taken;
- `key`: the run's base PRNG key as raw key data (uint32), so that the state holds only
  plain arrays and checkpoints as such. Step s uses `fold_in(wrap(key), s)`.

The model's structure (`nnx.GraphDef`) is static and kept outside the state; build it
with `create_train_state` and pass it to `make_train_step`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class TrainState:
    params: Any
    rest: Any
    opt_state: Any
    step: jax.Array
    key: jax.Array

    def rng(self) -> jax.Array:
        """The typed key of this state's step: `fold_in(base key, step)`."""
        return jax.random.fold_in(jax.random.wrap_key_data(self.key), self.step)

    def replace(self, **changes) -> "TrainState":
        return dataclasses.replace(self, **changes)


def create_train_state(
    model: nnx.Module, optimizer: optax.GradientTransformation, key: jax.Array,
    trainable=nnx.Param,
) -> tuple[nnx.GraphDef, TrainState]:
    """Splits `model` into (graphdef, TrainState) with a fresh optimizer state.

    `key` is a typed key (`jax.random.key(seed)`); it is stored as its raw key data.
    `trainable` is an NNX filter of what the optimizer updates (default every Param;
    MoCo passes the query encoder's Params only, so that its momentum encoder, also made
    of Params, is left to the EMA). Give `make_train_step` the same filter.
    """
    graphdef, params, rest = nnx.split(model, trainable, ...)
    return graphdef, init_train_state(params, rest, optimizer, key)


def init_train_state(params, rest, optimizer: optax.GradientTransformation,
                     key: jax.Array) -> TrainState:
    """A step-0 TrainState from already split model state (e.g. parameters stacked over
    an ensemble by `jax.vmap`)."""
    if not jnp.issubdtype(jnp.asarray(key).dtype, jax.dtypes.prng_key):
        raise TypeError(f"key must be a typed PRNG key (jax.random.key), got {key!r}")
    return TrainState(
        params=params,
        rest=rest,
        opt_state=optimizer.init(params),
        step=jnp.zeros((), jnp.int32),
        # a copy: the step donates the state, which must not free the caller's key
        key=jnp.array(jax.random.key_data(key), copy=True),
    )


def merge_model(graphdef: nnx.GraphDef, state: TrainState) -> nnx.Module:
    """The Flax NNX module of a state (a fresh object; the state is not aliased)."""
    return nnx.merge(graphdef, state.params, state.rest)
