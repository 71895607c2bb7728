"""PrRoIPool throughput against a direct per-pixel implementation, and boxes refined
per second with the paper-size energy head (T = 10 steps).

    python benchmarks/detection_ops.py --out results/bench [--boxes 100] [--rounds 3]

Every comparison runs its alternatives interleaved (A B A B) for --rounds rounds and
reports the median with min and max, in wall and in process CPU time (all threads); the
load average is recorded before and after. The direct NumPy kernel is timed once, on a
few boxes.

The direct implementation is the original PrRoIPool kernel's algorithm in NumPy: for
each bin, visit every pixel cell the bin overlaps and add the closed-form integral of
that cell's bilinear patch. It is exact, so it also cross-checks `prroi_pool`.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from ebm_jax.models.detection_head import DetectionEnergyHead, refine_boxes
from ebm_jax.ops import prroi_pool

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_protocol import BenchRun, interleaved_wall_cpu  # noqa: E402


def _cell_integral(a, b):
    """(integral of (1 - t), integral of t) over [a, b] within a unit cell."""
    return (b - a) - 0.5 * (b * b - a * a), 0.5 * (b * b - a * a)


def prroi_pool_direct(features: np.ndarray, boxes: np.ndarray, output_size: int,
                      spatial_scale: float = 1.0, aligned: bool = True) -> np.ndarray:
    """Per-pixel reference: loops over boxes, bins and the pixel cells of each bin."""
    h, w, c = features.shape
    f = np.zeros((h + 2, w + 2, c))
    f[1:-1, 1:-1] = features  # zero outside, cells from -1 to size
    off = 0.5 if aligned else 0.0
    out = np.zeros((len(boxes), output_size, output_size, c))
    for n, box in enumerate(boxes):
        x0, y0, x1, y1 = np.asarray(box, float) * spatial_scale - off
        bh, bw = (y1 - y0) / output_size, (x1 - x0) / output_size
        for p in range(output_size):
            ya, yb = y0 + p * bh, y0 + (p + 1) * bh
            for q in range(output_size):
                xa, xb = x0 + q * bw, x0 + (q + 1) * bw
                acc = np.zeros(c)
                for i in range(max(-1, math.floor(ya)), min(h, math.ceil(yb))):
                    ly0, ly1 = max(ya, i) - i, min(yb, i + 1) - i
                    wy0, wy1 = _cell_integral(ly0, ly1)
                    for j in range(max(-1, math.floor(xa)), min(w, math.ceil(xb))):
                        lx0, lx1 = max(xa, j) - j, min(xb, j + 1) - j
                        wx0, wx1 = _cell_integral(lx0, lx1)
                        acc += (f[i + 1, j + 1] * wy0 * wx0 + f[i + 2, j + 1] * wy1 * wx0
                                + f[i + 1, j + 2] * wy0 * wx1 + f[i + 2, j + 2] * wy1 * wx1)
                out[n, p, q] = acc / (bh * bw)
    return out


def _boxes(rng, n, size):
    xy = rng.uniform(0, size * 0.7, (n, 2))
    wh = rng.uniform(size * 0.05, size * 0.3, (n, 2))
    return np.concatenate([xy, xy + wh], 1).astype(np.float32)


def bench_pool(num_boxes: int, map_size: int, channels: int, repeats: int = 5) -> dict:
    rng = np.random.default_rng(0)
    feats = rng.normal(size=(map_size, map_size, channels)).astype(np.float32)
    boxes = _boxes(rng, num_boxes, map_size)
    fn = jax.jit(lambda f, b: prroi_pool(f, b, output_size=7))
    out = jax.block_until_ready(fn(feats, boxes))
    t = interleaved_wall_cpu({"jax": lambda: jax.block_until_ready(fn(feats, boxes))},
                             repeats)["jax"]
    jax_s = t["wall"]["median"]
    k = min(num_boxes, 8)  # the direct loops are slow: time a few boxes, once
    t0, c0 = time.perf_counter(), time.process_time()
    ref = prroi_pool_direct(feats, boxes[:k], 7)
    direct_s = (time.perf_counter() - t0) / k * num_boxes
    direct_cpu = (time.process_time() - c0) / k * num_boxes
    err = float(np.abs(np.asarray(out[:k]) - ref).max() / np.abs(ref).max())
    return {"boxes": num_boxes, "map": map_size, "channels": channels,
            "jax_seconds": t, "jax_boxes_per_second": num_boxes / jax_s,
            "direct_seconds": {"wall": direct_s, "cpu": direct_cpu},
            "direct_boxes_per_second": num_boxes / direct_s,
            "speedup": direct_s / jax_s,
            "speedup_cpu": direct_cpu / t["cpu"]["median"],
            "max_relative_difference": err}


POOL_METHODS = ("dense", "integral")  # the head's PrRoIPool: whole-map contraction, integral images


def bench_refine(num_boxes: int, image_size: int = 512, rounds: int = 3) -> dict:
    """Boxes refined per second (T = 10) by the paper-size head, with each pooling path,
    interleaved; and the largest difference between the paths' refined boxes."""
    rng = np.random.default_rng(0)
    levels = [jnp.asarray(rng.normal(size=(image_size // s, image_size // s, 256)),
                          jnp.float32) for s in (4, 8, 16, 32)]
    boxes = _boxes(rng, num_boxes, image_size)
    classes = rng.integers(1, 81, num_boxes)
    lengths = (8e-4, 8e-4, 3.2e-3, 3.2e-3)
    calls, first, out = {}, {}, {}
    for m in POOL_METHODS:
        head = DetectionEnergyHead(pool_method=m, rngs=nnx.Rngs(0))  # the paper's size
        call = (lambda head=head: jax.block_until_ready(
            refine_boxes(head, levels, boxes, classes, step_length=lengths)))
        t0 = time.perf_counter()
        out[m] = call()
        first[m] = time.perf_counter() - t0
        calls[m] = call
    tc = interleaved_wall_cpu(calls, rounds)
    t = {m: v["wall"] for m, v in tc.items()}
    diff = float(np.abs(np.asarray(out["integral"][0]) - np.asarray(out["dense"][0])).max())
    return {"boxes": num_boxes, "image": image_size, "steps": 10, "rounds": rounds,
            "seconds_per_image": t,
            "cpu_seconds_per_image": {m: v["cpu"] for m, v in tc.items()},
            "first_call_seconds": first,
            "boxes_per_second": {m: num_boxes / t[m]["median"] for m in t},
            "speedup": t["dense"]["median"] / t["integral"]["median"],
            "speedup_cpu": tc["dense"]["cpu"]["median"] / tc["integral"]["cpu"]["median"],
            "max_box_difference_px": diff}


# Table 2's hyperparameters of the benchmarked methods (the paper's sec. 4.2), as in
# experiments/ebm_regression/table2_detection.py
HYPERPARAMETERS = {"nce": {"sigmas": (0.075, 0.15, 0.3)},
                   "nce+": {"sigmas": (0.075, 0.15, 0.3), "beta": 0.1},
                   "ml-is": {"sigmas": (0.0375, 0.075, 0.15)}}


def bench_train_step(method: str, *, boxes: int, channels: int, hidden: int, pool: int,
                     image_size: int, strides=(4, 8, 16, 32), canonical_size: float = 224.0,
                     num_samples: int = 128, rounds: int = 3) -> dict:
    """Head training steps per second with each pooling path, interleaved: `boxes`
    ground-truth boxes per step, each with its image's FPN levels, M = num_samples, the
    detection recipe's train step."""
    from ebm_jax.energy.boxes import make_detection_loss
    from ebm_jax.train import create_train_state, make_mesh, make_train_step, replicate

    rng = np.random.default_rng(0)
    levels = [rng.normal(size=(boxes, image_size // s, image_size // s, channels))
              .astype(np.float32) for s in strides]
    gt = _boxes(rng, boxes, image_size)[:, None].astype(np.float32)
    batch = (levels, gt, rng.integers(1, 81, (boxes, 1)).astype(np.int32),
             np.ones((boxes, 1), bool))
    mesh = make_mesh(1)
    calls, first = {}, {}
    for m in POOL_METHODS:
        head = DetectionEnergyHead(channels, 80, hidden=hidden, pool_size=pool,
                                   strides=strides, canonical_size=canonical_size,
                                   pool_method=m, rngs=nnx.Rngs(0))
        opt = optax.sgd(1e-3, momentum=0.9)
        graphdef, state = create_train_state(head, opt, jax.random.key(0))
        loss_fn = make_detection_loss(method, num_samples, **HYPERPARAMETERS[method])
        step = make_train_step(graphdef, loss_fn, opt, mesh)
        holder = {"state": replicate(state, mesh)}

        def call(step=step, holder=holder):
            holder["state"], _ = step(holder["state"], batch)
            jax.block_until_ready(holder["state"])

        t0 = time.perf_counter()
        call()
        first[m] = time.perf_counter() - t0
        calls[m] = call
    tc = interleaved_wall_cpu(calls, rounds)
    t = {m: v["wall"] for m, v in tc.items()}
    return {"method": method, "boxes": boxes, "channels": channels, "hidden": hidden,
            "pool": pool, "levels": len(strides), "image": image_size,
            "num_samples": num_samples, "rounds": rounds, "seconds_per_step": t,
            "cpu_seconds_per_step": {m: v["cpu"] for m, v in tc.items()},
            "steps_per_second": {m: 1.0 / t[m]["median"] for m in t},
            "speedup": t["dense"]["median"] / t["integral"]["median"],
            "speedup_cpu": tc["dense"]["cpu"]["median"] / tc["integral"]["cpu"]["median"],
            "first_call_seconds": first}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=Path("results/bench"))
    p.add_argument("--boxes", type=int, default=100)
    p.add_argument("--rounds", type=int, default=3,
                   help="interleaved rounds per comparison (default 3)")
    args = p.parse_args(argv)
    bench_run = BenchRun(__file__, argv)
    for name in ("boxes", "rounds"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    load_start = os.getloadavg()
    pools = [bench_pool(args.boxes, 64, 256, repeats=args.rounds),
             bench_pool(args.boxes, 128, 64, repeats=args.rounds)]
    refine = bench_refine(args.boxes, rounds=args.rounds)
    train = [bench_train_step("nce+", boxes=16, channels=256, hidden=1024, pool=7,
                              image_size=256, rounds=args.rounds),
             bench_train_step("nce+", boxes=16, channels=32, hidden=128, pool=5,
                              image_size=128, strides=(4, 8), canonical_size=96.0,
                              rounds=args.rounds)]
    load_end = os.getloadavg()
    device = jax.devices()[0]
    meta = {"device": f"{device.platform} ({device.device_kind})",
            "cpu": platform.processor() or platform.machine(), "jax": jax.__version__,
            "cpu_count": os.cpu_count(), "load_average_start": load_start,
            "load_average_end": load_end}
    lines = [f"{meta['cpu_count']} CPU cores ({meta['device']}), JAX {meta['jax']}; median "
             f"(min-max) of {args.rounds} rounds, alternatives interleaved; load average "
             f"{load_start[0]:.1f} before, {load_end[0]:.1f} after.", "",
             "## PrRoIPool 7x7", "",
             "| boxes | map | channels | JAX boxes/s | direct per-pixel boxes/s | speed-up "
             "wall / CPU | max rel. difference |", "|---:|---:|---:|---:|---:|---:|---:|"]
    for r in pools:
        lines.append(f"| {r['boxes']} | {r['map']}x{r['map']} | {r['channels']} | "
                     f"{r['jax_boxes_per_second']:.0f} | {r['direct_boxes_per_second']:.1f} | "
                     f"{r['speedup']:.0f}x / {r['speedup_cpu']:.0f}x | "
                     f"{r['max_relative_difference']:.1e} |")
    def rng_s(t):
        return f"{t['median']:.3f} ({t['min']:.3f}-{t['max']:.3f})"

    lines += ["", "## Refinement, paper-size head", "",
              f"The head 12544 -> 1024 -> 1024 -> 81, T = 10, "
              f"{refine['boxes']} boxes on a {refine['image']}x{refine['image']} image "
              "(4 FPN levels, 256 channels), the two pooling paths interleaved "
              f"({refine['rounds']} rounds; largest difference of the refined boxes "
              f"{refine['max_box_difference_px']:.1e} px):", "",
              "| PrRoIPool | s per image (min-max) | CPU s per image | boxes/s | "
              "first call s |", "|---|---:|---:|---:|---:|"]
    for m in POOL_METHODS:
        lines.append(f"| {m} | {rng_s(refine['seconds_per_image'][m])} | "
                     f"{rng_s(refine['cpu_seconds_per_image'][m])} | "
                     f"{refine['boxes_per_second'][m]:.0f} | "
                     f"{refine['first_call_seconds'][m]:.1f} |")
    lines += ["", f"Integral over dense: {refine['speedup']:.1f}x wall, "
              f"{refine['speedup_cpu']:.1f}x CPU.", "",
              "## Head training", "",
              "NCE+, M = 128, 16 ground-truth boxes per step, the two "
              "pooling paths interleaved:", "",
              "| head | image | FPN levels | PrRoIPool | s/step (min-max) | CPU s/step | "
              "steps/s | first call s |", "|---|---:|---:|---|---:|---:|---:|---:|"]
    for r in train:
        for m in POOL_METHODS:
            lines.append(f"| pool {r['pool']}, {r['channels']} ch, FC {r['hidden']} | "
                         f"{r['image']} | {r['levels']} | {m} | "
                         f"{rng_s(r['seconds_per_step'][m])} | "
                         f"{rng_s(r['cpu_seconds_per_step'][m])} | "
                         f"{r['steps_per_second'][m]:.2f} | "
                         f"{r['first_call_seconds'][m]:.1f} |")
        lines.append(f"| | | | integral over dense | {r['speedup']:.1f}x | "
                     f"{r['speedup_cpu']:.1f}x | | |")
    bench_run.write(args.out, "detection_ops", {**meta, "pool": pools, "refine": refine,
                                             "train": train},
                 "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
