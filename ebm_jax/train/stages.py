"""The stage runner every recipe shares: one run context, named keys, training stages,
cached results and a lock on the work directory.

    with RunContext(workdir, mesh=make_mesh(1), seed=0) as ctx:   # takes the lock
        stage = TrainStage("nce-d1", identity={...}, num_steps=1260, log_every=63)
        state, figures = stage.run(ctx, state, step_fn, batches)
        result = ctx.cached(stage, "eval", identity, lambda: evaluate(...))

- Keys: `ctx.key(stage, purpose)` is `fold_in(fold_in(key(seed), h(stage)), h(purpose))`
  with h a stable 31-bit hash of the name, so every random draw of a run is named and no
  two purposes share a key.
- A stage's directory is `<workdir>/<name>-<hash of its identity>`: the identity holds
  what the stage's result depends on (settings, data fingerprint, seed), never a path,
  so a run resumes wherever the work directory lives and however its path is spelled,
  and two configs that differ get two stages instead of a refusal. Stages that are the
  same in two configs (a shared backbone, a baseline) are trained once.
- `ctx.restart` starts each stage of this run over, once per run.
- The work directory is locked while a run uses it: a second run stops at once with a
  message naming the holder (host, process, command, start time).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

import jax
import numpy as np
from etils import epath

from ebm_jax.config_catalog import duration
from ebm_jax.io import CorruptFileError, atomic_write, content_hash, json_normalised, read_json
from ebm_jax.train.locks import LOCK, RunLock, RunLockedError, process_alive  # noqa: F401 (re-exported)


def stable_hash(name: str) -> int:
    """A 31-bit integer of `name`, the same in every process and Python session."""
    return int.from_bytes(hashlib.sha256(str(name).encode()).digest()[:4], "big") >> 1


@dataclasses.dataclass
class RunContext:
    """What every stage of a run shares: where it writes, the device mesh, the seed,
    restart and progress settings, and whether this process writes (process 0)."""

    workdir: Any
    mesh: Any = None
    seed: int = 0
    restart: bool = False
    progress: bool = True
    writer: bool | None = None
    log: Callable[[str], None] = print
    lock: bool = True
    # the training stages the run will go through, where its recipe can count them
    # (`count_stages`): the progress says "stage i of n" and the run's ETA
    planned_stages: int | None = None
    # settings of the whole run that every stage's result depends on but its recipe's
    # identities do not hold (the matmul precision set away from its default): each
    # stage directory's hash takes them, so stages made without them are not reused
    run_identity: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        from ebm_jax.train.step import make_mesh

        self.workdir = epath.Path(self.workdir)
        if self.mesh is None:
            self.mesh = make_mesh(1)
        if self.writer is None:
            self.writer = jax.process_index() == 0
        if isinstance(self.seed, bool) or not 0 <= int(self.seed) < 2**31:
            raise ValueError(f"seed must be an integer in [0, {2**31 - 1}], got {self.seed}")
        self._lock = RunLock(self.workdir)
        self._restarted: set[str] = set()
        self.current: tuple[str, Any] | None = None  # (stage name, stage dir) in training
        # [the stage directories TrainStage.run has entered (finished ones included;
        # a stage entered again, as an arm reusing it, counts once), the start of the
        # pace (the run's start, then the entry of its first stage to train, so that
        # the one-off work before it, data and proposals, does not count), those of
        # them that were finished before this run (loaded, not trained)]: one list,
        # shared by the copies `with_seed` makes
        self._stages = [set(), time.monotonic(), set()]

    @property
    def stages_started(self) -> int:
        return len(self._stages[0])

    @property
    def stages_reused(self) -> int:
        """The run's stages that were finished before it (loaded, not trained)."""
        return len(self._stages[2])

    def enter_stage(self, stage_dir, finished: bool = False) -> bool:
        """Counts `stage_dir` as one of the run's stages (once, however often it is
        entered); `finished`: it was finished before this run, so it is loaded, and
        its time says nothing of the pace. The first stage entered to train starts the
        pace's clock. A stage this run entered before (trained or loaded then) is not
        counted again, nor as reused when it is entered again finished. Returns whether
        this run enters it for the first time."""
        if str(stage_dir) in self._stages[0]:
            return False
        first = not finished and not (self._stages[0] - self._stages[2])
        self._stages[0].add(str(stage_dir))
        if finished:
            self._stages[2].add(str(stage_dir))
        elif first:
            self._stages[1] = time.monotonic()
        return True

    def stage_place(self) -> str:
        """The current stage's place in the run: "stage i of n" where the recipe
        counted the run's stages, "stage i" otherwise."""
        n = self.planned_stages
        of = "" if n is None or self.stages_started > n else f" of {n}"
        return f"stage {self.stages_started}{of}"

    def stage_label(self, name: str) -> str:
        """`stage_place()` with the stage's name: "stage i of n (name)"."""
        return f"{self.stage_place()} ({name})"

    def eta(self) -> str:
        """The run's remaining time at its pace so far (the seconds since its first
        trained stage began, per stage trained in this run, x the stages left; a resumed
        run's finished stages, loaded in a moment, do not count as trained, nor does the
        work before the first stage), or "" where the stages were not counted or none
        was trained yet."""
        n, done = self.planned_stages, self.stages_started
        trained = len(self._stages[0] - self._stages[2])
        if n is None or trained < 1 or done >= n:
            return ""
        left = (time.monotonic() - self._stages[1]) / trained * (n - done)
        return f"; the other {n - done} stage(s): about {duration(left)} at this pace"

    # -- lifetime
    def __enter__(self) -> RunContext:
        global _LAST
        if self.lock and self.writer:
            self._lock.acquire()
        _LAST = self
        return self

    def __exit__(self, *exc) -> bool:
        self._lock.release()
        return False

    @property
    def num_devices(self) -> int:
        return int(self.mesh.devices.size)

    def with_seed(self, seed: int) -> RunContext:
        """This context with another seed (its keys and `seed_of` draws), sharing the
        work directory, its lock and the record of restarted stages: one of the seeds
        of a run that repeats its stages over several seeds."""
        if isinstance(seed, bool) or not 0 <= int(seed) < 2**31:
            raise ValueError(f"seed must be an integer in [0, {2**31 - 1}], got {seed}")
        global _LAST
        other = copy.copy(self)
        other.seed = int(seed)
        if _LAST is self:  # Ctrl-C names the stage the seed's context is training
            _LAST = other
        return other

    # -- keys
    def key(self, stage: str, purpose: str) -> jax.Array:
        """The key of `purpose` (e.g. "init", "train", "data") in stage `stage`."""
        return self.key_of(self.seed, stage, purpose)

    @staticmethod
    def key_of(seed: int, stage: str, purpose: str) -> jax.Array:
        """`key(stage, purpose)` of a run with seed `seed`, without a context."""
        root = jax.random.key(int(seed))
        return jax.random.fold_in(jax.random.fold_in(root, stable_hash(stage)),
                                  stable_hash(purpose))

    def seed_of(self, stage: str, purpose: str) -> int:
        """A NumPy seed for `purpose` of `stage` (host-side draws: batch orders)."""
        return stable_hash(f"{self.seed}/{stage}/{purpose}")

    # -- directories
    @property
    def digest_cache(self) -> str | None:
        """Where this run caches the digests of the real data's files
        (`ebm_jax.io.file_digests`): `<workdir>/data/file-digests.json`, written by
        process 0 of a local work directory alone (None elsewhere: not cached)."""
        from ebm_jax.io import is_local

        if not self.writer or not is_local(self.workdir):
            return None
        return os.fspath(self.workdir / "data" / "file-digests.json")

    def stage_dir(self, name: str, identity: Mapping, *,
                  host_only: bool = False) -> epath.Path:
        """`<workdir>/<name>-<hash of identity>`; the run's own identity (its matmul
        precision) joins the hash unless the stage is `host_only`: computed by NumPy on
        the host, with no JAX program (TOP maps), so the same under any precision."""
        if self.run_identity and not host_only:
            identity = {**identity, "run": dict(self.run_identity)}
        return self.workdir / f"{name}-{content_hash(identity, 8)}"

    def should_restart(self, stage_dir) -> bool:
        """True the first time a stage is met in a run with `restart`."""
        key = os.fspath(stage_dir)
        if not self.restart or key in self._restarted:
            return False
        self._restarted.add(key)
        return True

    # -- cached results
    def cached(self, stage_dir, name: str, identity: Mapping,
               compute: Callable[[], dict]) -> dict:
        """`compute()`, cached in `<stage_dir>/<name>.json` for the same identity (and
        recomputed once per run with `restart`). A cache file that cannot be read (cut
        short, garbled, not a cache) counts as missing: it is recomputed, with one line
        through `log`, and replaced atomically."""
        path = epath.Path(stage_dir) / f"{name}.json"
        key = json_normalised(identity)
        fresh = self.should_restart(path)
        if path.exists() and not fresh:
            try:
                cached = read_json(path, what="cached result", fix="recomputing it")
                if not (isinstance(cached, dict) and "result" in cached):
                    raise CorruptFileError(f"cached result {path} is not a cache file "
                                           "(no identity and result); recomputing it")
            except CorruptFileError as error:
                self.log(f"warning: {error}")
                cached = None
            except OSError as error:
                self.log(f"warning: cached result {path} cannot be read ({error}); "
                         "recomputing it")
                cached = None
            if cached is not None and cached.get("identity") == key:
                return cached["result"]
        result = compute()
        if self.writer:
            atomic_write(path, json.dumps({"identity": key, "result": result}, indent=1)
                         + "\n")
        return result


