"""The training loop every experiment shares: resume, steps, records, checkpoints.

    state = fit(stage_dir, state, step_fn, batches, num_steps=..., config=...)

- Rerunning the same command continues from the latest complete checkpoint of the stage
  (after Ctrl-C or kill -9), and ends with parameters bitwise equal to an uninterrupted
  run: the batch of step s is `batches(s)`, a pure function of s, and the step's key is
  `fold_in(base key, s)`. `restart=True` deletes the stage's checkpoints and records
  first. A checkpoint of another config is never resumed silently.
- Every `save_every` steps and at the end the state is saved (asynchronously, finished
  before `fit` returns or re-raises); the meta beside it holds the config and the data
  position (the next step).
- Metrics every `log_every` steps to metrics.jsonl; a tqdm bar shows loss and steps/s.
- `start_from=(prefix_dir, prefix_config)`: a stage with no checkpoint of its own starts
  from the last checkpoint of a finished stage that is its prefix (the same run stopped
  at an earlier step: same keys, batches and constant schedule), with that stage's
  metrics, instead of from step 0. Its parameters at `num_steps` then equal those of a
  run from step 0 bit for bit, so training lengths chosen by early stopping cost one
  run of the longest.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from etils import epath
from tqdm.auto import tqdm

from ebm_jax.train.checkpoint import CHECKPOINTS, StageCheckpoints, abstract_like
from ebm_jax.io import atomic_write
from ebm_jax.train.records import (METRICS, RUN_JSON, RunRecords, is_main_process,
                                   read_metrics)
from ebm_jax.train.state import TrainState
from ebm_jax.train.step import TrainStep, replicate, shard_batch


class ConfigMismatchError(ValueError):
    """The stage directory holds checkpoints of a run with another config."""


def _normalise(config: dict) -> dict:
    return json.loads(json.dumps(config, sort_keys=True, default=str))


def reset_stage(stage_dir) -> None:
    """Deletes a stage's checkpoints and records (for --restart); process 0 only."""
    stage_dir = epath.Path(stage_dir)
    if not is_main_process():
        return
    if (stage_dir / CHECKPOINTS).is_dir():
        (stage_dir / CHECKPOINTS).rmtree()
    elif (stage_dir / CHECKPOINTS).exists():
        (stage_dir / CHECKPOINTS).unlink()
    for name in (RUN_JSON, METRICS):
        (stage_dir / name).unlink(missing_ok=True)


def _start_from_prefix(start_from, state, num_steps: int, records: RunRecords):
    """(state, step) of the finished prefix stage `start_from` = (dir, config), whose
    metrics rows become this stage's first rows."""
    prefix_dir, prefix_config = epath.Path(start_from[0]), _normalise(start_from[1])
    prefix = StageCheckpoints(prefix_dir, save_every=1, asynchronous=False)
    try:
        latest = prefix.latest_step()
        if latest is None:
            raise ValueError(f"start_from: {prefix_dir} holds no checkpoint (train that "
                             "stage first)")
        meta = prefix.read_meta(latest)
        if meta.get("config") != prefix_config:
            raise ConfigMismatchError(f"start_from: {prefix_dir} holds checkpoints of "
                                      "another config than the prefix stage's")
        step = int(meta["next_step"])
        if not 1 <= step <= num_steps:
            raise ValueError(f"start_from: {prefix_dir} stopped at step {step}, which is "
                             f"not in [1, num_steps={num_steps}]")
        state, _ = prefix.restore(abstract_like(state), latest)
    finally:
        prefix.close()
    if records.enabled:
        rows = [r for r in read_metrics(prefix_dir) if r["step"] <= step]
        records.dir.mkdir(parents=True, exist_ok=True)
        atomic_write(records.dir / METRICS, "".join(json.dumps(r) + "\n" for r in rows))
    return state, step


