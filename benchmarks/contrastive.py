"""Pretraining throughput (images per second) of the contrastive methods: one jitted,
donated train step per call, as `ebm-jax moco` runs it, timed after compilation.

    python benchmarks/contrastive.py                       # quick profile (digits)
    python benchmarks/contrastive.py --profile cifar --steps 5   # ResNet-18, 32x32x3

Writes <out>/contrastive.{json,md}. Also times the same MoCo step scanned over 10 steps
per call (`steps_per_call=10`), which XLA's CPU backend runs much slower for convnets.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import time
from pathlib import Path

import jax
import numpy as np
import optax

from ebm_jax.data.images import ImageData
from ebm_jax.experiments import contrastive as c
from ebm_jax.io import write_report
from ebm_jax.train import create_train_state, make_mesh, make_train_step, replicate


def fake_data(profile: c.Profile, channels: int, n: int) -> ImageData:
    """Random images of the profile's size (throughput does not depend on content)."""
    rng = np.random.default_rng(0)
    s = profile.image_size
    x = rng.random((n, s, s, channels), np.float32)
    y = (np.arange(n) % 10).astype(np.int32)
    return ImageData("random", x, y, x[:10], y[:10], 10)


def time_method(spec, profile, data, *, steps: int, steps_per_call: int = 1) -> dict:
    mesh = make_mesh(1)
    built = c.build_model(spec, profile, data, seed=0)
    opt = optax.sgd(0.01, momentum=0.9)
    graphdef, state = create_train_state(built.model, opt, jax.random.key(0),
                                         trainable=built.trainable)
    step = make_train_step(graphdef, c.make_loss(spec, profile), opt, mesh,
                           trainable=built.trainable, steps_per_call=steps_per_call)
    state = replicate(state, mesh)
    b = profile.batch_size
    idx = np.arange(b)
    one = {"instdisc": (data.train_images[:b], idx.astype(np.int32)),
           "memory-bank": (data.train_images[:b], idx.astype(np.int32)),
           "supervised": (data.train_images[:b], data.train_labels[:b])}.get(
               spec.method, data.train_images[:b])
    batch = one if steps_per_call == 1 else jax.tree.map(
        lambda a: np.stack([a] * steps_per_call), one)
    t0 = time.perf_counter()
    state, _ = step(state, batch)
    jax.block_until_ready(state)
    compile_s = time.perf_counter() - t0
    calls = max(1, steps // steps_per_call)
    t0 = time.perf_counter()
    for _ in range(calls):
        state, _ = step(state, batch)
        jax.block_until_ready(state)
    dt = (time.perf_counter() - t0) / (calls * steps_per_call)
    return {"method": spec.name, "steps_per_call": steps_per_call,
            "seconds_per_step": dt, "images_per_second": b / dt,
            "first_call_seconds": compile_s}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--profile", choices=sorted(c.PROFILES), default="quick")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--out", type=Path, default=Path("results/bench"))
    args = p.parse_args(argv)
    profile = c.PROFILES[args.profile]
    if args.batch_size:
        profile = dataclasses.replace(profile, batch_size=args.batch_size)
    channels = 3 if profile.dataset in ("cifar10", "folder") else 1
    data = fake_data(profile, channels, max(4 * profile.batch_size, profile.queue_size))
    rows = []
    for method in ("moco", "end-to-end", "memory-bank", "instdisc", "supervised"):
        rows.append(time_method(c.default_spec(method, profile), profile, data,
                                steps=args.steps))
        print(json.dumps(rows[-1]))
    rows.append(time_method(c.default_spec("moco", profile), profile, data,
                            steps=max(10, args.steps), steps_per_call=10))
    print(json.dumps(rows[-1]))
    device = jax.devices()[0]
    meta = {"profile": args.profile, "batch_size": profile.batch_size,
            "image_size": profile.image_size, "channels": channels,
            "arch": profile.arch, "width": profile.width,
            "device": f"{device.platform} ({device.device_kind})",
            "cpu": platform.processor() or platform.machine(), "jax": jax.__version__}
    lines = [f"Pretraining throughput, profile {args.profile}: {profile.arch} width "
             f"{profile.width}, {profile.image_size}x{profile.image_size}x{channels}, "
             f"batch {profile.batch_size}, on {meta['device']}", "",
             "| method | steps per call | s / step | images / s | first call s |",
             "|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['method']} | {r['steps_per_call']} | "
                     f"{r['seconds_per_step']:.3f} | {r['images_per_second']:.0f} | "
                     f"{r['first_call_seconds']:.1f} |")
    write_report(args.out, f"contrastive_{args.profile}", {**meta, "rows": rows},
                 "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