@dataclasses.dataclass(frozen=True)
class StageFigures:
    """What every training stage reports, measured from its metrics.jsonl when it
    finishes and stored with its last checkpoint (`finished_figures`), so that a resumed
    or finished stage reports the same, whatever becomes of metrics.jsonl afterwards."""

    steps: int
    seconds: float  # training seconds summed over the logged intervals
    seconds_per_step: float | None  # median over logged intervals, the first excluded
    compile_seconds: float  # the first interval beyond the median (compilation)
    final_loss: float | None
    finite: bool

    def asdict(self) -> dict:
        return dataclasses.asdict(self)


def stage_figures(stage_dir, num_steps: int, *, finished: bool = False) -> StageFigures:
    """The figures of a stage measured from its metrics.jsonl; with `finished`, the
    rows must reach `num_steps` (a CorruptFileError naming the file otherwise)."""
    from ebm_jax.train.records import read_metrics

    rows = [r for r in read_metrics(stage_dir) if "steps_per_second" in r]
    steps, last = [], 0
    for r in rows:
        steps.append(r["step"] - last)
        last = r["step"]
    per_step = [1.0 / r["steps_per_second"] for r in rows if r["steps_per_second"] > 0]
    seconds = float(sum(n * s for n, s in zip(steps, per_step)))
    median = float(np.median(per_step[1:])) if len(per_step) > 1 else (
        per_step[0] if per_step else None)
    compile_s = 0.0
    if per_step and median is not None:
        compile_s = max(0.0, steps[0] * (per_step[0] - median))
    if finished and (not rows or rows[-1]["step"] != num_steps):
        from ebm_jax.train.records import METRICS

        path = epath.Path(stage_dir) / METRICS
        ends = f"ends at step {rows[-1]['step']}" if rows else "holds no step"
        raise CorruptFileError(
            f"metrics file {path} {ends}, but the stage finished at step {num_steps} "
            "(the file was cut short, edited or removed) and its checkpoint holds no "
            "figures of its own (it finished before they were stored there): its final "
            f"loss and timings are unknown; delete {epath.Path(stage_dir)} to train the "
            "stage again, or rerun with --restart")
    losses = [float(np.mean(r["loss"])) for r in rows if "loss" in r]
    return StageFigures(
        steps=int(num_steps), seconds=seconds, seconds_per_step=median,
        compile_seconds=float(compile_s),
        final_loss=losses[-1] if losses else None,
        finite=bool(losses) and all(math.isfinite(v) for v in losses))


