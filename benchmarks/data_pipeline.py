"""The ArrayRecord data path against the in-memory one: writing an image set as records,
and reading training batches (the contrastive recipe's batches) from the records through
grain against indexing the arrays in memory.

    python benchmarks/data_pipeline.py --out results/bench          # digits on photos, 16 px
    python benchmarks/data_pipeline.py --data cifar10 --data-root DIR --image-size 32

The two readers run interleaved (A B A B ...) over `--rounds` rounds of `--steps`
batches each; the table gives the median with min and max of batches per second, wall
and process CPU time. Writes <out>/data_pipeline.{json,md}.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path


from ebm_jax.data import images as image_data
from ebm_jax.data.pipeline import HostShard, StepReader, batch_indices, image_batches
from ebm_jax.data.records_write import write_image_records

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_protocol import BenchRun, interleaved_wall_cpu  # noqa: E402


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default="digits-on-photos")
    p.add_argument("--data-root", default=None)
    p.add_argument("--image-size", type=int, default=16)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--out", default="results/bench")
    args = p.parse_args(argv)
    bench_run = BenchRun(__file__, argv)

    data = image_data.load_image_data(args.data, args.image_size, data_root=args.data_root)
    with tempfile.TemporaryDirectory() as tmp:
        t0, c0 = time.perf_counter(), time.process_time()
        path = write_image_records(data, Path(tmp) / "records")
        write_s, write_cpu = time.perf_counter() - t0, time.process_time() - c0
        size = _dir_bytes(path)
        records = image_data.load_image_data("records", args.image_size, data_root=path)
        n, b = len(records.train_images), args.batch_size
        num_steps = args.steps * args.rounds * 2
        grain_reader = StepReader(image_batches(records, batch_size=b, seed=0,
                                                num_steps=num_steps, shard=HostShard()))
        images = records.train_images

        def memory_reader(s):  # what the recipe's loader="memory" does
            return images[batch_indices(0, s, n, b)]

        readers = {"memory": memory_reader, "grain": grain_reader}
        step = {k: 0 for k in readers}

        def batches(name):  # the next --steps batches of one reader
            def run():
                for _ in range(args.steps):
                    readers[name](step[name])
                    step[name] += 1
            return run

        for name in readers:  # warm-up: first iterator, first permutation
            readers[name](step[name])
            step[name] += 1
        times = interleaved_wall_cpu({k: batches(k) for k in readers}, args.rounds,
                                     per={k: args.steps for k in readers})

    rows = []
    for name, t in times.items():  # seconds per batch -> batches per second
        rows.append({"reader": name, "batches_per_second": 1 / t["wall"]["median"],
                     "min": 1 / t["wall"]["max"], "max": 1 / t["wall"]["min"],
                     "images_per_second": b / t["wall"]["median"],
                     "cpu_seconds_per_100_batches": 100 * t["cpu"]["median"]})
    payload = {"data": args.data, "image_size": args.image_size, "batch_size": b,
               "num_train": n, "num_test": len(records.test_images),
               "write_seconds": write_s, "write_cpu_seconds": write_cpu,
               "records_bytes": size, "rounds": args.rounds, "steps": args.steps,
               "load_average": os.getloadavg(), "machine": platform.platform(),
               "cpus": os.cpu_count(), "rows": rows}
    md = [f"Records of {args.data} at {args.image_size} px ({n} train + "
          f"{len(records.test_images)} test images): written in {write_s:.1f} s, "
          f"{size / 1e6:.1f} MB. Batches of {b} (median of {args.rounds} interleaved "
          f"rounds of {args.steps}; load average {os.getloadavg()[0]:.1f}):", "",
          "| reader | batches/s (min-max) | images/s | CPU s / 100 batches |",
          "|---|---|---|---|"]
    for r in rows:
        md.append(f"| {r['reader']} | {r['batches_per_second']:.0f} ({r['min']:.0f}-"
                  f"{r['max']:.0f}) | {r['images_per_second']:.0f} | "
                  f"{r['cpu_seconds_per_100_batches']:.3f} |")
    print("\n".join(md))
    bench_run.write(Path(args.out), "data_pipeline", payload, "\n".join(md) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