def fit(
    stage_dir,
    state: TrainState,
    step_fn: TrainStep,
    batches: Callable[[int], Any],
    *,
    num_steps: int,
    config: dict,
    save_every: int = 100,
    keep: int = 3,
    log_every: int = 10,
    restart: bool = False,
    progress: bool = True,
    description: str = "train",
    on_metrics: Callable[[int, dict], None] | None = None,
    global_batches: bool = False,
    final_meta: Callable[[], dict] | None = None,
    start_from: tuple[Any, dict] | None = None,
) -> TrainState:
    """Trains one stage to `num_steps` steps; see the module docstring.

    `state` is the freshly initialised state (used as is, or as the restore target);
    `batches(s)` returns this process's share of the batch of step s (stacked over
    `steps_per_call` steps when the step scans several), or, with `global_batches`, the
    whole global batch, identical on every process. `final_meta()`, called once the
    last step's metrics are recorded, adds its entries to the last checkpoint's meta
    (what the stage measured, kept with the parameters it describes). `start_from`:
    see the module docstring; its checkpoint must hold `prefix_config` and a step
    <= `num_steps` (a ConfigMismatchError or ValueError naming it otherwise).
    """
    stage_dir = epath.Path(stage_dir)
    per_call = step_fn.steps_per_call
    for name, value in (("num_steps", num_steps), ("save_every", save_every),
                        ("log_every", log_every)):
        if int(value) < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
        if int(value) % per_call:
            raise ValueError(
                f"{name} must be a multiple of steps_per_call={per_call}, got {value}"
            )
    config = _normalise(config)
    if restart:
        reset_stage(stage_dir)
    mesh = step_fn.mesh
    state = replicate(state, mesh)
    records = RunRecords(stage_dir)
    ckpt = StageCheckpoints(stage_dir, save_every=save_every, keep=keep)
    try:
        start = 0
        latest = ckpt.latest_step()
        if latest is not None:
            meta = ckpt.read_meta(latest)
            if meta.get("config") != config:
                old, new = meta.get("config") or {}, config
                diff = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
                raise ConfigMismatchError(
                    f"{stage_dir} holds checkpoints of a run with another config "
                    f"(differs in {diff}); rerun with --restart to start over, or use "
                    "another output directory"
                )
            state, meta = ckpt.restore(abstract_like(state), latest)
            start = int(meta["next_step"])
            records.truncate(start)
            records.start(config, resumed_at=start)
        elif start_from is not None:
            state, start = _start_from_prefix(start_from, state, num_steps, records)
            records.start(config, resumed_at=start)
        else:
            records.start(config)
        if start >= num_steps:
            return state

        bar = tqdm(total=num_steps, initial=start, desc=description, disable=not progress,
                   dynamic_ncols=True, leave=False)
        t_last, s_last = time.perf_counter(), start
        try:
            for s in range(start, num_steps, per_call):
                batch = shard_batch(batches(s), mesh, stacked=step_fn.stacked,
                                    is_global=global_batches)
                state, metrics = step_fn(state, batch)
                # wait for every step: collective loops over fake CPU devices can
                # deadlock otherwise, and a failing step is reported at its own step
                jax.block_until_ready(state)
                done = s + per_call
                bar.update(per_call)
                if done % log_every == 0 or done == num_steps:
                    host = jax.tree.map(lambda a: np.asarray(a), metrics)
                    if step_fn.stacked:
                        host = {k: np.mean(v) for k, v in host.items()}
                    now = time.perf_counter()
                    rate = (done - s_last) / max(now - t_last, 1e-9)
                    t_last, s_last = now, done
                    host = {**host, "steps_per_second": rate}
                    records.log(done, host)
                    bar.set_postfix(loss=f"{float(host['loss']):.4f}", it_s=f"{rate:.1f}")
                meta = {"config": config, "next_step": done, "data": {"next_step": done}}
                if done == num_steps and final_meta is not None:
                    meta.update(final_meta())
                if done % save_every == 0 or done == num_steps:
                    ckpt.save(done, state, meta, force=True)
                if on_metrics is not None and (done % log_every == 0 or done == num_steps):
                    on_metrics(done, host)
        finally:
            bar.close()
        return state
    finally:
        ckpt.close()  # waits for an asynchronous save, also on Ctrl-C and errors