@dataclasses.dataclass(frozen=True)
class TrainStage:
    """One training stage: `fit` in `<workdir>/<name>-<hash(identity)>`, resumed when
    rerun. `identity` is what the result depends on (no paths)."""

    name: str
    identity: Mapping
    num_steps: int
    log_every: int
    save_every: int | None = None  # default: 10 x log_every (and always at the end)
    keep: int = 2
    global_batches: bool = True

    def dir(self, ctx: RunContext) -> epath.Path:
        return ctx.stage_dir(self.name, self.full_identity)

    @property
    def full_identity(self) -> dict:
        return {"stage": self.name, **dict(self.identity)}

    def key(self, ctx: RunContext, purpose: str) -> jax.Array:
        return ctx.key(self.name, purpose)

    def run(self, ctx: RunContext, state, step_fn, batches: Callable[[int], Any], *,
            on_metrics=None, prefix: TrainStage | None = None):
        """Trains (or resumes) the stage; returns (state, StageFigures). `prefix`: a
        finished stage of fewer steps that this one continues when it has no checkpoint
        of its own (`fit`'s `start_from`: the same name, so the same keys and batches;
        a constant learning rate is the caller's to ensure)."""
        from ebm_jax.train.loop import fit

        if prefix is not None and (prefix.name != self.name
                                   or not 1 <= prefix.num_steps < self.num_steps):
            raise ValueError(f"prefix of stage {self.name} ({self.num_steps} steps) must "
                             f"be a stage of the same name and fewer steps, got "
                             f"{prefix.name} ({prefix.num_steps} steps)")
        stage_dir = self.dir(ctx)
        save_every = self.save_every or self.log_every * 10
        ctx.current = (self.name, stage_dir)
        from ebm_jax.train.checkpoint import latest_step

        restart = ctx.should_restart(stage_dir)
        done_before = None if restart else latest_step(stage_dir)
        # a stage loaded again in this run (a MoCo start under every arm) is not logged
        # again
        first = ctx.enter_stage(stage_dir, finished=done_before is not None
                                and done_before >= self.num_steps)
        label = ctx.stage_label(self.name)
        state = fit(stage_dir, state, step_fn, batches, num_steps=self.num_steps,
                    config=self.full_identity, save_every=save_every, keep=self.keep,
                    log_every=self.log_every, restart=restart,
                    progress=ctx.progress, description=label,
                    global_batches=self.global_batches, on_metrics=on_metrics,
                    start_from=None if prefix is None else (prefix.dir(ctx),
                                                            prefix.full_identity),
                    final_meta=lambda: {FIGURES: stage_figures(
                        stage_dir, self.num_steps).asdict()})
        ctx.current = None
        figures = finished_figures(stage_dir, self.num_steps)
        waited, read = (getattr(batches, "wait_seconds", None),
                        getattr(batches, "batches_read", 0))
        if waited is not None and read > 1:  # batches read ahead (`data.pipeline`)
            ctx.log(f"stage {self.name}: waited {waited:.1f} s for data over {read} "
                    f"batches ({100 * waited / max(figures.seconds, 1e-9):.1f}% of "
                    "the training time)")
        if first and not ctx.progress:  # no bars: one line per finished stage
            loss = "" if figures.final_loss is None else f", final loss {figures.final_loss:.4g}"
            ctx.log(f"stage {self.name}: {figures.steps} steps, {figures.seconds:.0f} s of "
                    f"training{loss} [{ctx.stage_place()}{ctx.eta()}]")
        elif first and ctx.planned_stages is not None and (
                ctx.stages_started < ctx.planned_stages):
            ctx.log(f"{label} done{ctx.eta()}")
        return state, figures


