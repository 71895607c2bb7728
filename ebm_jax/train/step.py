"""One jitted, data-parallel train step for every experiment.

    mesh = make_mesh()                                # all devices on a `data` axis
    step = make_train_step(graphdef, loss_fn, optimizer, mesh)
    state = replicate(state, mesh)
    state, metrics = step(state, shard_batch(batch, mesh))

`loss_fn(model, batch, key) -> loss` or `(loss, metrics dict)` sees an `nnx.Module`
merged from the state. The batch is sharded along its leading axis over the mesh's
`data` axis and the parameters are replicated; the compiler inserts the all-reduce that
averages the gradients. The state is donated.

`per_device=True` runs `loss_fn` under `jax.shard_map` instead, on each device's shard
of the batch, for losses that need per-device semantics (MoCo's shuffled batch norm):
there the key is folded with the device index, the loss and metrics are averaged over
devices with `lax.pmean`, and so are the running batch statistics (`nnx.BatchStat`),
which per-device batch norm leaves different on each device. Other state the loss
changes (a queue, a pointer) must be made identical on every device by the loss itself
(`lax.all_gather` over `DATA_AXIS`).

`steps_per_call=n` scans n steps in one call over batches stacked on a leading axis of
length n (each leaf has shape (n, global batch, ...)); metrics then come back per step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import optax
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from ebm_jax.train.state import TrainState

DATA_AXIS = "data"


def make_mesh(num_devices: int | None = None, devices=None) -> jax.sharding.Mesh:
    """A 1-D mesh over `num_devices` devices (default: all, over every process) with the
    axis `data`. The axis type is Auto, so that model code needs no sharding annotations.
    """
    devices = list(jax.devices() if devices is None else devices)
    n = len(devices) if num_devices is None else int(num_devices)
    if not 1 <= n <= len(devices):
        raise ValueError(f"num_devices must be in [1, {len(devices)}], got {num_devices}")
    return jax.make_mesh(
        (n,), (DATA_AXIS,), axis_types=(jax.sharding.AxisType.Auto,), devices=devices[:n]
    )


def replicated(mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def data_sharding(mesh, *, stacked: bool = False) -> NamedSharding:
    """Sharding of a batch leaf: leading axis over `data` (second axis when `stacked`)."""
    return NamedSharding(mesh, P(None, DATA_AXIS) if stacked else P(DATA_AXIS))


def replicate(tree, mesh):
    """Places a pytree (a TrainState) on every device of the mesh."""
    return jax.device_put(tree, replicated(mesh))


def check_batch(batch, mesh, *, stacked: bool = False, name: str = "batch") -> int:
    """Checks that every leaf of a global batch has the same batch size and that it
    divides over the devices; returns the batch size."""
    axis = 1 if stacked else 0
    sizes = set()
    for path, leaf in jax.tree_util.tree_leaves_with_path(batch):
        shape = np.shape(leaf)
        if len(shape) <= axis:
            raise ValueError(
                f"{name}{jax.tree_util.keystr(path)}: needs a batch axis at position {axis}"
                f"{' (after the steps axis)' if stacked else ''}, got shape {shape}"
            )
        sizes.add(shape[axis])
    if len(sizes) != 1:
        raise ValueError(f"{name}: all leaves need the same batch size, got {sorted(sizes)}")
    (size,) = sizes
    n = mesh.shape[DATA_AXIS]
    if size % n:
        raise ValueError(
            f"{name}: batch size {size} is not divisible by the {n} devices of the "
            f"'{DATA_AXIS}' axis; use a multiple of {n}"
        )
    return size


def shard_batch(batch, mesh, *, stacked: bool = False, is_global: bool = False):
    """Assembles the global batch from host data.

    By default `batch` holds this process's rows (with one process: all rows); in a
    multi-host run each process passes its own shard, of batch size global / processes.
    With `is_global=True` every process passes the same whole global batch (small data
    generated identically on each host) and keeps only the rows of its devices.
    """
    sharding = data_sharding(mesh, stacked=stacked)

    def put(a):
        a = np.asarray(a)
        shape = a.shape if is_global else None
        return jax.make_array_from_process_local_data(sharding, a, shape)

    return jax.tree.map(put, batch)


def _device_invariant(rest):
    """Inside shard_map: batch statistics (`nnx.BatchStat`), which per-device batch
    norm leaves different on each device, are averaged over the devices. Any other
    state must already be identical on every device (the loss's job)."""
    if not isinstance(rest, nnx.State):
        return rest
    stats, other = nnx.split_state(rest, nnx.BatchStat, ...)
    stats = jax.tree.map(lambda x: jax.lax.pmean(x, DATA_AXIS), stats)
    return nnx.merge_state(stats, other)


def _split_loss_output(out) -> tuple[jax.Array, dict]:
    if isinstance(out, tuple):
        loss, metrics = out
        return loss, dict(metrics)
    return out, {}


class TrainStep:
    """`step(state, batch) -> (state, metrics)`; see the module docstring."""

    def __init__(self, jitted, mesh, steps_per_call: int, stacked: bool):
        self.jitted = jitted
        self.mesh = mesh
        self.steps_per_call = steps_per_call
        self.stacked = stacked

    def __call__(self, state: TrainState, batch):
        check_batch(batch, self.mesh, stacked=self.stacked)
        return self.jitted(state, batch)

    def lower(self, state: TrainState, batch):
        check_batch(batch, self.mesh, stacked=self.stacked)
        return self.jitted.lower(state, batch)


def make_train_step(
    graphdef: nnx.GraphDef,
    loss_fn: Callable[[nnx.Module, Any, jax.Array], Any],
    optimizer: optax.GradientTransformation,
    mesh: jax.sharding.Mesh,
    *,
    steps_per_call: int = 1,
    per_device: bool = False,
    donate: bool = True,
    stacked: bool | None = None,
    fold_device_key: bool = True,
    trainable=nnx.Param,
) -> TrainStep:
    """Builds the jitted step; see the module docstring. `stacked` (default:
    steps_per_call > 1) says whether batches carry the leading steps axis; pass True to
    keep that axis when a call may hold a single step. With `per_device`,
    `fold_device_key=False` hands every device the same step key (for randomness that
    must agree across devices, such as the global permutation of shuffled batch norm;
    fold in `lax.axis_index(DATA_AXIS)` by hand where draws must differ). `trainable`
    is the filter given to `create_train_state`."""
    if int(steps_per_call) < 1:
        raise ValueError(f"steps_per_call must be >= 1, got {steps_per_call}")
    stacked = steps_per_call > 1 if stacked is None else bool(stacked)
    if steps_per_call > 1 and not stacked:
        raise ValueError("stacked=False needs steps_per_call=1")

    def objective(params, rest, batch, key):
        # copy: fresh Variables at this trace level, so that the loss may mutate them
        model = nnx.merge(graphdef, params, rest, copy=True)
        loss, metrics = _split_loss_output(loss_fn(model, batch, key))
        _, _, new_rest = nnx.split(model, trainable, ...)
        return loss, (metrics, new_rest)

    if per_device:
        def local(params, rest, batch, key):
            if fold_device_key:  # each device draws its own randomness for its shard
                key = jax.random.fold_in(key, jax.lax.axis_index(DATA_AXIS))
            loss, (metrics, new_rest) = objective(params, rest, batch, key)
            loss = jax.lax.pmean(loss, DATA_AXIS)
            metrics = jax.lax.pmean(metrics, DATA_AXIS)
            return loss, (metrics, _device_invariant(new_rest))

        objective_fn = jax.shard_map(
            local, mesh=mesh, in_specs=(P(), P(), P(DATA_AXIS), P()), out_specs=P()
        )
    else:
        objective_fn = objective

    def one_step(state: TrainState, batch):
        grad_fn = jax.value_and_grad(objective_fn, has_aux=True)
        (loss, (metrics, rest)), grads = grad_fn(state.params, state.rest, batch, state.rng())
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        new = state.replace(params=params, rest=rest, opt_state=opt_state,
                            step=state.step + 1)
        return new, {"loss": loss, **metrics}

    def step(state: TrainState, batch):
        if not stacked:
            return one_step(state, batch)
        lengths = {leaf.shape[0] for leaf in jax.tree.leaves(batch)}
        if lengths != {steps_per_call}:
            raise ValueError(
                f"batch: with steps_per_call={steps_per_call} every leaf needs a leading "
                f"steps axis of that length, got {sorted(lengths)}"
            )
        return jax.lax.scan(one_step, state, batch)

    jitted = jax.jit(
        step,
        in_shardings=(replicated(mesh), data_sharding(mesh, stacked=stacked)),
        out_shardings=(replicated(mesh), replicated(mesh)),
        donate_argnums=(0,) if donate else (),
    )
    return TrainStep(jitted, mesh, int(steps_per_call), stacked)

