"""The stages of the tracking recipe (`ebm_jax.recipes.tracking`): the data, the training
stage of each Siamese tracker, and the per-sequence evaluation cache; the data are
opened by `ebm_jax.recipes.tracking.data` (re-exported here).

    <workdir>/data/<split>-<hash>.records     the generated benchmark (its spec + seed;
                                              `ebm_jax.recipes.tracking.data`)
    <workdir>/box-siam-s<seed>-<hash>         SiamFC trained on boxes (checkpoints, metrics)
    <workdir>/eval-<tracker>-<hash>/<set>/    one JSON per sequence (boxes, seconds per
                                              frame) in an `ItemCache`: a stopped
                                              evaluation resumes at the first sequence
                                              without one

Every `cfg` here is the recipe's Config (`ebm_jax.recipes.tracking.Config`), which
this module never imports: a recipe imports its stages, never the reverse.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from typing import Any, NamedTuple

import numpy as np

from ebm_jax.config import ConfigError
from ebm_jax.data.tracking_pairs import PORT_PAIRS
from ebm_jax.io import CorruptFileError, read_json
from ebm_jax.recipes.item_cache import FULL_PRECISION, ItemCache
from ebm_jax.recipes.tracking.data import (TrackingData, annotation_identity,  # noqa: F401
                                           generated_specs, open_data)
from ebm_jax.tracking.siamfc import SiamFCSettings
from ebm_jax.tracking.siamfc_training import PORT_TRAINING


class Trained(NamedTuple):
    """One arm's model of one seed: `identity` names it in its evaluation's identity
    ({"trained": the training stage's identity}, or what an untrained start is the start
    of); `figures` are its training's (None when nothing was trained); `stage` is the
    training stage's name (None when untrained)."""

    model: Any
    identity: dict
    figures: Any = None
    stage: str | None = None


# SiamFC's published tracking and training settings (Bertinetto et al. 2016, SiamFC): a value, not
# a config field (nothing here is tuned)
SIAMFC = SiamFCSettings()

# SiamFC's training pairs (`--config.siamfc_training`): the settings of its training
# crops and the pair sampler's arguments (`pair_batches`), this project's or the
# PyTorch port's (`siamfc_training.PORT_TRAINING`, `tracking_pairs.PORT_PAIRS`)
SIAMFC_TRAINING = {
    "project": (SIAMFC, {}),
    "port": (dataclasses.replace(SIAMFC, **PORT_TRAINING), PORT_PAIRS),
}


def training_identity(cfg, data_identity, seed: int, data=None) -> dict:
    settings, pairs = SIAMFC_TRAINING[cfg.siamfc_training]
    return {"data": data_identity, "width": cfg.width, "steps": cfg.steps,
            "batch": cfg.batch_size, "lr": [cfg.lr_start, cfg.lr_end],
            "momentum": cfg.momentum, "weight_decay": cfg.weight_decay,
            "max_gap": cfg.max_gap, "settings": settings.identity(),
            **({"pairs": pairs} if pairs else {}),
            "seed": seed, **backbone_identity(cfg, data)}


def backbone_identity(cfg, data=None) -> dict:
    """The backbone's part of a training stage's identity: nothing for SiamFC's AlexNet
    from random weights (the identity stages had before the backbone was a choice), else
    its name and its start: the SHA-256 of the pretrained file's bytes (never its path),
    or with `init="moco"` the MoCo stage's identity (which needs `data`, the run's
    `TrackingData`)."""
    if cfg.backbone == "alexnet" and cfg.pretrained is None and cfg.init == "random":
        return {}
    out = {"backbone": cfg.backbone, "pretrained": None if cfg.pretrained is None
           else _pretrained_file(*_file_stamp(cfg.pretrained))[0]}
    if cfg.init == "moco":
        from ebm_jax.recipes.tracking.backbone_pretraining import moco_stage

        out["moco"] = moco_stage(cfg, held_out(_needs_data(data), cfg)).full_identity
    return out


def _needs_data(data):
    if data is None:
        raise ValueError("init='moco': the backbone's start needs the run's data (the "
                         "frames it is pretrained on)")
    return data


def _file_stamp(path) -> tuple[str, int, int]:
    """(real path, size, modification time): a file read once per stamp."""
    import os

    real = os.path.realpath(path)
    st = os.stat(real)
    return real, st.st_size, st.st_mtime_ns


@functools.lru_cache(maxsize=2)
def _pretrained_file(path: str, size: int, mtime_ns: int) -> tuple[str, dict]:
    """(SHA-256, state dict) of the pretrained file at this stamp: read and hashed once
    per run, not once per stage (every arm and seed builds its start from it). The
    arrays are only read (`load_torchvision_resnet18` copies them)."""
    from ebm_jax.io import file_digests
    from ebm_jax.models.torch_weights import read_torch_state_dict

    return file_digests([path])[0], read_torch_state_dict(path)


def _pretrained_state(path: str) -> dict:
    return _pretrained_file(*_file_stamp(path))[1]


def check_pretrained(cfg) -> None:
    """Before training: `cfg.pretrained` is a file, a state dict the restricted reader
    takes (no code runs, every tensor finite), and its weights fit the backbone at
    `cfg.width` (a ConfigError naming the file and the first misfit)."""
    if cfg.pretrained is None:
        return
    from flax import nnx

    from ebm_jax import checks
    from ebm_jax.models.torch_weights import TorchCheckpointError, load_torchvision_resnet18
    from ebm_jax.models.tracking_backbones import tracking_backbone

    checks.existing_file("--config.pretrained", cfg.pretrained)
    try:
        state = _pretrained_state(cfg.pretrained)  # read (and refused) before any model
        model = tracking_backbone(cfg.backbone, width=cfg.width, rngs=nnx.Rngs(0))
        load_torchvision_resnet18(model, state)
    except TorchCheckpointError as error:
        raise ConfigError(f"--config.pretrained={cfg.pretrained}: {error}") from error


def dcf_settings(cfg):
    """`cfg.dcf` with its levels fixed for `cfg.backbone` (`DCFSettings.for_backbone`:
    AlexNet conv1 + conv5, ResNet-18 conv1 + layer3 unless given): what identities
    record, so that a stage's identity names the levels it used."""
    from ebm_jax.models.tracking_backbones import backbone_class

    return cfg.dcf.for_backbone(backbone_class(cfg.backbone))


def build_model(cfg, ctx, stage_name: str, data=None):
    """The backbone `cfg.backbone` of `cfg.width` with the initial weights of stage
    `stage_name` (the random backbone baseline of that stage), conv1 to layer3 then
    replaced by the ImageNet weights of `cfg.pretrained` where given (the adjust layer
    keeps its random start), or every weight by the MoCo-pretrained backbone's with
    `init="moco"` (trained first if it is not; `data`: the run's `TrackingData`)."""
    from flax import nnx

    from ebm_jax.models.tracking_backbones import tracking_backbone

    model = tracking_backbone(cfg.backbone, width=cfg.width,
                              rngs=nnx.Rngs(ctx.key(stage_name, "init")))
    if cfg.pretrained is not None:
        from ebm_jax.models.torch_weights import load_torchvision_resnet18

        load_torchvision_resnet18(model, _pretrained_state(cfg.pretrained))
    if cfg.init == "moco":
        from ebm_jax.recipes.tracking.backbone_pretraining import pretrained_backbone

        nnx.update(model, nnx.state(pretrained_backbone(cfg, ctx,
                                                        held_out(_needs_data(data), cfg))))
    return model


def train_box_siam(cfg, ctx, data: TrackingData, seed: int, *, sequences=None,
                   data_identity=None, name: str | None = None) -> Trained:
    """The Box-Siam stage of one training seed (resumes). Its start is the random
    backbone baseline of the same seed (`build_model` with the same stage name).
    `sequences` (with `data_identity` and `name`) replace the training split: a subset
    of it, or the same frames with other boxes (BCE-Siam's pseudo boxes)."""
    import optax

    from ebm_jax.data.pipeline import stream_steps
    from ebm_jax.data.tracking_pairs import pair_batches
    from ebm_jax.tracking.siamfc_training import make_siamfc_loss
    from ebm_jax.train import create_train_state, make_train_step, merge_model
    from ebm_jax.train.stages import TrainStage

    if (sequences is None) != (data_identity is None):
        raise ValueError("sequences and data_identity are given together")
    if sequences is None:
        sequences, data_identity = data.train, data.identity["train"]
    name = name or f"box-siam-s{seed}"
    identity = training_identity(cfg, data_identity, seed, data)
    every = max(1, cfg.steps // 20)
    stage = TrainStage(name, identity, cfg.steps, log_every=every, save_every=every * 5)
    model = build_model(cfg, ctx, name, data)
    # the port decays the rate exponentially per epoch from lr_start to lr_end; here per
    # step, along the same curve
    schedule = optax.exponential_decay(cfg.lr_start, transition_steps=cfg.steps,
                                       decay_rate=cfg.lr_end / cfg.lr_start)
    opt = optax.chain(optax.add_decayed_weights(cfg.weight_decay),
                      optax.sgd(schedule, momentum=cfg.momentum))
    graphdef, state = create_train_state(model, opt, stage.key(ctx, "train"))
    settings, pairs = SIAMFC_TRAINING[cfg.siamfc_training]
    step = make_train_step(graphdef, make_siamfc_loss(settings), opt, ctx.mesh)
    batches = stream_steps(pair_batches(
        sequences, batch_size=cfg.batch_size, max_gap=cfg.max_gap,
        seed=ctx.seed_of(name, "pairs"), exemplar_size=settings.exemplar_size,
        search_size=settings.search_size, context=settings.context, **pairs), cfg.steps)
    ctx.log(f"stage {name}: {cfg.steps} steps of {cfg.batch_size} pairs from "
            f"{batches.num_sequences} sequences ({batches.num_frames} usable frames)")
    state, figures = stage.run(ctx, state, step, batches)
    return Trained(merge_model(graphdef, state), {"trained": stage.full_identity}, figures,
                   name)


# --------------------------------------------------------------------------- arms


@dataclasses.dataclass(frozen=True)
class TrackingRun:
    """What an arm's training function gets: the config, the run and the opened data."""

    cfg: Any  # the recipe's Config
    ctx: Any  # the RunContext
    data: TrackingData


def training_split(data: TrackingData, cfg) -> tuple[list, dict]:
    """The sequences the arms train on, and their identity: the training split less
    its last `validation_sequences` (the validation split; all of it when 0). Data whose
    training split is already that (`held_out`) is returned as it is."""
    v, identity = cfg.validation_sequences, data.identity["train"]
    if not v or (isinstance(identity, dict) and identity.get("held_out_last") == v):
        return data.train, identity
    return data.train[:-v], {"sequences": identity, "held_out_last": v}


def held_out(data: TrackingData, cfg) -> TrackingData:
    """`data` whose training split is the arms' (`training_split`)."""
    train, identity = training_split(data, cfg)
    return dataclasses.replace(data, train=train, identity={**data.identity,
                                                            "train": identity})


def validation_split(data: TrackingData, cfg) -> tuple[list, dict]:
    """The last `validation_sequences` of the training split, and their identity."""
    v = cfg.validation_sequences
    return data.train[-v:], {"sequences": data.identity["train"], "last": v}


def box_siam_arm(env: TrackingRun, seed: int, used) -> Trained:
    """Box-Siam: SiamFC trained on the training split's boxes (less the validation
    split, where there is one)."""
    if not env.cfg.validation_sequences:
        return train_box_siam(env.cfg, env.ctx, env.data, seed)
    sequences, identity = training_split(env.data, env.cfg)
    return train_box_siam(env.cfg, env.ctx, env.data, seed, sequences=sequences,
                                 data_identity=identity)


# --------------------------------------------------------------------------- evaluation


def static_boxes(seq) -> tuple[np.ndarray, np.ndarray]:
    """The tracker that never moves: the first box in every frame."""
    return np.repeat(np.asarray(seq.boxes[:1], np.float64), len(seq), axis=0), np.zeros(len(seq))


def siamfc_runner(model, settings: SiamFCSettings = SIAMFC):
    """`run(seq) -> (boxes, seconds)` of SiamFC (its scale search, `settings`) with
    `model`'s features; compiled for each frame size before its first timed frame."""
    from ebm_jax.tracking.siamfc import make_tracker, model_embed

    embed, params = model_embed(model)
    return timed_runner(make_tracker(embed, settings), params)


def dcf_runner(model, settings):
    """`run(seq) -> (boxes, seconds)` of the correlation filter tracker (`settings`, a
    `DCFSettings`) on `model`'s features; compiled before its first timed frame."""
    from ebm_jax.tracking.dcf import make_dcf_tracker

    tracker, params = make_dcf_tracker(model, settings)
    return timed_runner(tracker, params)


def timed_runner(tracker, params):
    """`run(seq) -> (boxes, seconds)` of a pure `tracker` (`init`/`update`) with
    `params`; compiled for each frame size (one init and one update on the first frame)
    before its first timed frame."""
    from ebm_jax.tracking.siamfc import track_sequence

    warmed: set = set()

    def run(seq):
        first = seq.read_frame(0)
        if first.shape not in warmed:  # compile outside the timed frames
            state = tracker.init(params, first, seq.boxes[0])
            tracker.update(params, state, first)
            warmed.add(first.shape)
        frames = (seq.read_frame(i) for i in range(len(seq)))
        return track_sequence(tracker, params, frames, seq.boxes[0])

    return run


def evaluate(ctx, tracker_name: str, identity: dict, eval_set: str, sequences, run,
             *, progress_desc: str) -> list[dict]:
    """Tracks every sequence (cached one JSON per sequence in an `ItemCache`, so that a
    stopped evaluation resumes); returns [{"name", "boxes", "seconds"}] in order."""
    from tqdm.auto import tqdm

    cache = ItemCache(ctx, ctx.stage_dir(f"eval-{tracker_name}", identity), identity,
                      folder=eval_set, what="cached tracking result")
    out = []
    for seq in tqdm(sequences, desc=progress_desc, disable=not ctx.progress, leave=False):
        rec = cache.load(f"{seq.name}.json", functools.partial(read_sequence_result,
                                                               seq=seq))
        if rec is None:
            boxes, seconds = run(seq)
            rec = {"name": seq.name, "frames": len(seq),
                   "boxes": np.asarray(boxes, np.float64).tolist(),
                   "seconds": np.asarray(seconds, np.float64).tolist(),
                   "precision": FULL_PRECISION}
            cache.save(f"{seq.name}.json", json.dumps(rec) + "\n")
        out.append(rec)
    return out



def read_sequence_result(path, seq) -> dict | None:
    """The cached result of `seq` in `path`; None for a result of another length (the
    sequence changed) or one rounded by an earlier version (not `FULL_PRECISION`);
    CorruptFileError for a file that is corrupt (cut short, garbled, boxes or times of
    the wrong shape or not finite)."""
    rec = read_json(path, what="cached tracking result", fix="tracking the sequence again")
    if not isinstance(rec, dict) or not isinstance(rec.get("frames"), int):
        raise CorruptFileError(f"cached tracking result {path} is not a result "
                               "(no frame count); tracking the sequence again")
    if rec["frames"] != len(seq):
        return None
    with np.errstate(invalid="ignore"):
        boxes = np.asarray(rec.get("boxes"), np.float64)
        seconds = np.asarray(rec.get("seconds"), np.float64)
    if (rec.get("name") != seq.name or boxes.shape != (len(seq), 4)
            or seconds.shape != (len(seq),) or not np.isfinite(seconds).all()
            or (seconds < 0).any()):
        raise CorruptFileError(f"cached tracking result {path} does not hold "
                               f"{len(seq)} boxes and times of sequence {seq.name!r}; "
                               "tracking the sequence again")
    if rec.get("precision") != FULL_PRECISION:
        return None  # rounded by an earlier version: stale
    return rec


def scores(records: list[dict], sequences) -> dict:
    """OTB and GOT-10k figures of one tracker on one set, its speed, and the per-sequence
    AUCs (for paired comparisons)."""
    from ebm_jax.eval.tracking import got10k_metrics, otb_metrics, sequence_scores

    preds = [np.asarray(r["boxes"], np.float64) for r in records]
    gts = [np.asarray(s.boxes, np.float64) for s in sequences]
    otb = otb_metrics(preds, gts)
    got = got10k_metrics(preds, gts, visible=[np.asarray(s.visible) for s in sequences],
                         image_sizes=[tuple(s.image_size) for s in sequences])
    seconds = np.concatenate([np.asarray(r["seconds"][1:], np.float64) for r in records])
    fps = float(len(seconds) / seconds.sum()) if seconds.sum() > 0 else None
    per_seq = [sequence_scores(p, g)["auc"] for p, g in zip(preds, gts)]
    return {"auc": otb["auc"], "precision": otb["precision"],
            "norm_precision": otb["norm_precision"], "ao": got["ao"], "sr50": got["sr50"],
            "sr75": got["sr75"], "fps": fps,
            "success_curve": list(map(float, otb["success_curve"])),
            "precision_curve": list(map(float, otb["precision_curve"])),
            "sequence_auc": [float(a) for a in per_seq],
            "num_sequences": len(records), "num_frames": int(sum(len(s) for s in sequences))}
