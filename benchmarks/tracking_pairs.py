"""Training pairs of the tracking experiments read from ArrayRecord records through
grain, against the same pairs cut from GOT-10k folders: is reading the bottleneck?

    python benchmarks/tracking_pairs.py --out results/bench [--sequences 60]
        [--results RUN/results.json]   # a run's training steps/s to compare against

A generated split (`--sequences` x 80 frames of 320x240) is written once as folders
and once as records (timed: seconds per sequence, MB per frame). Three readers cut the
box head's training pairs (`data.box_head_pairs.jittered_pair_batches`, pytracking's
PrDiMP processing, batch `--batch-size`) and, with `--sampler siamfc`, the Box-Siam
pairs (`data.tracking_pairs.pair_batches`): "folders" (frames decoded from the JPEG
files, in the caller's thread), "records" (the same from the records) and "grain"
(the records read ahead on `--threads` threads by `data.pipeline.stream_steps`, what
the recipes use; default one per CPU, as the recipes; each round starts a fresh
iterator, so no batch is read ahead while another reader is timed). They run interleaved (A B C A B C ...) over `--rounds` rounds of
`--steps` batches; the table gives the median with min and max of pairs per second,
wall and process CPU time. With `--results`, the training stages' pairs per second
(batch size / seconds per step) of that run are printed beside them: reading keeps up
when its pairs/s is well above training's. Writes <out>/tracking_pairs.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from ebm_jax.data.box_head_pairs import jittered_pair_batches
from ebm_jax.data.pipeline import default_read_options, stream_steps
from ebm_jax.data.sequences import read_got10k
from ebm_jax.data.tracking import TrackingSpec, generate_tracking_split
from ebm_jax.data.tracking_pairs import pair_batches
from ebm_jax.data.tracking_records import generated_records
from ebm_jax.ops.jitter import CropJitter

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_protocol import BenchRun, interleaved_wall_cpu  # noqa: E402


def _bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def _sampler(kind: str, batch_size: int):
    if kind == "box-head":
        return lambda seqs, seed: jittered_pair_batches(
            seqs, batch_size=batch_size, max_gap=100, seed=seed, jitter=CropJitter(),
            out_size=255)
    return lambda seqs, seed: pair_batches(seqs, batch_size=batch_size, max_gap=100,
                                           seed=seed)


def _training_rates(path: str | None) -> list[dict]:
    if path is None:
        return []
    results = json.loads(Path(path).read_text())
    batch = results["ebm_jax"]["config"]
    rows = []
    for name, t in results.get("training", {}).items():
        b = (batch["box_head"]["batch_size"] if name.startswith("box-head")
             else batch["batch_size"])
        if t.get("seconds_per_step"):
            rows.append({"stage": name, "pairs_per_second": b / t["seconds_per_step"]})
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sequences", type=int, default=60)
    p.add_argument("--sampler", choices=("box-head", "siamfc"), default="box-head")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=None,
                   help="read-ahead threads (default: the recipes' default_read_options)")
    p.add_argument("--results", default=None)
    p.add_argument("--out", default="results/bench")
    args = p.parse_args(argv)
    bench_run = BenchRun(__file__, argv)
    import grain

    options = default_read_options() if args.threads is None else grain.ReadOptions(
        num_threads=args.threads, prefetch_buffer_size=2 * args.threads)
    args.threads = options.num_threads
    spec = TrackingSpec(split="train", num_sequences=args.sequences, num_frames=80)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        folders = read_got10k(generate_tracking_split(Path(tmp) / "f", spec,
                                                      progress=False))
        folder_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        path, records = generated_records(Path(tmp) / "r", spec, progress=False)
        records_s = time.perf_counter() - t0  # generation again, then the records
        frames = args.sequences * spec.num_frames
        make = _sampler(args.sampler, args.batch_size)
        total = args.steps * (args.rounds + 1)
        readers = {"folders": make(folders, 0), "records": make(records, 0),
                   "grain": stream_steps(make(records, 0), total + args.rounds + 1,
                                         read_options=options)}
        step = {k: 0 for k in readers}

        def batches(name):
            def run():
                if name == "grain":  # a fresh iterator each round: no batches read
                    step[name] += 1  # ahead while the other readers were timed
                for _ in range(args.steps):
                    readers[name](step[name])
                    step[name] += 1
            return run

        for name in readers:  # warm-up: the first iterator, the first frames
            batches(name)()
        times = interleaved_wall_cpu({k: batches(k) for k in readers}, args.rounds,
                                     per={k: args.steps for k in readers})
        sizes = {"folders": _bytes(Path(tmp) / "f"), "records": _bytes(path)}
    b = args.batch_size
    rows = [{"reader": k, "pairs_per_second": b / t["wall"]["median"],
             "min": b / t["wall"]["max"], "max": b / t["wall"]["min"],
             "cpu_seconds_per_100_pairs": 100 * t["cpu"]["median"] / b}
            for k, t in times.items()]
    training = _training_rates(args.results)
    payload = {"sampler": args.sampler, "sequences": args.sequences, "frames": frames,
               "batch_size": b, "threads": args.threads, "rounds": args.rounds,
               "steps": args.steps, "folder_write_seconds": folder_s,
               "records_write_seconds": records_s, "bytes": sizes,
               "load_average": os.getloadavg(), "machine": platform.platform(),
               "cpus": os.cpu_count(), "rows": rows, "training": training}
    md = [f"{args.sequences} generated sequences ({frames} frames of 320x240): folders "
          f"written in {folder_s:.0f} s ({sizes['folders'] / frames / 1e3:.1f} kB/frame), "
          f"records (generated again, then written) in {records_s:.0f} s "
          f"({sizes['records'] / frames / 1e3:.1f} kB/frame). {args.sampler} pairs, "
          f"batches of {b}, median of {args.rounds} interleaved rounds of {args.steps} "
          f"(load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs):", "",
          "| reader | pairs/s (min-max) | CPU s / 100 pairs |", "|---|---|---|"]
    md += [f"| {r['reader']} | {r['pairs_per_second']:.0f} ({r['min']:.0f}-"
           f"{r['max']:.0f}) | {r['cpu_seconds_per_100_pairs']:.2f} |" for r in rows]
    if training:
        md += ["", "Training (from --results):", "", "| stage | pairs/s |", "|---|---|"]
        md += [f"| {r['stage']} | {r['pairs_per_second']:.1f} |" for r in training]
    print("\n".join(md))
    bench_run.write(Path(args.out), "tracking_pairs", payload, "\n".join(md) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