FIGURES = "figures"  # the entry of a finished stage's last checkpoint meta


def finished_figures(stage_dir, num_steps: int) -> StageFigures:
    """The figures of a finished stage: those stored with its last checkpoint when it
    finished; for a stage that finished before they were stored there, measured from
    its metrics.jsonl, which must then reach its last step (else one CorruptFileError
    naming the file, never a figure of part of the run)."""
    from ebm_jax.train.checkpoint import StageCheckpoints, latest_step

    step = latest_step(stage_dir)
    if step is not None:
        ckpt = StageCheckpoints(stage_dir, save_every=1, asynchronous=False)
        try:
            meta = ckpt.read_meta(step)
        finally:
            ckpt.close()
        stored = meta.get(FIGURES)
        names = {f.name for f in dataclasses.fields(StageFigures)}
        if (meta.get("next_step") == num_steps and isinstance(stored, dict)
                and set(stored) == names):
            return StageFigures(**stored)
    return stage_figures(stage_dir, num_steps, finished=True)


_LAST: RunContext | None = None


def last_context() -> RunContext | None:
    """The context most recently entered in this process (for the Ctrl-C message)."""
    return _LAST


def interrupted_message(ctx: RunContext | None) -> str:
    """The one line printed on Ctrl-C."""
    if ctx is None or ctx.current is None:
        return "stopped; rerun the same command to resume"
    name, stage_dir = ctx.current
    from ebm_jax.train.checkpoint import latest_step

    step = latest_step(stage_dir)
    where = f"from step {step}" if step is not None else "from the start of the stage"
    return f"stopped in stage {name}; rerun the same command to resume {where}"


__all__ = [
    "LOCK",
    "CorruptFileError",
    "RunContext",
    "RunLock",
    "RunLockedError",
    "StageFigures",
    "TrainStage",
    "finished_figures",
    "interrupted_message",
    "last_context",
    "process_alive",
    "stable_hash",
    "stage_figures",
]
