"""Run records: what a run was (config, versions, devices) and what it measured.

    <stage_dir>/run.json        written when the stage starts (and on each resume, with
                                the resumed step appended to `resumed_at`)
    <stage_dir>/metrics.jsonl   one JSON object per logged step: step, time, metrics

Only process 0 writes (multi-host runs). On resume, metric lines past the restored step
are dropped, so the file always describes the checkpointed run; a fresh start (no
checkpoint) starts the file over. A final line cut short (a run killed while appending
it: no newline, not JSON) is dropped on resume when it is provably past the checkpoint
(its step, or the complete row before it, is at or past the restored step) and that
step is logged again; anything else that is not a row is refused (rerun with
--restart), never skipped: `final_loss` and the timings of the results are measured
from these rows when the stage finishes, and stored with its last checkpoint
(`ebm_jax.train.stages.finished_figures`).
"""

from __future__ import annotations

import json
import os
import platform
import re
import sys
import time

import jax
import numpy as np
from etils import epath

from ebm_jax.io import CorruptFileError, atomic_write, read_json

RUN_JSON = "run.json"
METRICS = "metrics.jsonl"


def is_main_process() -> bool:
    return jax.process_index() == 0


def versions() -> dict:
    import flax
    import optax
    import orbax.checkpoint as ocp

    return {
        "python": platform.python_version(), "jax": jax.__version__,
        "jaxlib": getattr(jax.lib, "__version__", None) or _pkg_version("jaxlib"),
        "flax": flax.__version__, "optax": optax.__version__,
        "orbax-checkpoint": _pkg_version("orbax-checkpoint") or getattr(ocp, "__version__", None),
        "numpy": np.__version__,
    }


