"""The wall time of every experiment config's variant, as a user runs it, written to
the file `ebm-jax list` reads (`experiments/wall_times.json`).

    python benchmarks/wall_times.py                      # every config's tiny variant
    python benchmarks/wall_times.py --variant quick --configs experiments/tracking/siamfc_box.py

Each config runs as `ebm-jax run CONFIG:VARIANT --no-progress` in a fresh work
directory of its own (so nothing is shared with another config's stages: a config
that shares stages with another, like Figure 2 with Table 1, is timed alone), one
after another. The wall time and the CPU time of the run (its process and children)
are recorded with the machine (CPU count and model, or the GPU JAX sees), the date and
the command. An entry of the same variant and machine is replaced; the others stay. A
run that fails is reported and not recorded, and the script exits with 1.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ebm_jax.config import CONFIG_ROOT, load_module
from ebm_jax.config_catalog import WALL_TIMES, duration, find_configs
from ebm_jax.io import atomic_write


def machine() -> str:
    """"2 CPU cores, model" or, where JAX sees a GPU, its name."""
    import jax

    devices = jax.devices()
    if devices[0].platform != "cpu":
        return f"{len(devices)} x {devices[0].device_kind}"
    model = platform.processor() or "x86-64"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{len(os.sched_getaffinity(0))} CPU cores, {model}"


def time_run(config: str, variant: str) -> tuple[float, float]:
    """(wall, CPU) seconds of one run of `config:variant` in a fresh work directory."""
    with tempfile.TemporaryDirectory(prefix="wall-") as tmp:
        cmd = [sys.executable, "-m", "ebm_jax.cli", "run", f"{config}:{variant}",
               "--workdir", f"{tmp}/runs", "--out", f"{tmp}/out", "--no-progress"]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise RuntimeError(f"{config}:{variant} failed (exit {done.returncode}):\n"
                           + "\n".join(done.stderr.strip().splitlines()[-5:]))
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variant", default="tiny")
    p.add_argument("--root", default=CONFIG_ROOT, help="folder of config files")
    p.add_argument("--configs", nargs="*", default=None,
                   help="config files to time (default every one under --root)")
    p.add_argument("--note", default="", help="recorded with each entry (e.g. what else "
                   "ran on the machine)")
    args = p.parse_args(argv)
    root = Path(args.root)
    configs = [Path(c) for c in args.configs] if args.configs else find_configs(root)
    target = root / WALL_TIMES
    table = json.loads(target.read_text()) if target.exists() else {}
    where, failed = machine(), 0
    print(f"timing {len(configs)} config(s), variant {args.variant}, on {where}")
    for config in configs:
        if args.variant not in load_module(config).VARIANTS:
            print(f"{config}: no variant {args.variant}, skipped")
            continue
        try:
            wall, cpu = time_run(str(config), args.variant)
        except RuntimeError as e:
            print(e)
            failed += 1
            continue
        print(f"{config}:{args.variant}  {duration(wall)} wall ({wall:.1f} s), "
              f"{cpu:.1f} s CPU")
        entries = table.setdefault(str(config.relative_to(root)), {}).setdefault(
            args.variant, [])
        entries[:] = [e for e in entries if e["machine"] != where] + [{
            "seconds": round(wall, 1), "cpu_seconds": round(cpu, 1), "machine": where,
            "date": datetime.date.today().isoformat(),
            "how": f"python benchmarks/wall_times.py --variant {args.variant}",
            **({"note": args.note} if args.note else {})}]
        # written after each config, so a stopped sweep keeps what it measured
        atomic_write(target, json.dumps(dict(sorted(table.items())), indent=1) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
