"""Box-Siam: SiamFC (Bertinetto et al. 2016) trained on ground-truth boxes, the
fully-supervised baseline of SoCL (seed 003, Table 2), evaluated with the OTB and GOT-10k
toolkit metrics beside two trackers that learn nothing: one that never moves (the first
box in every frame) and SiamFC with its random initial backbone.

Stages (see `ebm_jax.recipes.tracking_stages`):

    <workdir>/data/<split>-<hash>         the generated benchmark (train and test splits,
                                          disjoint photos)
    <workdir>/box-siam-s<seed>-<hash>     training, one stage per training seed
    <workdir>/eval-<tracker>-<hash>/      per-sequence results of each tracker and set

The training seeds (`seeds`) give the error bars: each seed trains its own Box-Siam
from its own random start, and the random-backbone baseline of that seed is that start.
No hyperparameter is tuned: the tracking and training settings are SiamFC's published
ones (REFERENCE.md sec. 4); only the model width, the number of steps and the data size
are scaled to the machine.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from ebm_jax import checks
from ebm_jax.config import Checks, ConfigError
from ebm_jax.recipes import tracking_stages as stages
from ebm_jax.report import Report
from ebm_jax.report import tracking as report
from ebm_jax.report.statistics import mean_sd, sequence_difference
from ebm_jax.train.stages import RunContext

__all__ = ["Config", "check", "run"]

TRACKERS = ("static", "random", "box-siam")


@dataclasses.dataclass(frozen=True)
class Config:
    """The defaults are the quick profile (2 CPU cores, about 20 minutes)."""

    train_data: str = "generated"  # "generated", or "got10k" (needs got10k_root)
    data_root: str | None = None  # where the generated benchmark goes (default <workdir>/data)
    got10k_root: str | None = None  # a local GOT-10k (train/, val/): val is evaluated
    otb_root: str | None = None  # a local OTB folder: evaluated when given
    num_train_sequences: int = 60
    num_test_sequences: int = 40
    num_frames: int = 100
    frame_height: int = 240
    frame_width: int = 320
    point_shift: float = 20.0  # px, the noisy point annotation's shift (for SoCL)
    box_every: int = 10  # T of the sparse box annotations (for SoCL)
    width: float = 0.5  # AlexNet channel multiplier (1.0: the published net)
    steps: int = 1500
    batch_size: int = 8
    lr_start: float = 1e-2
    lr_end: float = 1e-5
    momentum: float = 0.9
    weight_decay: float = 5e-4
    max_gap: int = 100  # frames of a training pair are fewer than this apart
    seeds: tuple[int, ...] = (0,)  # training seeds (Box-Siam and its random start)
    strip_sequences: int = 3  # test sequences drawn as a strip of frames with boxes
    strip_frames: int = 6
    reference: tuple[tuple[str, str], ...] = ()
    reference_note: str = ""
    seed: int = 0  # the data's seed

    def __post_init__(self):
        c = Checks(self)
        c.one_of("train_data", ("generated", "got10k"))
        for f in ("num_train_sequences", "num_test_sequences", "steps", "batch_size",
                  "max_gap", "box_every"):
            c.int_range(f, 1)
        c.int_range("num_frames", 2)
        c.int_range("frame_height", 64, 4096)
        c.int_range("frame_width", 64, 4096)
        c.int_range("strip_sequences", 0)
        c.int_range("strip_frames", 1, 20)
        c.float_range("point_shift", 0.0, 1000.0)
        c.float_range("width", 0.0625, 4.0)
        c.positive("lr_start")
        c.positive("lr_end")
        c.float_range("momentum", 0.0, 1.0, open_high=True)
        c.float_range("weight_decay", 0.0, 1.0)
        c.seed()
        if self.lr_end > self.lr_start:
            raise ConfigError(f"--config.lr_end ({self.lr_end}) must be <= "
                              f"--config.lr_start ({self.lr_start})")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds) or not all(
                isinstance(s, int) and not isinstance(s, bool) and 0 <= s < 2**31
                for s in self.seeds):
            raise ConfigError("--config.seeds must be distinct integers in [0, 2^31), "
                              f"got {self.seeds!r}")
        if self.train_data == "got10k" and self.got10k_root is None:
            raise ConfigError("--config.train_data=got10k needs --config.got10k_root (a "
                              "local GOT-10k folder with train/ and val/)")


def check(cfg: Config, ctx: RunContext) -> None:
    """Every error that can be known before training: roots, devices, memory, then the
    data itself (generated once; every sequence validated by its reader)."""
    for field in ("got10k_root", "otb_root"):
        if getattr(cfg, field) is not None:
            checks.existing_dir(f"--config.{field}", getattr(cfg, field))
    if cfg.batch_size % ctx.num_devices:
        raise ValueError(f"--config.batch_size {cfg.batch_size} must be divisible by "
                         f"--devices {ctx.num_devices}")
    stages.generated_specs(cfg, ctx)  # the generator's own checks of the sizes
    from ebm_jax.models.alexnet import alexnet_flops

    region = int(round(1.25 * 255))
    checks.fits_in_memory(
        f"a training batch ({cfg.batch_size} pairs of {region}x{region} regions, AlexNet "
        f"width {cfg.width})",
        # activations of forward + backward: ~4 bytes per FLOP / 10 is generous for AlexNet
        cfg.batch_size * 0.4 * (alexnet_flops(cfg.width, 255) + alexnet_flops(cfg.width, 127)),
        hint="lower --config.batch_size or --config.width")
    data = _open(cfg, ctx)
    from ebm_jax.data.tracking_pairs import pair_batches

    pair_batches(data.train, batch_size=cfg.batch_size, max_gap=cfg.max_gap, seed=0)


def _open(cfg: Config, ctx: RunContext) -> stages.TrackingData:
    key = (id(ctx), cfg)
    if _open.cache.get("key") != key:
        _open.cache.update(key=key, data=stages.open_data(cfg, ctx))
    return _open.cache["data"]


_open.cache = {}


def run(cfg: Config, ctx: RunContext) -> Report:
    data = _open(cfg, ctx)
    results: dict[str, dict[str, list[dict]]] = {}  # set -> tracker -> one row per seed
    training, models = {}, {}
    for seed in cfg.seeds:
        name, identity, figures, model = stages.train_box_siam(cfg, ctx, data, seed)
        training[name] = {"identity_hash": ctx.stage_dir(name, identity).name,
                          **figures.asdict()}
        models[seed] = (identity, model, stages.build_model(cfg, ctx, name))
    for set_name, sequences in data.eval_sets.items():
        set_id = data.identity[set_name]
        rows: dict[str, list[dict]] = {t: [] for t in TRACKERS}
        recs = stages.evaluate(ctx, "static", {"set": set_id}, set_name, sequences,
                               stages.static_boxes, progress_desc=f"static on {set_name}")
        rows["static"].append({"seed": None, **stages.scores(recs, sequences)})
        for seed, (identity, trained, start) in models.items():
            for tracker, model, ident in (
                    ("random", start, {"start_of": identity}),
                    ("box-siam", trained, {"trained": identity})):
                ident = {**ident, "set": set_id, "tracking": dataclasses.asdict(
                    stages.settings_of(cfg))}
                recs = stages.evaluate(ctx, f"{tracker}-s{seed}", ident, set_name,
                                       sequences, stages.siamfc_runner(model, cfg),
                                       progress_desc=f"{tracker} s{seed} on {set_name}")
                row = {"seed": seed, **stages.scores(recs, sequences)}
                rows[tracker].append(row)
                if set_name == "generated-test":
                    rows[tracker][-1]["boxes"] = {r["name"]: r["boxes"]
                                                  for r in recs[:cfg.strip_sequences]}
                ctx.log(f"{tracker} (seed {seed}) on {set_name}: AUC {row['auc']:.3f}, "
                        f"precision {row['precision']:.3f}, AO {row['ao']:.3f}, "
                        f"{row['fps'] or 0:.1f} FPS")
        results[set_name] = rows
    summary = {s: {t: {k: dict(zip(("mean", "sd"), mean_sd([x.get(k) for x in r])))
                       for k in ("auc", "precision", "norm_precision", "ao", "sr50",
                                 "sr75", "fps")}
                   for t, r in rows.items()} for s, rows in results.items()}
    for s, rows in results.items():
        auc = {t: [r["sequence_auc"] for r in rows[t]] for t in TRACKERS}
        summary[s]["box-siam vs static"] = sequence_difference(auc["box-siam"], auc["static"])
        summary[s]["box-siam vs random"] = sequence_difference(auc["box-siam"], auc["random"])
    test = data.eval_sets["generated-test"]
    strips = test[:cfg.strip_sequences]
    title = (f"Box-Siam (SiamFC, AlexNet width {cfg.width}) trained {cfg.steps} steps on "
             f"{len(data.train)} generated sequences; seeds {list(cfg.seeds)}")
    markdown = report.report_markdown(summary, title=title, seeds=cfg.seeds,
                                      reference=dict(cfg.reference),
                                      reference_note=cfg.reference_note)
    figures = {}
    for s in results:
        curves = {t: results[s][t] for t in TRACKERS}
        figures[f"{s}_success.png"] = functools.partial(report.success_figure, curves, s)
        figures[f"{s}_precision.png"] = functools.partial(report.precision_figure, curves, s)
        markdown += f"\n![success plot, {s}]({s}_success.png) " \
                    f"![precision plot, {s}]({s}_precision.png)\n"
    if strips:
        preds = {t: results["generated-test"][t][0]["boxes"] for t in ("random", "box-siam")}
        figures["strips.png"] = functools.partial(report.strip_figure, strips, preds,
                                                  cfg.strip_frames)
        markdown += "\n![frames with the true (green) and tracked boxes](strips.png)\n"
    for rows in results.values():
        for r in rows["random"] + rows["box-siam"]:
            r.pop("boxes", None)
    payload = {"experiment": "box-siam", "train_sequences": len(data.train),
               "eval_sets": {s: len(v) for s, v in data.eval_sets.items()},
               "training": training, "tables": results, "summary": summary,
               "reference": dict(cfg.reference)}
    return Report(payload, markdown, figures)
