"""Detection box refinement with an energy-based head: Table 2 (methods), Figures 3
and 4 (M), Figure 5 (NCE+ beta) and Table 3 (NCE sigmas) of the paper's sec. 4.2.

Stages, shared by every config of the same data and settings (default workdir
`runs/detection`):

- `backbone`: a feature pyramid (`ebm_jax.models.fpn`) trained with a dense box head on
  the training boxes; frozen afterwards.
- `head-<method>-m<M>[-<hyperparameter><value>]`: one energy head per method and
  setting, trained on the frozen levels with SGD (momentum 0.9, weight decay, the
  schedule of `ebm_jax.train.schedules.warmup_step_decay`); every head starts from the
  same parameters and sees the same boxes, so methods differ only in their loss. Its
  `eval.json` caches AP / AP50 / AP75 of the detector's boxes before and after guided
  NMS and T gradient-ascent steps (`ebm_jax.eval.coco.evaluate_refinement`).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ebm_jax.config import Checks, ConfigError
from ebm_jax.energy.boxes import parse_method
from ebm_jax.recipes.detection_plan import (HeadSpec, count_stages, head_spec,
                                            method_hyperparameters, plan, step_lengths)

TABLES = ("table2", "m", "beta", "sigma")
TABLE2_METHODS = ("ml-is", "ml-mcmc-1", "ml-mcmc-4", "ml-mcmc-8", "kld-is", "nce", "dsm",
                  "nce+")


@dataclasses.dataclass(frozen=True)
class Config:
    name: str = "custom"  # the variant, shown in the report
    # what to run: Table 2 ("table2"), Figures 3-4 ("m"), Figure 5 ("beta"), Table 3
    tables: tuple[str, ...] = ("table2",)
    methods: tuple[str, ...] = TABLE2_METHODS  # Table 2's rows
    m_methods: tuple[str, ...] = ("ml-is", "kld-is", "nce", "nce+")  # Figure 3's lines
    m_values: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128)
    betas: tuple[float, ...] = (0.025, 0.05, 0.1, 0.2, 0.3, 0.5)  # Figure 5
    sigma_sets: tuple[tuple[float, float, float], ...] = (  # Table 3
        (0.0125, 0.025, 0.05), (0.025, 0.05, 0.1), (0.05, 0.1, 0.2), (0.075, 0.15, 0.3),
        (0.1, 0.2, 0.4))
    # the methods' hyperparameters (the paper's sec. 4.2), M = num_samples
    num_samples: int = 128
    is_sigmas: tuple[float, ...] = (0.0375, 0.075, 0.15)  # ML-IS and KLD-IS proposal
    kld_label_sigma: float = 0.0225
    mcmc_step_size: float = 1e-5
    nce_sigmas: tuple[float, ...] = (0.075, 0.15, 0.3)  # NCE and NCE+ noise
    nce_plus_beta: float = 0.1
    dsm_sigma: float = 0.075
    # refinement step lengths (loss, l_c for cx and cy, l_s for log w and log h)
    step_lengths: tuple[tuple[str, float, float], ...] = (
        ("nce+", 8e-4, 3.2e-3), ("ml-is", 4e-4, 1.6e-3), ("kld-is", 4e-4, 1.6e-3),
        ("nce", 4e-4, 1.6e-3), ("dsm", 2.5e-5, 1e-4), ("ml-mcmc", 2.5e-5, 1e-4))
    # data: "generated" (written under data_root, default <workdir>/data) or "coco"
    data: str = "generated"
    coco_root: str | None = None  # annotations/instances_<split>.json and <split>/
    detections: str | None = None  # the detector's COCO result file on val_split
    train_split: str = "train2017"
    val_split: str = "val2017"
    # the split whose boxes are refined and scored: "val" (where hyperparameters are
    # chosen: the sweeps) or "test" (held out: the reported tables); with COCO, "test"
    # needs a labelled held-out split and the detector's boxes on it
    eval_split: str = "val"
    test_split: str | None = None
    test_detections: str | None = None
    data_root: str | None = None
    num_train: int = 240
    num_val: int = 80
    num_test: int = 80
    image_size: int = 128
    num_classes: int = 4
    max_objects: int = 4
    min_size: int = 12
    annotation_noise: float = 0.1
    detector_iou: tuple[float, float] = (0.5, 0.9)
    false_positives: float = 1.0
    detector_candidates: float = 4.0  # boxes per found object before NMS, on average
    detector_confusion: float = 0.2  # chance a candidate is also given another class
    # backbone stage
    widths: tuple[int, ...] = (32, 64)
    channels: int = 32
    backbone_steps: int = 300
    backbone_batch: int = 16
    backbone_lr: float = 3e-3
    # head stages
    hidden: int = 128
    pool_size: int = 5
    canonical_size: float = 96.0
    # the head's PrRoIPool: "dense" (the whole-map contraction) or "integral" (integral
    # images, `ebm_jax.ops.prroi_pool_integral`: the same values to float32 precision,
    # 4x faster refinement at the paper's size; training speed about the same)
    pool_method: str = "dense"
    head_steps: int = 300
    boxes_per_batch: int = 16
    learning_rate: float = 1e-2
    weight_decay: float = 1e-4
    warmup_steps: int = 30
    grad_clip: float | None = None  # global gradient-norm limit (None: none, as the paper)
    feature_cache_gib: float = 2.0  # frozen features are kept in memory up to this
    # prediction
    refine_steps: int = 10
    step_scale: float = 1.0  # multiplies every step length
    score_threshold: float = 0.05
    max_detections: int = 100
    # IoU-guided NMS (Jiang et al. 2018, IoU-Net) on the detector's boxes before NMS; false: the
    # boxes are a detector's output after its own NMS and are refined as they are
    guided_nms: bool = True
    nms_iou: float = 0.5
    seed: int = 0
    # every stage repeated over these seeds (each with its own generated data,
    # simulated detector, backbone and heads); tables give mean +- sd. None: `seed`
    seeds: tuple[int, ...] | None = None
    # the paper's figures: Table 2 (method, AP, AP50, AP75), Table 3 (sigmas..., AP)
    reference_table2: tuple[tuple[str, float, float, float], ...] = ()
    reference_table3: tuple[tuple[float, float, float, float], ...] = ()

    def __post_init__(self):
        c = Checks(self)
        c.each_in("tables", TABLES)
        for field in ("methods", "m_methods"):
            if not getattr(self, field):
                raise ConfigError(f"--config.{field} must be a non-empty list")
            for m in getattr(self, field):
                try:
                    parse_method(m)
                except ValueError as e:
                    raise ConfigError(f"--config.{field}: {e}") from None
        for v in self.m_values:
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"--config.m_values must be integers >= 1, got "
                                  f"{self.m_values!r}")
        if not self.m_values or not self.betas or not self.sigma_sets:
            raise ConfigError("--config.m_values, betas and sigma_sets must be non-empty")
        _floats("betas", self.betas, low=0.0)
        for s in self.sigma_sets:
            if len(s) != 3:
                raise ConfigError(f"--config.sigma_sets must hold 3 sigmas per set, got {s!r}")
            _floats("sigma_sets", s, low=0.0, strict=True)
        for name in ("is_sigmas", "nce_sigmas"):
            _floats(name, getattr(self, name), low=0.0, strict=True)
            if not getattr(self, name):
                raise ConfigError(f"--config.{name} must be a non-empty list")
        for name in ("kld_label_sigma", "mcmc_step_size", "dsm_sigma", "backbone_lr",
                     "learning_rate", "canonical_size", "step_scale", "feature_cache_gib"):
            c.positive(name)
        c.float_range("nce_plus_beta", 0.0, 1e6)
        families = {row[0] for row in self.step_lengths}
        for row in self.step_lengths:
            if len(row) != 3 or not all(isinstance(v, (int, float)) and v > 0
                                        for v in row[1:]):
                raise ConfigError("--config.step_lengths rows must be (loss, l_c, l_s) "
                                  f"with l_c, l_s > 0, got {row!r}")
        for m in self.methods + self.m_methods:
            if parse_method(m)[0] not in families:
                raise ConfigError(f"--config.step_lengths has no row for {m} (loss "
                                  f"{parse_method(m)[0]}); it has {sorted(families)}")
        c.one_of("data", ("generated", "coco"))
        if self.data == "generated" and (self.coco_root or self.detections
                                          or self.test_split or self.test_detections):
            raise ConfigError("--config.coco_root, detections, test_split and "
                              "test_detections need --config.data=coco (the generated "
                              "benchmark simulates its detector)")
        c.one_of("eval_split", ("val", "test"))
        c.one_of("pool_method", ("dense", "integral"))
        if self.data == "coco" and self.eval_split == "test" and not (
                self.test_split and self.test_detections):
            raise ConfigError("--config.eval_split=test with --config.data=coco needs "
                              "--config.test_split (a labelled split held out from "
                              "tuning) and --config.test_detections (the detector's "
                              "boxes on it)")
        for name, low in (("num_samples", 1), ("num_train", 1), ("num_val", 1),
                          ("num_test", 1),
                          ("image_size", 16), ("num_classes", 1), ("max_objects", 1),
                          ("min_size", 2), ("channels", 1), ("backbone_steps", 1),
                          ("backbone_batch", 1), ("hidden", 1), ("pool_size", 1),
                          ("head_steps", 1), ("boxes_per_batch", 1), ("warmup_steps", 1),
                          ("refine_steps", 1), ("max_detections", 1)):
            c.int_range(name, low)
        c.int_range("num_classes", 1, 8)  # one drawn shape per class
        if self.data == "generated" and self.min_size > self.image_size // 2:
            raise ConfigError(f"--config.min_size must be <= image_size / 2 = "
                              f"{self.image_size // 2}, got {self.min_size}")
        if not self.widths or any(isinstance(w, bool) or w < 1 for w in self.widths):
            raise ConfigError(f"--config.widths must be integers >= 1, got {self.widths!r}")
        top = 4 * 2 ** (len(self.widths) - 1)
        if self.image_size % top:
            raise ConfigError(f"--config.image_size must be a multiple of the top stride "
                              f"{top} of {len(self.widths)} levels, got {self.image_size}")
        c.float_range("annotation_noise", 0.0, 10.0)
        lo, hi = self.detector_iou
        if not 0.0 < lo <= hi < 1.0:
            raise ConfigError(f"--config.detector_iou must satisfy 0 < low <= high < 1, "
                              f"got {self.detector_iou!r}")
        c.float_range("false_positives", 0.0, 100.0)
        c.float_range("detector_candidates", 1.0, 100.0)
        c.float_range("detector_confusion", 0.0, 1.0)
        c.float_range("nms_iou", 0.0, 1.0, open_low=True, open_high=True)
        c.float_range("weight_decay", 0.0, 1.0)
        if self.grad_clip is not None:
            c.positive("grad_clip")
        c.float_range("score_threshold", 0.0, 1.0, open_high=True)
        c.seed()
        if self.seeds is not None and (not self.seeds or len(set(self.seeds)) != len(
                self.seeds) or not all(isinstance(v, int) and not isinstance(v, bool)
                                       and 0 <= v < 2**31 for v in self.seeds)):
            raise ConfigError("--config.seeds must be distinct integers in [0, 2^31), "
                              f"got {self.seeds!r}")

    @property
    def run_seeds(self) -> tuple[int, ...]:
        return tuple(self.seeds) if self.seeds else (self.seed,)


def _floats(field, values, *, low, strict=False):
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v) \
                or (v <= low if strict else v < low):
            raise ConfigError(f"--config.{field} must be finite numbers "
                              f"{'>' if strict else '>='} {low}, got {values!r}")


# --------------------------------------------------------------------------- the plan


# --------------------------------------------------------------------------- check


def _feature_levels(cfg: Config) -> tuple[int, ...]:
    return tuple(4 * 2**i for i in range(len(cfg.widths)))


def _losses(cfg: Config, tables) -> None:
    from ebm_jax.energy.boxes import make_detection_loss

    for spec in dict.fromkeys(s for rows in tables.values() for s in rows):
        try:
            make_detection_loss(spec.method, spec.num_samples, **spec.hp)
        except ValueError as e:
            raise ValueError(f"{spec.name}: {e}") from None


def extras(cfg: Config) -> tuple[str, ...]:
    """COCO AP (pycocotools) scores every detection run."""
    return ("coco",)


def check(cfg: Config, ctx) -> None:
    """Everything that can be checked before any data is opened or generated."""
    from ebm_jax import checks
    from ebm_jax.detection import feature_bytes

    if cfg.data == "coco":
        for field in ("coco_root", "detections"):
            if getattr(cfg, field) is None:
                raise ValueError(f"--config.{field} is needed with --config.data=coco "
                                 "(a COCO-format dataset and the detector's val results)")
        checks.existing_dir("--config.coco_root", cfg.coco_root)
        from etils import epath

        for field in ("detections", "test_detections"):
            path = getattr(cfg, field)
            if path is not None and not epath.Path(path).is_file():
                raise ValueError(f"--config.{field} {path} does not exist (the "
                                 "detector's COCO result file on the "
                                 f"{'val' if field == 'detections' else 'test'} split)")
    if cfg.data_root is not None:
        checks.existing_dir("--config.data_root", cfg.data_root)
    devices = ctx.num_devices
    for field in ("boxes_per_batch", "backbone_batch"):
        if getattr(cfg, field) % devices:
            raise ValueError(f"--devices {devices} must divide --config.{field} "
                             f"({getattr(cfg, field)})")
    tables = plan(cfg)
    per_image = feature_bytes(cfg.image_size, _feature_levels(cfg), cfg.channels)
    cache = cfg.feature_cache_gib * 2**30
    scored = cfg.num_val if cfg.eval_split == "val" else cfg.num_test
    sizes = (cfg.num_train, scored) if cfg.data == "generated" else (None, None)
    if cfg.data == "generated":
        checks.fits_in_memory("the generated images (kept in memory)",
                              sum(sizes) * cfg.image_size**2 * 3 * 4,
                              hint="lower --config.num_train, num_val, num_test or "
                              "image_size")
    cached = sum(cache if n is None else min(cache, n * per_image) for n in sizes)
    checks.fits_in_memory(f"the cached frozen features (train and {cfg.eval_split})",
                          cached,
                          hint="lower --config.feature_cache_gib")
    m = max(s.num_samples for rows in tables.values() for s in rows)
    pooled = cfg.pool_size**2 * cfg.channels + 2 * cfg.hidden
    checks.fits_in_memory(
        f"a head batch ({cfg.boxes_per_batch} boxes x M={m} samples x {pooled} features, "
        "forward and backward)",
        cfg.boxes_per_batch * ((m + 1) * pooled * 4 * 3 + per_image),
        hint="lower --config.boxes_per_batch or M")
    _losses(cfg, tables)


# --------------------------------------------------------------------------- run


def _run_seed(cfg: Config, ctx, tables) -> tuple[dict, dict, dict, object]:
    """Every head of `tables` for the seed of `ctx`: ({stage name: row}, data info,
    backbone figures, data)."""
    from ebm_jax import detection as det
    from ebm_jax.eval import coco
    from ebm_jax.recipes.detection_stages import backbone_stage, head_stage, open_data

    data = open_data(cfg, ctx)
    det.box_index(data.train)  # a set without a box is an error before training
    backbone_id, backbone_figures, backbone = backbone_stage(cfg, ctx, data)
    cache = cfg.feature_cache_gib * 2**30
    train_feats = det.FeatureSource(backbone, data.train, cache_bytes=cache,
                                    progress=ctx.progress)
    val_feats = det.FeatureSource(backbone, data.val, cache_bytes=cache,
                                  progress=ctx.progress)
    specs = list(dict.fromkeys(s for rows in tables.values() for s in rows))
    results: dict[str, dict] = {}
    for i, spec in enumerate(specs, 1):
        stage, head_id, figures, head = head_stage(cfg, ctx, spec, data, train_feats,
                                                   backbone_id)
        row = {"stage": spec.name, "method": spec.method, "num_samples": spec.num_samples,
               "hyperparameters": spec.hp, "steps": figures.steps,
               "seconds_per_iteration": figures.seconds_per_step,
               "final_loss": figures.final_loss, "finite": figures.finite}
        if figures.finite:
            settings = dict(step_lengths=step_lengths(cfg, spec.method),
                            refine_steps=cfg.refine_steps,
                            score_threshold=cfg.score_threshold,
                            max_detections=cfg.max_detections,
                            guided_nms=cfg.guided_nms, nms_iou=cfg.nms_iou)
            identity = {"head": head_id, "val": data.identity["val"],
                        "detections": data.identity["detections"], **settings}
            row.update(ctx.cached(stage.dir(ctx), "eval", identity, lambda: (
                coco.evaluate_refinement(head, data.val, val_feats, data.detections,
                                        progress=ctx.progress, **settings))))
        results[spec.name] = row
        ap = (f"AP {100 * row['initial']['AP']:.1f} -> {100 * row['refined']['AP']:.1f}"
              if "refined" in row else "loss not finite: not evaluated")
        ctx.log(f"[{i}/{len(specs)}] {spec.name} (seed {ctx.seed}): {ap}")
    return results, data.identity, backbone_figures.asdict(), data


def run(cfg: Config, ctx):
    from ebm_jax.report import Report
    from ebm_jax.report.detection import (
        aggregate_seeds,
        detection_figures,
        detection_markdown,
    )

    tables = plan(cfg)
    seeds = cfg.run_seeds
    per_seed, identities, backbones = [], [], []
    data = None
    for seed in seeds:
        results, identity, backbone, data = _run_seed(cfg, ctx.with_seed(seed), tables)
        per_seed.append(results)
        identities.append(identity)
        backbones.append(backbone)
    rows = {name: [aggregate_seeds([r[s.name] for r in per_seed], seeds) for s in specs_]
            for name, specs_ in tables.items()}
    info = {"name": cfg.name, "data": data.kind, "num_train": len(data.train),
            "num_val": len(data.val), "eval_split": cfg.eval_split,
            "guided_nms": cfg.guided_nms, "seeds": list(seeds),
            "image_size": cfg.image_size,
            "classes": data.train.num_classes, **{k: getattr(cfg, k) for k in (
                "pool_size", "channels", "hidden", "head_steps", "boxes_per_batch",
                "refine_steps")}}
    payload = {"tables": rows, "data": {**info, "identity": identities[0],
                                        "identities": identities},
               "backbone": backbones[0], "backbones": backbones,
               "reference": {"table2": [list(r) for r in cfg.reference_table2],
                             "table3": [list(r) for r in cfg.reference_table3]}}
    markdown = detection_markdown(rows, info, reference_table2=cfg.reference_table2,
                                  reference_table3=cfg.reference_table3)
    figures = detection_figures(rows, reference_table3=cfg.reference_table3)
    return Report(payload, markdown, figures)


__all__ = ["Config", "HeadSpec", "check", "count_stages", "head_spec",
           "method_hyperparameters", "plan", "run", "step_lengths"]