def cpu_name() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), else what `platform` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            names = [ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")]
    except OSError:
        names = []
    return names[0] if names else (platform.processor() or platform.machine())


def cpu_vector_isa(cpuinfo: str = "/proc/cpuinfo", xla_flags: str | None = None) -> str | None:
    """The widest x86 vector extension XLA's CPU kernels may use here: "AVX-512",
    "AVX2", "AVX" or "SSE4_2" from the CPU's flags (/proc/cpuinfo), capped by
    `--xla_cpu_max_isa` in XLA_FLAGS ("AVX2 (XLA_FLAGS)"); None off x86 Linux. Two CPUs
    that differ in it may sum floats in another order, so their float32 results may
    differ in the last bits. `xla_flags` defaults to the environment's XLA_FLAGS."""
    import os
    import re

    try:
        with open(cpuinfo) as f:
            flags = next((set(ln.split(":", 1)[1].split()) for ln in f
                          if ln.startswith("flags")), set())
    except OSError:
        return None
    isa = ("AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags
           else "AVX" if "avx" in flags else "SSE4_2" if "sse4_2" in flags else None)
    flags_text = os.environ.get("XLA_FLAGS", "") if xla_flags is None else xla_flags
    cap = re.search(r"--xla_cpu_max_isa=(\w+)", flags_text)
    order = ["SSE4_2", "AVX", "AVX2", "AVX-512"]
    if cap and isa is not None:
        capped = cap.group(1).upper()
        capped = "AVX-512" if capped.startswith("AVX512") else capped
        if capped in order and order.index(capped) < order.index(isa):
            return f"{capped} (XLA_FLAGS)"
    return isa


def _pkg_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def device_list() -> list[str]:
    return [f"{d.platform}:{d.id} {d.device_kind} (process {d.process_index})"
            for d in jax.devices()]


def _scalar(v):
    a = np.asarray(v)
    return a.item() if a.size == 1 else a.tolist()


class RunRecords:
    """Writes run.json and metrics.jsonl of one stage (no-ops off process 0)."""

    def __init__(self, stage_dir: str | os.PathLike, *, enabled: bool | None = None):
        self.dir = epath.Path(stage_dir)
        self.enabled = is_main_process() if enabled is None else enabled
        self._t0 = time.perf_counter()

    def start(self, config: dict, *, resumed_at: int | None = None) -> None:
        if not self.enabled:
            return
        if resumed_at is None:  # step 0: rows of an earlier, uncheckpointed try are stale
            (self.dir / METRICS).unlink(missing_ok=True)
        path = self.dir / RUN_JSON
        info = read_json(path, what="run record") if path.exists() else {}
        if not isinstance(info, dict):
            raise CorruptFileError(f"run record {path} is not a JSON object; delete it "
                                   "or rerun with --restart")
        if resumed_at is None or not info:
            info = {
                "config": config,
                "versions": versions(),
                "devices": device_list(),
                "process_count": jax.process_count(),
                "argv": sys.argv,
                "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "resumed_at": [],
            }
        if resumed_at is not None:
            info["resumed_at"].append(int(resumed_at))
        atomic_write(path, json.dumps(info, indent=2) + "\n")

    def truncate(self, step: int) -> None:
        """Drops metric lines after `step` (the step a resumed run restarts from)."""
        path = self.dir / METRICS
        if not self.enabled or not path.exists():
            return
        keep = [json.dumps(r) for r in _read_rows(path, resume_step=int(step))
                if r["step"] <= step]
        atomic_write(path, "".join(ln + "\n" for ln in keep))

    def log(self, step: int, metrics: dict) -> None:
        if not self.enabled:
            return
        row = {"step": int(step), "time": round(time.perf_counter() - self._t0, 3)}
        row.update({k: _scalar(v) for k, v in metrics.items()})
        self.dir.mkdir(parents=True, exist_ok=True)
        with (self.dir / METRICS).open("a") as f:
            f.write(json.dumps(row) + "\n")


def read_metrics(stage_dir: str | os.PathLike) -> list[dict]:
    """The rows of a stage's metrics.jsonl; a line that is not a JSON object with a
    step (a truncated or edited file) raises CorruptFileError naming file and line."""
    return _read_rows(epath.Path(stage_dir) / METRICS)


_TORN_STEP = re.compile(r'\{"step": (\d+)[,}]')


def _read_rows(path: epath.Path, *, resume_step: int | None = None,
               skip_torn_end: bool = False) -> list[dict]:
    """The rows of metrics file `path`. Its last line cut short (no newline, not JSON:
    a run killed while appending it) is dropped where `resume_step` (the step a resumed
    run restarts from) shows it lies past the checkpoint, or with `skip_torn_end` (a
    plot of a running stage); otherwise, and for any other bad line, CorruptFileError."""
    if not path.exists():
        return []
    text = path.read_text()
    lines = text.splitlines()
    rows = []
    for i, ln in enumerate(lines, 1):
        if not ln.strip():
            continue
        try:
            row = json.loads(ln)
            row["step"] = int(row["step"])
        except (ValueError, KeyError, TypeError, IndexError):
            torn = i == len(lines) and not text.endswith("\n")
            if torn and skip_torn_end:
                break
            if torn and resume_step is not None:
                m = _TORN_STEP.match(ln)
                step = int(m.group(1)) if m else None
                last = rows[-1]["step"] if rows else 0
                # its step, or the next logged step after the last complete row
                if (step > resume_step) if step is not None else (last >= resume_step):
                    break  # logged after the checkpoint: the resumed run logs it again
            where = f"metrics file {path} is corrupt at line {i} ({ln[:60]!r})"
            keep = ("; do not edit the file: the results' final loss and timings are "
                    "read from it")
            if torn and resume_step is None:
                raise CorruptFileError(
                    f"{where}: its last line is cut short (a run stopped while writing "
                    "it); rerun the same command, which drops that line when it lies past "
                    f"the last checkpoint, or rerun with --restart{keep}") from None
            if torn:
                raise CorruptFileError(
                    f"{where}: its last line is cut short and not provably past the "
                    f"checkpoint at step {resume_step}; rerun with --restart{keep}"
                ) from None
            raise CorruptFileError(f"{where}; rerun with --restart{keep}") from None
        rows.append(row)
    return rows


def plot_metrics(run_dir: str | os.PathLike, out: str | os.PathLike | None = None):
    """Draws every metric of every stage under `run_dir` (each a directory with a
    metrics.jsonl, or run_dir itself) against the step; writes one PNG and returns it."""
    import matplotlib.pyplot as plt

    from ebm_jax.io import atomic_savefig

    run_dir = epath.Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"RUN_DIR {run_dir} is not a directory")
    # the run itself, its stages and one level below (no recursive glob: cheap on GCS)
    found = [run_dir / METRICS, *run_dir.glob(f"*/{METRICS}"),
             *run_dir.glob(f"*/*/{METRICS}")]
    stages = sorted({p.parent for p in found if p.is_file()})
    if not stages:
        raise FileNotFoundError(f"RUN_DIR {run_dir} holds no {METRICS}")
    out = epath.Path(out) if out is not None else run_dir / "metrics.png"
    if out.is_dir():
        raise ValueError(f"--out {out} is a directory; give the PNG file to write "
                         f"(e.g. {out / 'metrics.png'})")
    series: dict[str, dict[str, tuple[list, list]]] = {}
    for stage in stages:
        name = str(stage.relative_to(run_dir)) if stage != run_dir else run_dir.name
        for row in _read_rows(stage / METRICS, skip_torn_end=True):  # a running stage
            for k, v in row.items():
                if k in ("step", "time") or not isinstance(v, (int, float)):
                    continue
                xs, ys = series.setdefault(k, {}).setdefault(name, ([], []))
                xs.append(row["step"])
                ys.append(v)
    keys = sorted(series)
    if not keys:
        raise ValueError(f"RUN_DIR {run_dir}: its {METRICS} files hold no rows yet "
                         f"({', '.join(str(p) for p in stages)}); nothing to plot")
    fig, axes = plt.subplots(len(keys), 1, figsize=(7, 2.6 * len(keys)), squeeze=False)
    for ax, k in zip(axes[:, 0], keys):
        for name, (xs, ys) in sorted(series[k].items()):
            ax.plot(xs, ys, label=name, lw=1)
        ax.set_ylabel(k)
        ax.grid(alpha=0.3)
        if len(series[k]) <= 12:
            ax.legend(fontsize=7)
    axes[-1, 0].set_xlabel("step")
    fig.tight_layout()
    try:
        atomic_savefig(fig, out)
    except OSError as e:  # read-only file system, no permission, a file in the path
        raise ValueError(f"the PNG {out} cannot be written: {e.strerror or e} "
                         "(give a writable --out)") from None
    finally:
        plt.close(fig)
    return out
