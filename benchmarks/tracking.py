"""SiamFC speed benchmark: tracking frames per second and training steps per second of
the jitted JAX SiamFC (`ebm_jax.tracking.siamfc`) against an eager PyTorch SiamFC written
from the paper (`benchmarks/torch_siamfc.py`), side by side in one run.

    python benchmarks/tracking.py --out results/bench --torch-python PY [--width 1.0]
        [--torch-device cuda]

- Inputs: a generated sequence (320x240 frames: colour blobs, camera pan, a textured
  target moving and changing size, noise) and a batch of pairs of its frames less than
  100 apart, from --seed; both sides get the same arrays and the same weights (the JAX
  model's, batch norm calibrated on the sequence).
- Tracking FPS: updates per second over frames 2..N (crops, backbone on 3 scales, xcorr,
  x16 bicubic upsampling, penalties, window, argmax; each box brought to the host before
  the next frame). Training steps/s: SGD steps (momentum 0.9, weight decay 5e-4, crops
  from whole frames inside the step, balanced BCE). Both after warm-up; the first calls
  (compilation) are reported apart.
- Interleaved rounds (--repeats): JAX tracking, torch tracking, JAX training, torch
  training; median [min, max]; wall time and CPU time (time.process_time of each
  process, all its threads). JAX runs on XLA's CPU thread pool (one thread per core;
  XLA_FLAGS recorded), torch with --threads intra-op threads (default 1), OpenCV with 1.
- --conv, timed side by side on the same weights: `model` (the layers as built, one
  convolution per group), `grouped` (one XLA convolution with feature_group_count),
  `patchgrad` (one convolution per group; kernel gradients as one matmul of patches).
- Agreement, checked before any timing (the run stops on a failure): each formulation's
  response maps on the same crops match the torch network's (allclose), and the torch
  tracker cropping as JAX does tracks the first --check-frames frames to within
  --box-tol px of the JAX tracker. The timed torch tracker crops as the port does (side
  and corners rounded to pixels): its IoU with the JAX track is reported, not required.

Writes tracking.json and tracking.md under --out: the ratios JAX / torch against the
targets (tracking FPS >= 2x, training steps/s >= 1.5x).

GPU: JAX runs on its default device. `--torch-device cuda` runs the PyTorch baseline on
the GPU too (a --torch-python with a CUDA build of torch), so that both sides share it;
with the default `cpu` on a GPU machine, set JAX_PLATFORMS=cpu for a like-for-like run.
The parts (convolution formulations, inputs) are in benchmarks/siamfc_parts.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from ebm_jax.eval.tracking import box_iou
from ebm_jax.models.alexnet import LAYERS, SiamFCAlexNet, alexnet_flops  # noqa: F401
from ebm_jax.ops.xcorr import xcorr_broadcast
from ebm_jax.tracking import (SiamFCSettings, box_to_center, crop_square, exemplar_side,
                              make_siamfc_loss, make_tracker, model_embed)
from ebm_jax.train import create_train_state, make_mesh, make_train_step, replicate, shard_batch
from ebm_jax.train.records import cpu_name

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_protocol import BenchRun  # noqa: E402
from siamfc_parts import (CONV_FORMULATIONS, FormulatedConv, _patches,  # noqa: E402, F401
                          calibrate_batch_norm, synthetic_sequence, torch_state_dict,
                          training_pairs, with_conv)

FPS_TARGET, STEPS_TARGET = 2.0, 1.5  # JAX / eager PyTorch
SGD = {"lr": 1e-2, "momentum": 0.9, "weight_decay": 5e-4}


class DisagreementError(ValueError):
    """The JAX and PyTorch implementations do not compute the same thing."""


# ------------------------------------------------------------------- the two sides

class TorchBaseline:
    """The eager PyTorch side, a `torch_siamfc.py serve` process of `python`; `ask(cmd)`
    sends one JSON command and returns its reply, raising on an error reply."""

    def __init__(self, python: str, threads: int, device: str = "cpu"):
        self.proc = subprocess.Popen(
            [python, str(HERE / "torch_siamfc.py"), "serve", "--threads", str(threads),
             "--device", device], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.info = self._read()
        if "error" in self.info:  # e.g. CUDA asked for and not there
            self.proc.wait(timeout=30)
            raise RuntimeError(f"torch baseline: {self.info['error']}")

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the torch baseline exited (code {self.proc.wait()})")
        return json.loads(line)

    def ask(self, **cmd) -> dict:
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        reply = self._read()
        if not reply.get("ok", False):
            raise RuntimeError(f"torch baseline, command {cmd['cmd']!r}: {reply.get('error')}")
        return reply

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.ask(cmd="quit")
            finally:
                self.proc.wait(timeout=30)


class JaxSiamFC:
    """The JAX side for one model: `ebm_jax.tracking`'s jitted tracker and the
    `ebm_jax.train` step of its loss, timed like the torch side (wall, CPU seconds)."""

    def __init__(self, model: SiamFCAlexNet, settings: SiamFCSettings, batch: dict,
                 key: jax.Array):
        self.embed, self.params = model_embed(model)
        self.tracker = make_tracker(self.embed, settings)
        train_model = nnx.clone(model)
        train_model.train()
        opt = optax.chain(optax.add_decayed_weights(SGD["weight_decay"]),
                          optax.sgd(SGD["lr"], momentum=SGD["momentum"]))
        graphdef, state = create_train_state(train_model, opt, key)
        mesh = make_mesh(1)
        self.step = make_train_step(graphdef, make_siamfc_loss(settings), opt, mesh)
        # own buffers: the step donates its state, which must not free the tracker's
        self.state = replicate(jax.tree.map(jnp.copy, state), mesh)
        self.batch = shard_batch(batch, mesh)

    def track(self, frames: np.ndarray, first_box) -> dict:
        state = jax.block_until_ready(self.tracker.init(self.params, frames[0], first_box))
        w1, c1 = time.perf_counter(), time.process_time()  # updates only, as torch's
        boxes = [np.asarray(first_box, np.float64)]
        for frame in frames[1:]:
            state, box = self.tracker.update(self.params, state, frame)
            boxes.append(np.asarray(box, np.float64))  # waits for this frame's box
        w2, c2 = time.perf_counter(), time.process_time()
        return {"boxes": np.stack(boxes), "wall": w2 - w1, "cpu": c2 - c1,
                "updates": len(frames) - 1}

    def train(self, steps: int) -> dict:
        w0, c0 = time.perf_counter(), time.process_time()
        losses = []
        for _ in range(steps):
            self.state, metrics = self.step(self.state, self.batch)
            losses.append(float(metrics["loss"]))  # waits for the step
        return {"losses": losses, "wall": time.perf_counter() - w0,
                "cpu": time.process_time() - c0, "steps": steps}


def check_agreement(jax_side: JaxSiamFC, torch_side: TorchBaseline, frames, boxes,
                    settings: SiamFCSettings, workdir: Path, check_frames: int,
                    box_tol: float) -> dict:
    """Response maps of both networks on the same crops (frame 2's target as exemplar,
    frame 3 at the tracker's scales), then boxes tracked with the same crops; raises
    DisagreementError. Also reports the IoU of the port-crop torch track with JAX's."""
    s = settings
    cy, cx, h, w = box_to_center(boxes[1])
    center = jnp.asarray([cy, cx], jnp.float32)
    z_side = float(exemplar_side(h, w, s.context))
    z = crop_square(frames[1], center, z_side, s.exemplar_size)[None]
    x = jnp.stack([crop_square(frames[2], center, z_side * s.search_size / s.exemplar_size
                               * float(f), s.search_size) for f in s.scale_factors])
    embed = jax.jit(jax_side.embed)
    want = np.asarray(xcorr_broadcast(embed(jax_side.params, z)[0],
                                      embed(jax_side.params, x)) * s.response_scale)
    np.savez(workdir / "crops.npz", z_crop=np.asarray(z), x_crops=np.asarray(x))
    torch_side.ask(cmd="response", data=str(workdir / "crops.npz"),
                   out=str(workdir / "responses.npz"))
    with np.load(workdir / "responses.npz") as f:
        got = f["responses"]
    scale = float(np.max(np.abs(want)))
    report = {"response_max_abs": scale,
              "response_max_abs_diff": float(np.max(np.abs(got - want)))
              if got.shape == want.shape else float("inf")}
    if got.shape != want.shape or not np.allclose(got, want, rtol=1e-3, atol=1e-4 * scale):
        raise DisagreementError(f"response maps differ: shapes {got.shape} / {want.shape}, "
                                f"max |diff| {report['response_max_abs_diff']:.3g} (max "
                                f"|response| {scale:.3g})")
    n = check_frames
    mine = jax_side.track(frames[:n], boxes[0])["boxes"]
    same = np.asarray(torch_side.ask(cmd="track", frames=n, crop="continuous")["boxes"])
    port = np.asarray(torch_side.ask(cmd="track", frames=n, crop="port")["boxes"])
    report.update(check_frames=n, box_max_abs_diff=float(np.max(np.abs(same - mine))),
                  port_crop_min_iou=float(np.min(box_iou(port, mine))),
                  min_iou_with_truth=float(np.min(box_iou(mine, boxes[:n]))))
    if not report["box_max_abs_diff"] <= box_tol:
        raise DisagreementError(f"tracked boxes differ by {report['box_max_abs_diff']:.3g} "
                                f"px (> --box-tol {box_tol}) over {n} frames")
    return report


# ------------------------------------------------------------------------- report

def spread(values) -> dict:
    """Median, min and max of per-repeat values, and the values."""
    v = np.asarray(values, np.float64)
    return {"median": float(np.median(v)), "min": float(v.min()), "max": float(v.max()),
            "values": v.tolist()}


def summarize(runs: list[dict], per: str) -> dict:
    """Rate (`per` = "updates" or "steps" per wall second) and wall / CPU seconds per
    update or step, each over the repeats."""
    return {"rate": spread([r[per] / r["wall"] for r in runs]),
            "wall": spread([r["wall"] / r[per] for r in runs]),
            "cpu": spread([r["cpu"] / r[per] for r in runs])}


def _fmt(x: dict, digits: int = 2) -> str:
    return f"{x['median']:.{digits}f} [{x['min']:.{digits}f}, {x['max']:.{digits}f}]"


def markdown(report: dict) -> str:
    env, cfg, info = report["environment"], report["settings"], report["torch_info"]
    trk, trn = report["tracking"], report["training"]
    lines = [f"SiamFC, width {cfg['width']}, {cfg['frame_size'][1]}x{cfg['frame_size'][0]} "
             f"frames, {cfg['frames'] - 1} updates per repeat, training batch "
             f"{cfg['batch_size']}; median [min, max] over {cfg['repeats']} interleaved "
             "repeats.", "", "## Rates", "",
             f"| implementation | tracking FPS | JAX / PyTorch (target {FPS_TARGET:g}x) | "
             f"training steps/s | JAX / PyTorch (target {STEPS_TARGET:g}x) |",
             "|---|---:|---:|---:|---:|",
             f"| PyTorch eager ({info.get('device', 'cpu')}), {info['threads']} thread(s) | "
             f"{_fmt(trk['torch']['rate'])} | "
             f"| {_fmt(trn['torch']['rate'], 3)} | |"]
    for kind in cfg["conv"]:
        lines.append(
            f"| JAX jit, conv `{kind}` | {_fmt(trk['jax'][kind]['rate'])} | "
            f"{trk['ratio'][kind]:.2f}x {'met' if trk['met'][kind] else 'not met'} | "
            f"{_fmt(trn['jax'][kind]['rate'], 3)} | {trn['ratio'][kind]:.2f}x "
            f"{'met' if trn['met'][kind] else 'not met'} |")
    lines += ["", "## Times per call", "",
              "| implementation | wall s / update | CPU s / update | wall s / step | "
              "CPU s / step | first calls s (init, update, step) |",
              "|---|---:|---:|---:|---:|---|",
              f"| PyTorch | {_fmt(trk['torch']['wall'], 3)} | {_fmt(trk['torch']['cpu'], 3)} "
              f"| {_fmt(trn['torch']['wall'])} | {_fmt(trn['torch']['cpu'])} | |"]
    for kind in cfg["conv"]:
        c = report["compile_seconds"][kind]
        lines.append(f"| JAX `{kind}` | {_fmt(trk['jax'][kind]['wall'], 3)} | "
                     f"{_fmt(trk['jax'][kind]['cpu'], 3)} | {_fmt(trn['jax'][kind]['wall'])} | "
                     f"{_fmt(trn['jax'][kind]['cpu'])} | {c['init']:.1f}, {c['update']:.1f}, "
                     f"{c['train_step']:.1f} |")
    a = report["agreement"][cfg["conv"][0]]
    lines += ["", f"Agreement with the same weights (each formulation checked; `"
              f"{cfg['conv'][0]}` shown): response maps max |diff| "
              f"{a['response_max_abs_diff']:.1e} of max |response| {a['response_max_abs']:.2f};"
              f" boxes over {a['check_frames']} frames with the same crops max |diff| "
              f"{a['box_max_abs_diff']:.1e} px, with the port's rounded crops min IoU "
              f"{a['port_crop_min_iou']:.2f}. Backbone {report['gflop_per_update']:.1f} GFLOP "
              f"per update, {report['gflop_per_train_step']:.0f} GFLOP per train step.",
              f"Machine: {env['cpu_count']} CPU cores ({env['cpu']}), {env['platform']}, "
              f"load average {env['load_average_before']} before the run. JAX "
              f"{env['jax']} on {env['jax_device']}, XLA's CPU thread pool over "
              f"{env['cpu_count']} cores, XLA_FLAGS '{env['xla_flags']}'; PyTorch "
              f"{info['torch']} eager on {info.get('device', 'cpu')} (no torch.compile), "
              f"{info['threads']} intra-op "
              f"thread(s), OpenCV {info['cv2']} with 1 thread. CPU time: process_time of "
              "each process (all threads)."]
    return "\n".join(lines) + "\n"


def run(args) -> dict:
    """Builds both sides, checks that they agree, times them interleaved; the report."""
    settings = SiamFCSettings()
    load = os.getloadavg()
    n = max(args.frames, args.check_frames)
    frames, boxes = synthetic_sequence(args.seed, n)
    batch = training_pairs(frames, boxes, args.batch_size, args.seed)
    key = jax.random.key(args.seed)
    model = SiamFCAlexNet(width=args.width, rngs=nnx.Rngs(jax.random.fold_in(key, 0)))
    calibrate_batch_norm(model, jnp.stack([
        crop_square(frames[i], jnp.asarray(box_to_center(boxes[i])[:2], jnp.float32),
                    2 * float(exemplar_side(boxes[i][3], boxes[i][2])), settings.search_size)
        for i in range(0, n, max(1, n // 4))]))
    torch_side = TorchBaseline(args.torch_python, args.threads, args.torch_device)
    runs = {k: {"track": [], "train": []} for k in ("torch", *args.conv)}
    compile_s, agreement = {}, {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            workdir = Path(tmp)
            np.savez(workdir / "weights.npz", **torch_state_dict(model))
            np.savez(workdir / "data.npz", frames=frames, first_box=boxes[0], **batch)
            torch_side.ask(cmd="load", weights=str(workdir / "weights.npz"),
                           data=str(workdir / "data.npz"), width=args.width,
                           settings={**dataclasses.asdict(settings), **SGD})
            sides = {}
            for kind in args.conv:
                side = sides[kind] = JaxSiamFC(with_conv(model, kind), settings, batch,
                                               jax.random.fold_in(key, 1))
                t0 = time.perf_counter()
                state = jax.block_until_ready(side.tracker.init(side.params, frames[0],
                                                                boxes[0]))
                t1 = time.perf_counter()
                jax.block_until_ready(side.tracker.update(side.params, state, frames[1]))
                t2 = time.perf_counter()
                side.train(1)
                compile_s[kind] = {"init": t1 - t0, "update": t2 - t1,
                                   "train_step": time.perf_counter() - t2}
                agreement[kind] = check_agreement(side, torch_side, frames, boxes, settings,
                                                  workdir, args.check_frames, args.box_tol)
                side.train(1)  # warm-up after compilation
                print(f"JAX conv {kind}: first calls {compile_s[kind]}, agreement "
                      f"{agreement[kind]}", flush=True)
            torch_side.ask(cmd="train", steps=1)  # warm-up (tracking warmed by the check)
            for r in range(args.repeats):
                for kind in args.conv:
                    runs[kind]["track"].append(sides[kind].track(frames[:args.frames],
                                                                 boxes[0]))
                runs["torch"]["track"].append(torch_side.ask(cmd="track", frames=args.frames))
                for kind in args.conv:
                    runs[kind]["train"].append(sides[kind].train(args.train_steps))
                runs["torch"]["train"].append(torch_side.ask(cmd="train",
                                                             steps=args.train_steps))
                print(f"repeat {r + 1}/{args.repeats}, wall s: " + ", ".join(
                    f"{k} track {v['track'][-1]['wall']:.2f} train {v['train'][-1]['wall']:.2f}"
                    for k, v in runs.items()), flush=True)
    finally:
        torch_side.close()
    for kind in args.conv:
        losses = [x for r in runs[kind]["train"] for x in r["losses"]]
        if not np.all(np.isfinite(losses)):
            raise FloatingPointError(f"JAX SiamFC (conv {kind}): non-finite training loss")
    report = {
        "environment": {"cpu_count": os.cpu_count(), "cpu": cpu_name(),
                        "platform": platform.platform(),
                        "python": platform.python_version(), "jax": jax.__version__,
                        "jax_device": str(jax.devices()[0].device_kind),
                        "xla_flags": os.environ.get("XLA_FLAGS", ""),
                        "load_average_before": [round(v, 2) for v in load]},
        "torch_info": torch_side.info,
        "settings": {"width": args.width, "frames": args.frames, "repeats": args.repeats,
                     "train_steps": args.train_steps, "batch_size": args.batch_size,
                     "frame_size": list(frames.shape[1:3]), "seed": args.seed,
                     "conv": list(args.conv), "siamfc": dataclasses.asdict(settings),
                     "sgd": SGD},
        "compile_seconds": compile_s, "agreement": agreement,
        "gflop_per_update": settings.scale_num * alexnet_flops(args.width,
                                                               settings.search_size) / 1e9,
        "gflop_per_train_step": 3 * args.batch_size * (
            alexnet_flops(args.width, settings.exemplar_size)
            + alexnet_flops(args.width, settings.search_size)) / 1e9,
    }
    for name, per, target in (("tracking", "updates", FPS_TARGET),
                              ("training", "steps", STEPS_TARGET)):
        part = name[:5]
        torch_summary = summarize(runs["torch"][part], per)
        jax_summary = {k: summarize(runs[k][part], per) for k in args.conv}
        ratio = {k: v["rate"]["median"] / torch_summary["rate"]["median"]
                 for k, v in jax_summary.items()}
        report[name] = {"torch": torch_summary, "jax": jax_summary, "ratio": ratio,
                        "target": target, "met": {k: bool(v >= target) for k, v in ratio.items()}}
    return report


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("results/bench"))
    p.add_argument("--torch-python", required=True,
                   help="a Python with torch, numpy and cv2: the baseline's")
    p.add_argument("--width", type=float, default=1.0, help="channel width multiplier")
    p.add_argument("--conv", nargs="+", default=list(CONV_FORMULATIONS),
                   choices=CONV_FORMULATIONS, help="JAX convolution formulations to time")
    p.add_argument("--frames", type=int, default=40, help="frames tracked per repeat")
    p.add_argument("--train-steps", type=int, default=2, help="train steps per repeat")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--threads", type=int, default=1, help="PyTorch intra-op threads")
    p.add_argument("--torch-device", default="cpu", choices=("cpu", "cuda"),
                   help="where the PyTorch baseline runs (cuda: a CUDA build of torch)")
    p.add_argument("--check-frames", type=int, default=10)
    p.add_argument("--box-tol", type=float, default=0.5,
                   help="largest box difference (px) the agreement check allows")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    bench_run = BenchRun(__file__, argv)
    for name, low in (("repeats", 1), ("train_steps", 1), ("batch_size", 1),
                      ("threads", 1), ("frames", 2), ("check_frames", 2)):
        if getattr(args, name) < low:
            p.error(f"--{name.replace('_', '-')} must be >= {low}, got {getattr(args, name)}")
    if not args.width > 0:
        p.error(f"--width must be > 0, got {args.width}")
    if not Path(args.torch_python).exists():
        p.error(f"--torch-python: {args.torch_python} does not exist")
    args.conv = list(dict.fromkeys(args.conv))
    try:
        report = run(args)
    except RuntimeError as err:
        if "torch baseline:" not in str(err):
            raise
        p.exit(2, f"{p.prog}: error: {err}\n")
    table = markdown(report)
    bench_run.write(args.out, "tracking", report, table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
