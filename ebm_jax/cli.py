"""Command line: `ebm-jax <experiment> [options]`.

    ebm-jax regression1d                     # quick Table 1 (about 5 min, 2 CPU cores)
    ebm-jax regression1d --profile paper     # the paper's protocol, 20 models x 75 epochs
    ebm-jax regression1d --sweep-m           # Figure 2: D_KL against M
    ebm-jax moco                             # MoCo on digits + ablations (~10 min)
    ebm-jax instdisc                         # InstDisc (memory bank + NCE) on digits
    ebm-jax detection                        # Table 2: EBM box refinement (generated data)
    ebm-jax detection --sweep-m --sweep-beta --sweep-sigma   # Figures 3-5, Table 3
    ebm-jax plot-metrics runs/regression1d   # loss curves of a run to PNG
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np

from ebm_jax.io import atomic_savefig as _atomic_savefig
from ebm_jax.io import atomic_write as _atomic_write


def _positive_int(name):
    def parse(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{name} must be an integer >= 1, got {text!r}"
            ) from None
        if v < 1:
            raise argparse.ArgumentTypeError(f"{name} must be an integer >= 1, got {v}")
        return v

    return parse


def _launch_options(p) -> None:
    """Options every training experiment shares: multi-host start and progress bars."""
    p.add_argument("--distributed", action="store_true",
                   help="multi-host: call jax.distributed.initialize() first")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def _regression1d_parser(sub) -> None:
    p = sub.add_parser(
        "regression1d",
        help="Table 1 / Figure 2 of 'How to Train Your EBM for Regression' (1D)",
        description="Trains the Table 1 method variants on the two 1D datasets and "
        "scores them by D_KL to the exact ground truth.",
    )
    p.add_argument("--profile", choices=["quick", "paper"], default="quick",
                   help="quick: ~5 min on 2 CPU cores; paper: 20 models x 75 epochs, M=1024")
    p.add_argument("--methods", nargs="+", default=None,
                   help="method variants (default: all nine of Table 1)")
    p.add_argument("--datasets", nargs="+", type=int, default=None, help="1 and/or 2")
    p.add_argument("--num-models", type=_positive_int("--num-models"), default=None)
    p.add_argument("--epochs", type=_positive_int("--epochs"), default=None)
    p.add_argument("--num-samples", type=_positive_int("--num-samples"), default=None,
                   help="M for the sampling-based methods (ML-MCMC: number of chains)")
    p.add_argument("--mcmc-models", type=_positive_int("--mcmc-models"), default=None,
                   help="ensemble size for ML-MCMC-L with L >= 16 (default: --num-models)")
    p.add_argument("--top-k", type=_positive_int("--top-k"), default=None)
    p.add_argument("--grid", type=_positive_int("--grid"), default=None,
                   help="evaluation grid size per axis (default 2048)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sweep-m", action="store_true",
                   help="Figure 2: D_KL against M in {1, 2, ..., 1024} for ML-IS, KLD-IS, "
                   "NCE and NCE+ (instead of Table 1)")
    p.add_argument("--sweep-values", nargs="+", type=_positive_int("--sweep-values"),
                   default=None, help="M values of --sweep-m (default 1 2 4 ... 1024)")
    p.add_argument("--out", type=Path, default=Path("results/regression1d"))
    p.add_argument("--run-dir", type=Path, default=None,
                   help="checkpoints and records, one stage per method and dataset "
                   "(default runs/regression1d/<profile>); rerunning resumes from them")
    p.add_argument("--restart", action="store_true",
                   help="delete the stages' checkpoints and start over")
    p.add_argument("--save-every", type=_positive_int("--save-every"), default=5,
                   help="checkpoint every n epochs (default 5)")
    p.add_argument("--devices", type=_positive_int("--devices"), default=None,
                   help="data-parallel devices (default 1; the batch of 32 must divide)")
    _launch_options(p)
    p.set_defaults(func=_run_regression1d)


def _resolve_regression1d(args):
    """Validates everything before any training or writing; returns the plan."""
    from ebm_jax.data import toy1d
    from ebm_jax.experiments import regression1d as r

    profile = r.PROFILES[args.profile]
    overrides = {}
    if args.num_models is not None:
        overrides["num_models"] = args.num_models
    if args.epochs is not None:
        overrides["epochs"] = args.epochs
    if args.num_samples is not None:
        overrides["num_samples"] = args.num_samples
        overrides["mcmc_samples"] = args.num_samples
    if args.top_k is not None:
        overrides["top_k"] = args.top_k
    if args.grid is not None:
        overrides["grid"] = args.grid
    profile = dataclasses.replace(profile, **overrides)
    if profile.top_k > profile.num_models:
        profile = dataclasses.replace(profile, top_k=profile.num_models)

    default_methods = r.SWEEP_METHODS if args.sweep_m else r.METHODS
    methods = [r.check_method(m) for m in (args.methods or default_methods)]
    datasets = [toy1d.check_dataset(d) for d in (args.datasets or toy1d.DATASETS)]
    sweep = tuple(args.sweep_values or r.SWEEP_M)
    # Build every loss once, so that bad hyperparameters fail here.
    from ebm_jax.energy import make_loss

    for m in methods:
        for d in datasets:
            name, hp = r.method_hyperparameters(m, d, profile)
            make_loss(name, **hp)
    if args.out.exists() and not args.out.is_dir():
        raise ValueError(f"--out must be a directory, got the file {args.out}")
    return profile, methods, datasets, sweep


def _run_regression1d(args) -> int:
    try:
        profile, methods, datasets, sweep = _resolve_regression1d(args)
    except ValueError as e:
        print(f"ebm-jax regression1d: error: {e}", file=sys.stderr)
        return 2
    from ebm_jax.train import CheckpointError, ConfigMismatchError

    try:
        return _train_regression1d(args, profile, methods, datasets, sweep)
    except (CheckpointError, ConfigMismatchError) as e:
        print(f"ebm-jax regression1d: error: {e}", file=sys.stderr)
        return 2


def _train_regression1d(args, profile, methods, datasets, sweep) -> int:

    from ebm_jax.train import initialize_distributed, is_main_process, make_mesh

    initialize_distributed(args.distributed)
    import jax

    from ebm_jax.experiments import regression1d as r

    devices = args.devices or (len(jax.devices()) if args.distributed else 1)
    try:
        mesh = make_mesh(devices)
        if profile.batch_size % devices:
            raise ValueError(f"--devices must divide the batch size {profile.batch_size}, "
                             f"got {devices}")
    except ValueError as e:
        print(f"ebm-jax regression1d: error: {e}", file=sys.stderr)
        return 2
    run_dir = args.run_dir or Path("runs/regression1d") / args.profile
    common = dict(seed=args.seed, run_dir=run_dir, restart=args.restart,
                  save_every_epochs=args.save_every, mesh=mesh,
                  progress=not args.no_progress)
    writer = is_main_process()
    out: Path = args.out
    started = time.time()
    meta = {
        "profile": args.profile,
        "settings": dataclasses.asdict(profile),
        "seed": args.seed,
        "jax": jax.__version__,
        "devices": [str(d) for d in jax.devices()],
        "command": "ebm-jax " + " ".join(sys.argv[1:]) if sys.argv[0].endswith("ebm-jax")
        else " ".join(sys.argv),
    }
    records, best_scores = [], {}

    if args.sweep_m:
        for m_value in sweep:
            for d in datasets:
                for method in methods:
                    res = r.run_one(method, d, profile, num_samples=m_value, **common)
                    records.append(res.record(profile.top_k))
            if writer:
                _write_sweep(out, records, meta, started)
        print(r.sweep_markdown(records))
        return 0

    for d in datasets:
        for method in methods:
            p = profile
            if args.mcmc_models and method.startswith("ml-mcmc-") and int(method[8:]) >= 16:
                p = dataclasses.replace(profile, num_models=args.mcmc_models,
                                        top_k=min(profile.top_k, args.mcmc_models))
            res = r.run_one(method, d, p, **common)
            records.append(res.record(p.top_k))
            best_scores[(method, d)] = res.best_scores
            if writer:
                _write_table(out, records, meta, datasets, started)
    if writer:
        _plot_densities(out, best_scores, datasets, profile.grid)
    print(r.table_markdown(records, datasets))
    print(f"wrote {out / 'results.json'}, {out / 'table.md'} and density plots")
    return 0


def _write_table(out: Path, records, meta, datasets, started) -> None:
    from ebm_jax.experiments import regression1d as r

    payload = {**meta, "wall_seconds": time.time() - started, "records": records}
    _atomic_write(out / "results.json", json.dumps(payload, indent=2) + "\n")
    _atomic_write(out / "table.md", r.table_markdown(records, datasets))


def _write_sweep(out: Path, records, meta, started) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ebm_jax.experiments import regression1d as r

    payload = {**meta, "wall_seconds": time.time() - started, "records": records}
    _atomic_write(out / "sweep_m.json", json.dumps(payload, indent=2) + "\n")
    _atomic_write(out / "sweep_m.md", r.sweep_markdown(records))
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for method in dict.fromkeys(rec["method"] for rec in records):
        ms = sorted({rec["num_samples"] for rec in records if rec["method"] == method})
        kl = [np.mean([rec["kl_top5"] for rec in records
                       if rec["method"] == method and rec["num_samples"] == m]) for m in ms]
        ax.plot(ms, kl, marker="o", label=method)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("M (samples per example)")
    ax.set_ylabel("D_KL (top-k mean, datasets averaged)")
    ax.grid(alpha=0.3)
    ax.legend()
    _atomic_savefig(fig, out / "sweep_m.png")
    plt.close(fig)


def _plot_densities(out: Path, best_scores, datasets, grid: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ebm_jax.data import toy1d

    extent = (-3, 3, -3, 3)
    for d in datasets:
        items = [(m, s) for (m, dd), s in best_scores.items() if dd == d and s is not None]
        if not items:
            continue
        p_true = toy1d.ground_truth_grid(d, grid, grid)
        n = len(items) + 1
        cols = min(n, 5)
        rows = -(-n // cols)
        fig, axes = plt.subplots(rows, cols, figsize=(3 * cols, 2.8 * rows), squeeze=False)
        panels = [("ground truth", p_true)]
        for m, s in items:
            s = s - s.max(axis=1, keepdims=True)
            q = np.exp(s)
            panels.append((f"{m} (best model)", q / q.sum(axis=1, keepdims=True)))
        vmax = np.quantile(p_true, 0.999)
        for ax, (title, dens) in zip(axes.flat, panels):
            ax.imshow(dens.T, origin="lower", extent=extent, aspect="auto", vmin=0, vmax=vmax,
                      cmap="viridis")
            ax.set_title(title, fontsize=9)
            ax.set_xlabel("x")
            ax.set_ylabel("y")
        for ax in list(axes.flat)[len(panels):]:
            ax.axis("off")
        fig.suptitle(f"p(y|x), dataset {d}")
        fig.tight_layout()
        _atomic_savefig(fig, out / f"density_dataset{d}.png")
        plt.close(fig)


def _check_out_and_devices(args) -> int:
    """Checks --out (a directory, if it exists) and --devices (at most the devices JAX
    sees); returns the device count (default 1, all with --distributed)."""
    import jax

    if args.out.exists() and not args.out.is_dir():
        raise ValueError(f"--out must be a directory, got the file {args.out}")
    devices = args.devices or (len(jax.devices()) if args.distributed else 1)
    if devices > len(jax.devices()):
        raise ValueError(f"--devices must be in [1, {len(jax.devices())}] (the devices "
                         f"JAX sees), got {devices}; on a CPU, JAX_NUM_CPU_DEVICES=n "
                         "gives n devices")
    return devices


def _contrastive_parser(sub, name: str) -> None:
    from ebm_jax.experiments.contrastive import ABLATIONS

    what = {"moco": "MoCo (queue, momentum encoder, shuffled BN)",
            "instdisc": "InstDisc (memory bank + NCE)"}[name]
    p = sub.add_parser(
        name, help=f"{what}: pretrain, then linear evaluation",
        description=f"Pretrains {what} and, for comparison, a supervised encoder of the "
        "same size, then evaluates each frozen encoder (and a randomly initialised one) "
        "with a linear classifier and a kNN monitor. Each run is a pretraining stage and "
        "a linear-evaluation stage of one run directory; rerunning resumes.")
    p.add_argument("--profile", choices=["quick", "cifar"], default="quick",
                   help="quick: digits, small ResNet-18, ~10 min on 2 CPU cores with every "
                   "ablation; cifar: MoCo's single-device CIFAR-10 recipe (needs "
                   "--data-root and a GPU)")
    p.add_argument("--data", choices=["embedded", "digits", "opencv-digits", "cifar10",
                                      "folder"], default=None,
                   help="dataset (default: the profile's; embedded = OpenCV's digits when "
                   "Debian's opencv-doc is installed, else scikit-learn's)")
    p.add_argument("--data-root", default=None,
                   help="local path of cifar10 (cifar-10-batches-py) or of an image "
                   "folder (train/<class>/*, val/<class>/*); nothing is downloaded")
    default_ablations = list(ABLATIONS) if name == "moco" else []
    p.add_argument("--ablations", nargs="*", choices=list(ABLATIONS),
                   default=default_ablations,
                   help=f"ablation tables (default: {' '.join(default_ablations) or 'none'})")
    p.add_argument("--epochs", type=_positive_int("--epochs"), default=None)
    p.add_argument("--batch-size", type=_positive_int("--batch-size"), default=None)
    p.add_argument("--width", type=_positive_int("--width"), default=None,
                   help="ResNet base width (64 in the published nets)")
    p.add_argument("--image-size", type=_positive_int("--image-size"), default=None)
    p.add_argument("--queue-size", type=_positive_int("--queue-size"), default=None)
    p.add_argument("--momentum", type=float, default=None,
                   help="MoCo key-encoder momentum m in [0, 1]")
    p.add_argument("--temperature", type=float, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--plot", choices=["tsne", "pca", "none"], default="tsne",
                   help="2-D embedding of the test features (default tsne)")
    p.add_argument("--out", type=Path, default=Path("results") / name)
    p.add_argument("--run-dir", type=Path, default=None,
                   help="checkpoints and records (default runs/contrastive/<profile>; "
                   "shared by `moco` and `instdisc`, whose baselines then train once)")
    p.add_argument("--restart", action="store_true",
                   help="delete the runs' checkpoints and results and start over")
    p.add_argument("--devices", type=_positive_int("--devices"), default=None,
                   help="data-parallel devices (default 1; MoCo then shuffles batch norm "
                   "across devices instead of across groups of the batch)")
    _launch_options(p)
    p.set_defaults(func=_run_contrastive, experiment=name)


def _run_contrastive(args) -> int:
    name = args.experiment
    from ebm_jax.train import (
        CheckpointError,
        ConfigMismatchError,
        initialize_distributed,
        is_main_process,
        make_mesh,
    )

    initialize_distributed(args.distributed)

    from ebm_jax.experiments import contrastive as c

    try:
        overrides = {k: v for k, v in (
            ("epochs", args.epochs), ("batch_size", args.batch_size), ("width", args.width),
            ("image_size", args.image_size), ("queue_size", args.queue_size),
            ("momentum", args.momentum), ("temperature", args.temperature)) if v is not None}
        if args.momentum is not None and not 0.0 <= args.momentum <= 1.0:
            raise ValueError(f"--momentum must be in [0, 1], got {args.momentum}")
        if args.temperature is not None and not args.temperature > 0:
            raise ValueError(f"--temperature must be > 0, got {args.temperature}")
        profile = dataclasses.replace(c.PROFILES[args.profile], **overrides)
        devices = _check_out_and_devices(args)
        mesh = make_mesh(devices)
        data = c.load_data(profile, data=args.data, data_root=args.data_root,
                           seed=args.seed)
        c.plan(name, profile, args.ablations)
    except (ValueError, FileNotFoundError) as e:
        print(f"ebm-jax {name}: error: {e}", file=sys.stderr)
        return 2
    run_dir = args.run_dir or Path("runs/contrastive") / args.profile
    try:
        payload = c.run_experiment(
            name, profile, data, run_dir=run_dir, out=args.out, mesh=mesh,
            ablations=args.ablations, seed=args.seed, restart=args.restart,
            progress=not args.no_progress, plot=args.plot, writer=is_main_process())
    except (ValueError, CheckpointError, ConfigMismatchError) as e:
        print(f"ebm-jax {name}: error: {e}", file=sys.stderr)
        return 2
    print(c.report_markdown(payload["tables"], profile, payload))
    print(f"wrote {args.out / (name + '.json')} and {args.out / (name + '.md')}")
    return 0


def _float_in(name, low, high=None):
    def parse(text):
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {text!r}") from None
        if not (np.isfinite(v) and v > low and (high is None or v <= high)):
            allowed = f"in ({low}, {high}]" if high is not None else f"> {low}"
            raise argparse.ArgumentTypeError(f"{name} must be {allowed}, got {v}")
        return v

    return parse


def _detection_parser(sub) -> None:
    from ebm_jax.experiments.detection import METHODS, TABLE2_METHODS

    p = sub.add_parser(
        "detection", help="Table 2 / Figures 3-5 / Table 3: EBM box refinement",
        description="Trains a feature-pyramid backbone (stage `backbone`), then one "
        "detection energy head per method on its frozen features (stages `head-...`), "
        "and scores the detector's boxes before and after guided NMS + gradient-ascent "
        "refinement with the COCO evaluator. Without --coco-root the benchmark is "
        "generated: shapes on textured backgrounds, training boxes with annotation "
        "noise, and a simulated detector. Rerunning resumes every stage.")
    p.add_argument("--profile", choices=["quick", "paper", "tiny"], default="quick",
                   help="quick: generated data, ~10 min on 2 CPU cores for Table 2; paper: "
                   "the paper's head and schedule (use with --coco-root and a GPU); tiny: "
                   "a smoke run")
    p.add_argument("--methods", nargs="+", choices=sorted(METHODS),
                   default=list(TABLE2_METHODS), help="Table 2 methods (default all eight)")
    p.add_argument("--sweep-m", action="store_true",
                   help="Figures 3 and 4: ML-IS, KLD-IS, NCE, NCE+ at M in --m-values")
    p.add_argument("--m-values", nargs="+", type=_positive_int("--m-values"), default=None,
                   help="M values of --sweep-m (default 1 2 4 ... 128)")
    p.add_argument("--sweep-beta", action="store_true", help="Figure 5: NCE+ against beta")
    p.add_argument("--sweep-sigma", action="store_true", help="Table 3: NCE sigmas")
    p.add_argument("--num-samples", type=_positive_int("--num-samples"), default=None,
                   help="M per ground-truth box (default 128)")
    p.add_argument("--head-steps", type=_positive_int("--head-steps"), default=None)
    p.add_argument("--backbone-steps", type=_positive_int("--backbone-steps"), default=None)
    p.add_argument("--learning-rate", type=_float_in("--learning-rate", 0.0), default=None,
                   help="head SGD learning rate (paper 1e-3)")
    p.add_argument("--step-scale", type=_float_in("--step-scale", 0.0), default=None,
                   help="multiplies the paper's refinement step lengths (default 1)")
    p.add_argument("--annotation-noise", type=float, default=None,
                   help="std of the generated training boxes' noise in the relative box "
                   "space (default 0.1; >= 0)")
    p.add_argument("--num-train", type=_positive_int("--num-train"), default=None)
    p.add_argument("--num-val", type=_positive_int("--num-val"), default=None)
    p.add_argument("--coco-root", type=Path, default=None,
                   help="a real COCO-format dataset: annotations/instances_<split>.json "
                   "and <split>/ image folders (nothing is downloaded)")
    p.add_argument("--detections", type=Path, default=None,
                   help="the detector's results on the val split (COCO result JSON)")
    p.add_argument("--train-split", default="train2017")
    p.add_argument("--val-split", default="val2017")
    p.add_argument("--data-root", type=Path, default=None,
                   help="where the generated benchmark is written (default RUN_DIR/data)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("results/detection"))
    p.add_argument("--run-dir", type=Path, default=None,
                   help="checkpoints, records and evaluations (default "
                   "runs/detection/<profile>); rerunning resumes from them")
    p.add_argument("--restart", action="store_true",
                   help="delete the stages' checkpoints and evaluations and start over")
    p.add_argument("--devices", type=_positive_int("--devices"), default=None,
                   help="data-parallel devices (default 1; must divide the batch)")
    _launch_options(p)
    p.set_defaults(func=_run_detection)


def _run_detection(args) -> int:
    from ebm_jax.train import (
        CheckpointError,
        ConfigMismatchError,
        initialize_distributed,
        is_main_process,
        make_mesh,
    )

    initialize_distributed(args.distributed)

    from ebm_jax.experiments import detection as d

    run_dir = args.run_dir or Path("runs/detection") / args.profile
    try:
        overrides = {k: v for k, v in (
            ("head_steps", args.head_steps), ("backbone_steps", args.backbone_steps),
            ("learning_rate", args.learning_rate), ("step_scale", args.step_scale),
            ("annotation_noise", args.annotation_noise), ("num_train", args.num_train),
            ("num_val", args.num_val), ("num_samples", args.num_samples),
            ("m_values", tuple(args.m_values) if args.m_values else None))
            if v is not None}
        if args.annotation_noise is not None and not (
                np.isfinite(args.annotation_noise) and args.annotation_noise >= 0):
            raise ValueError(f"--annotation-noise must be >= 0, got {args.annotation_noise}")
        profile = dataclasses.replace(d.PROFILES[args.profile], **overrides)
        devices = _check_out_and_devices(args)
        for name, batch in (("boxes_per_batch", profile.boxes_per_batch),
                            ("backbone_batch", profile.backbone_batch)):
            if batch % devices:
                raise ValueError(f"--devices {devices} must divide the profile's {name} "
                                 f"({batch})")
        mesh = make_mesh(devices)
        tables = d.plan(profile, methods=args.methods, sweep_m=args.sweep_m,
                        sweep_beta=args.sweep_beta, sweep_sigma=args.sweep_sigma)
        data = d.make_data(profile, root=args.data_root or run_dir / "data", seed=args.seed,
                           coco_root=args.coco_root, detections=args.detections,
                           train_split=args.train_split, val_split=args.val_split)
    except (ValueError, FileNotFoundError) as e:
        print(f"ebm-jax detection: error: {e}", file=sys.stderr)
        return 2
    try:
        payload = d.run_experiment(profile, data, run_dir=run_dir, out=args.out, mesh=mesh,
                                   tables=tables, seed=args.seed, restart=args.restart,
                                   progress=not args.no_progress, writer=is_main_process())
    except (ValueError, CheckpointError, ConfigMismatchError) as e:
        print(f"ebm-jax detection: error: {e}", file=sys.stderr)
        return 2
    print(d.report_markdown(payload["tables"], payload))
    print(f"wrote {args.out / 'detection.json'} and {args.out / 'detection.md'}")
    return 0


def _plot_metrics_parser(sub) -> None:
    p = sub.add_parser("plot-metrics", help="draw the loss curves of a run to PNG")
    p.add_argument("run_dir", metavar="RUN_DIR",
                   help="a run (or stage) directory holding metrics.jsonl files")
    p.add_argument("--out", type=Path, default=None,
                   help="PNG to write (default RUN_DIR/metrics.png)")
    p.set_defaults(func=_run_plot_metrics)


def _run_plot_metrics(args) -> int:
    from ebm_jax.train.records import plot_metrics

    try:
        out = plot_metrics(args.run_dir, args.out)
    except FileNotFoundError as e:
        print(f"ebm-jax plot-metrics: error: {e}", file=sys.stderr)
        return 2
    print(out)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ebm-jax", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    _regression1d_parser(sub)
    _contrastive_parser(sub, "moco")
    _contrastive_parser(sub, "instdisc")
    _detection_parser(sub)
    _plot_metrics_parser(sub)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
