"""The side-by-side protocol the benchmarks share: an eager PyTorch worker in another
Python (PyTorch's CPU wheel may exist only for another Python than the project's),
timed on request, so that the two sides alternate (A B A B ...); and the median with
min and max of each side's rounds.

The worker reads one JSON request per line on stdin and answers one JSON line; its
first line describes it ({"torch": version, "threads": n, "device": ...}) or says why
it cannot run ({"error": ...}); {"quit": true} ends it (`serve_requests` in
torch_regression1d.py is the worker's side).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent


class BenchRun:
    """One run of a benchmark: its script and arguments, when it started and the
    machine's load then; `write` writes its report with that provenance.

        bench_run = BenchRun(__file__, argv)   # right after parsing the arguments
        ...
        bench_run.write(out, "losses", payload, markdown, files=("losses.png",))
    """

    def __init__(self, script: str, argv=None):
        self.script = script
        self.args = list(sys.argv[1:] if argv is None else argv)
        self.started = time.time()
        self.load_start = os.getloadavg()
        from ebm_jax.report import provenance

        # the commit and dirty flag of the tree the benchmark's code was loaded from, at
        # its start (a file edited while it runs does not change what it measured)
        self.git = provenance.git_state()

    def write(self, out_dir, stem: str, payload: dict, markdown: str,
              files: tuple[str, ...] = ()) -> None:
        """`<out_dir>/<stem>.json` and `<stem>.md` (`ebm_jax.io.write_report`) with the
        provenance `ebm_jax.report.provenance.collect_benchmark` gives (the package
        version and commit, the script and its arguments, the machine, the versions, the
        load average at the start and the end, the wall time); the table ends with it in
        one line. `files` are figures written beside them, which `python -m
        ebm_jax.report.stored store <out_dir>/<stem>.json` stores with it."""
        from ebm_jax import io
        from ebm_jax.report import provenance

        p = provenance.collect_benchmark(self.script, self.args, started=self.started,
                                         finished=time.time(), load_average=self.load_start,
                                         git=self.git)
        payload = {**payload, "ebm_jax": {"provenance": p,
                                          "files": ["results.json", "results.md", *files]}}
        io.write_report(out_dir, stem, payload,
                        markdown.rstrip("\n") + "\n\n" + provenance.footer(p) + "\n")


class TorchWorker:
    """`python HERE/script *args` as a worker: `request(**fields) -> dict`."""

    def __init__(self, python: str, script: str, *args: str):
        self.proc = subprocess.Popen([python, str(HERE / script), *args],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the PyTorch worker {script} ({python}) did not start")
        self.info = json.loads(line)
        if "error" in self.info:  # e.g. --torch-device cuda without CUDA
            self.proc.wait(timeout=60)
            raise RuntimeError(f"the PyTorch worker: {self.info['error']}")

    def request(self, **fields) -> dict:
        self.proc.stdin.write(json.dumps(fields) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the PyTorch worker stopped")
        return json.loads(line)

    def close(self) -> None:
        self.proc.stdin.write(json.dumps({"quit": True}) + "\n")
        self.proc.stdin.flush()
        self.proc.wait(timeout=60)


def torch_python() -> str:
    """The Python with torch that benchmarks/torch_env.sh finds (or makes)."""
    out = subprocess.run(["bash", "-c", f"source {HERE / 'torch_env.sh'} >&2 && "
                          "echo $TORCH_PYTHON"], check=True, capture_output=True,
                         text=True, cwd=HERE.parent)
    return out.stdout.strip().splitlines()[-1]


def summary(values) -> dict:
    """Median, min and max of a side's rounds."""
    values = [float(v) for v in values]
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def interleaved(calls: dict[str, Callable[[], object]], rounds: int) -> dict:
    """Each callable once per round, in turn (A B A B ...): `summary` of its wall
    seconds (`interleaved_wall_cpu` gives CPU seconds too)."""
    return {k: v["wall"] for k, v in interleaved_wall_cpu(calls, rounds).items()}


def interleaved_wall_cpu(calls: dict[str, Callable[[], object]], rounds: int,
                         per: dict[str, float] | None = None) -> dict:
    """As `interleaved` (A B A B ...), timing each call in wall seconds
    (time.perf_counter) and in process CPU seconds (time.process_time, all threads),
    each divided by `per[name]` where given (e.g. the steps a call runs):
    {name: {"wall": summary, "cpu": summary}}."""
    times = {k: {"wall": [], "cpu": []} for k in calls}
    for _ in range(rounds):
        for k, call in calls.items():
            t0, c0 = time.perf_counter(), time.process_time()
            call()
            times[k]["wall"].append(time.perf_counter() - t0)
            times[k]["cpu"].append(time.process_time() - c0)
    per = per or {}
    return {k: {kind: summary([t / per.get(k, 1) for t in v[kind]]) for kind in v}
            for k, v in times.items()}
