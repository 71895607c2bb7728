"""SoCL's sparse-box experiment (Wu & Chan, "Learning Tracking Representations from
Single Point Annotations", sec. 3.4 "Scale Regression-based Tracking", sec. 4.6 and
Table 5): pseudo boxes from a box every T frames and a point in every other frame,
made by SoCL-CF, train a box-regression tracker. Here the regressor is the energy-based
box head (the EBM regression paper, sec. 5, NCE+) on SoCL-Siam's frozen backbone, trained on (a) every
true box, (b) the pseudo boxes at T = `sparse_every`, (c) only the sparse boxes; the
same seeds, the same tracker (SiamFC's centre refined by the head).

    <workdir>/pseudo-boxes-s<seed>-<hash>/T<T>/<sequence>.json   one file per sequence

The pseudo boxes of a seed come from that seed's SoCL-CF (SoCL-Siam's backbone, the
`dcf` settings), for each T of `sparse_every_sweep` (and `sparse_every`), cached per
sequence (resumes; `--restart` computes them again). Their quality against the hidden
true boxes and the annotation cost per frame of each T (the tracker's measured seconds,
not the paper's 0.1 s) are `pseudo_box_sweep`, the experiment's `after`.

`sparse_box_arms` and `pseudo_box_sweep` are the "table5" row of
`ebm_jax.recipes.tracking.socl.EXPERIMENTS`; every `env` is that recipe's `SoCLRun`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math

import numpy as np

from ebm_jax.io import CorruptFileError, read_json
from ebm_jax.recipes.tracking.box_head import box_head_tracker
from ebm_jax.recipes.tracking.box_head_stages import train_box_head
from ebm_jax.recipes.item_cache import FULL_PRECISION, ItemCache
from ebm_jax.recipes.tracking.socl_stages import point_annotations
from ebm_jax.recipes.tracking.arms import Arm, Tracker, Trained, dcf_tracker, reuse_model
from ebm_jax.recipes.tracking.stages import SIAMFC, dcf_settings
from ebm_jax.report.statistics import mean_sd
from ebm_jax.tracking.pseudo_boxes import (
    annotation_seconds_per_frame,
    pseudo_box_quality,
    pseudo_boxes,
    sparse_key_frames,
)

__all__ = ["LABELS", "labelled_sequences", "pseudo_box_cache", "pseudo_box_sweep",
           "sparse_box_arms"]

# the box head's training labels of each arm: every true box, SoCL-CF's pseudo boxes
# from sparse boxes, the sparse boxes alone
LABELS = ("all", "pseudo", "sparse")
# how the boxed frames are chosen (`_has_box`), part of the identity of what they make
KEY_RULE = "the first frame of each block of T in view with its box centre on the frame"


def _has_box(seq) -> np.ndarray:
    """(N,) bool: the frames an annotator would box, a finite box with the target in
    view (`Sequence.visible`). An absent frame may carry a box wholly off the frame
    (GOT-10k's and the generated benchmark's convention): never a key frame."""
    return np.all(np.isfinite(np.asarray(seq.boxes, np.float64)), axis=1) & seq.visible


def _key_candidates(seq) -> np.ndarray:
    """(N,) bool: frames that can start a snippet, in view with the box's centre on
    the frame (a tracker starts from it; a box mostly out of view is not one an
    annotator would pick to start from)."""
    boxes = np.asarray(seq.boxes, np.float64)
    height, width = seq.image_size
    with np.errstate(invalid="ignore"):
        cx = boxes[:, 0] - 1 + (boxes[:, 2] - 1) / 2
        cy = boxes[:, 1] - 1 + (boxes[:, 3] - 1) / 2
        on = (cx >= 0) & (cx <= width - 1) & (cy >= 0) & (cy <= height - 1)
    return _has_box(seq) & on


def _visible_boxes(seq) -> np.ndarray:
    """The true boxes, NaN where the target is not in view (nothing to score there)."""
    return np.where(_has_box(seq)[:, None], np.asarray(seq.boxes, np.float64), np.nan)


def _read_pseudo(path, seq) -> dict | None:
    rec = read_json(path, what="cached pseudo boxes", fix="computing them again")
    n = len(seq)
    if isinstance(rec, dict) and rec.get("frames") != n:
        return None  # the sequence changed: stale, not corrupt
    try:
        out = {"boxes": np.asarray(rec["boxes"], np.float64).reshape(n, 4),
               "failed": np.asarray(rec["failed"], bool).reshape(n),
               "keyed": np.asarray(rec["keyed"], bool).reshape(n),
               "seconds": np.asarray(rec["seconds"], np.float64).reshape(n)}
    except (KeyError, TypeError, ValueError) as error:
        raise CorruptFileError(f"cached pseudo boxes {path} are malformed ({error}); "
                               "computing them again") from error
    if rec.get("precision") != FULL_PRECISION:
        return None  # rounded to 4 decimals by an earlier version: stale
    return out


def pseudo_box_cache(env, seed: int, socl: Trained, every: int) -> dict:
    """{sequence index: {"boxes", "failed", "keyed", "seconds"}}: SoCL-CF's pseudo boxes
    (`ebm_jax.tracking.pseudo_boxes.pseudo_boxes`, the tracker on `socl`'s backbone with
    `cfg.dcf`, the `cfg.points` annotations (off the frame allowed: `check` has read
    them), `cfg.failure_radius`) of every training
    sequence with a box, one file per sequence; the tracker is compiled on the first
    frame before any timed one."""
    from tqdm.auto import tqdm

    from ebm_jax.tracking.dcf import make_dcf_tracker

    cfg, ctx = env.cfg, env.ctx
    identity = {"trained": socl.identity, "data": env.data.identity["train"],
                "points": cfg.points, "dcf": dataclasses.asdict(dcf_settings(cfg)),
                "radius": cfg.failure_radius, "keys": KEY_RULE}
    cache = ItemCache(ctx, ctx.stage_dir(f"pseudo-boxes-s{seed}", identity), identity,
                      folder=f"T{every}", what="cached pseudo boxes")
    tracker, params, warmed = None, None, set()
    out = {}
    for i, seq in enumerate(tqdm(env.data.train, desc=f"pseudo boxes T={every} s{seed}",
                                 disable=not ctx.progress, leave=False)):
        keys = sparse_key_frames(_key_candidates(seq), every)
        if keys.size == 0:
            continue
        name = f"{seq.name}.json"
        rec = cache.load(name, functools.partial(_read_pseudo, seq=seq))
        if rec is None:
            if tracker is None:
                tracker, params = make_dcf_tracker(socl.model, dcf_settings(cfg))
            first = seq.read_frame(int(keys[0]))
            if first.shape not in warmed:  # compile outside the timed frames, once a shape
                tracker.update(params, tracker.init(params, first, seq.boxes[keys[0]]),
                               first)
                warmed.add(first.shape)
            res = pseudo_boxes(tracker, params, seq.read_frame, seq.boxes,
                               point_annotations(seq, cfg.points), keys,
                               radius=cfg.failure_radius, off_frame=math.inf)
            rec = res._asdict()
            cache.save(name, json.dumps({
                "frames": len(seq), "boxes": np.asarray(rec["boxes"], np.float64).tolist(),
                "failed": rec["failed"].tolist(), "keyed": rec["keyed"].tolist(),
                "seconds": np.asarray(rec["seconds"], np.float64).tolist(),
                "precision": FULL_PRECISION}) + "\n")
        out[i] = rec
    return out


def labelled_sequences(sequences, labels: str, *, every: int, pseudo: dict | None = None):
    """The training sequences with the boxes of `labels`: "all" as they are, "sparse"
    only the key frames' (`sparse_key_frames`), "pseudo" the pseudo boxes (`pseudo`,
    from `pseudo_box_cache`; a sequence without any is left out). NaN boxes elsewhere,
    which the pair sampler skips."""
    if labels not in LABELS:
        raise ValueError(f"labels must be one of {LABELS}, got {labels!r}")
    out = []
    for i, seq in enumerate(sequences):
        if labels == "all":
            out.append(seq)
            continue
        boxes = np.full((len(seq), 4), np.nan)
        if labels == "sparse":
            keys = sparse_key_frames(_key_candidates(seq), every)
            boxes[keys] = np.asarray(seq.boxes, np.float64)[keys]
        elif i in pseudo:
            boxes = np.asarray(pseudo[i]["boxes"], np.float64)
        else:
            continue
        out.append(dataclasses.replace(seq, boxes=boxes))
    return out


def train_sparse_head(env, seed: int, used, *, labels: str) -> Trained:
    """The NCE+ box head (`cfg.box_head`) on the same seed's SoCL-Siam backbone, frozen,
    trained on the boxes of `labels` at T = `cfg.sparse_every`."""
    cfg, ctx = env.cfg, env.ctx
    socl = used["SoCL-Siam"]
    every = cfg.sparse_every
    settings = dataclasses.replace(cfg.box_head, method="nce+")
    pseudo = pseudo_box_cache(env, seed, socl, every) if labels == "pseudo" else None
    sequences = labelled_sequences(env.data.train, labels, every=every, pseudo=pseudo)
    ident = {"of": env.data.identity["train"], "labels": labels}
    if labels != "all":
        ident.update(every=every, keys=KEY_RULE)
    if labels == "pseudo":
        ident.update(points=cfg.points, dcf=dataclasses.asdict(dcf_settings(cfg)),
                     radius=cfg.failure_radius)
    t = train_box_head(ctx, sequences, data_identity=ident, backbone=socl.model,
                       backbone_identity=socl.identity["trained"], settings=settings,
                       siamfc=SIAMFC, name=f"box-head-nce+-{labels}-s{seed}")
    return Trained(t.net, {"trained": t.identity}, t.figures, t.name)


def _arm_label(labels: str, every: int) -> str:
    return {"all": "head, all boxes", "pseudo": f"head, pseudo boxes T={every}",
            "sparse": f"head, sparse boxes T={every}"}[labels]


def sparse_box_arms(cfg, socl_arm) -> list[Arm]:
    """The table: SoCL-Siam (`socl_arm`, SiamFC's tracker), SoCL-CF (the correlation
    filter on its backbone) and the box head on its backbone trained on each kind of
    labels; the pseudo-box head is compared with the all-box and sparse-box heads, and
    each head with SoCL-Siam's scale search."""
    every = cfg.sparse_every
    head: Tracker = box_head_tracker(dataclasses.replace(cfg.box_head, method="nce+"))
    about = (("socl", ()), ("alpha", None), ("points", cfg.points), ("budget_hours", None))
    cf = Arm("SoCL-CF", "socl-cf", functools.partial(reuse_model, label="SoCL-Siam"),
             tracker=dcf_tracker(dcf_settings(cfg)), uses=("SoCL-Siam",),
             compared_with=("SoCL-Siam",), about=about + (("backbone_of", "SoCL-Siam"),))
    heads = []
    for labels in LABELS:
        versus = ("SoCL-Siam",)
        if labels == "pseudo":
            versus = (_arm_label("all", every), _arm_label("sparse", every), "SoCL-Siam")
        heads.append(Arm(_arm_label(labels, every), f"head-{labels}",
                         functools.partial(train_sparse_head, labels=labels), tracker=head,
                         uses=("SoCL-Siam",), compared_with=versus,
                         about=about + (("labels", labels), ("every", every))))
    return [socl_arm, cf, *heads]


def _annotation_hours(env, arms, seconds_per_frame: float) -> dict:
    """Annotation hours per arm of the training split's frames with a box (those an
    annotator would label): boxes 10.2 s, points 2.27 s, sparse boxes + points at T
    (sec. 3.4) with the tracker's measured seconds per frame for the pseudo boxes."""
    cfg = env.cfg
    frames = int(sum(_has_box(s).sum() for s in env.data.train))
    t = cfg.sparse_every
    sparse = annotation_seconds_per_frame(t, box_seconds=cfg.box_seconds,
                                          point_seconds=cfg.point_seconds)
    per_frame = {"SoCL-Siam": cfg.point_seconds, "SoCL-CF": cfg.point_seconds,
                 _arm_label("all", t): cfg.box_seconds,
                 _arm_label("pseudo", t): sparse + seconds_per_frame,
                 _arm_label("sparse", t): sparse}
    return {"frames": frames, "seconds_per_frame": per_frame,
            "hours": {a.label: frames * per_frame[a.label] / 3600 for a in arms
                      if a.label in per_frame}}


def pseudo_box_sweep(env, arms, res, eval_sets) -> dict:
    """The pseudo boxes' quality for each T of `sparse_every_sweep` and seed (mean IoU
    with the hidden true boxes over the frames that are not keyed, the fraction above
    IoU 0.5, failures per 100 frames, the tracker's median seconds per frame and the
    annotation seconds per frame), the annotation hours per arm, and the ratio of the
    pseudo-box head's AO to the all-box head's per seed. Returns the record for the
    report."""
    cfg = env.cfg
    sweep = sorted(set(cfg.sparse_every_sweep) | {cfg.sparse_every})
    rows = {t: [] for t in sweep}
    strip = None
    for seed in cfg.seeds:
        socl = res.trained[seed]["SoCL-Siam"]
        for t in sweep:
            cache = pseudo_box_cache(env, seed, socl, t)
            idx = sorted(cache)
            pooled = {k: np.concatenate([np.asarray(cache[i][k]) for i in idx])
                      for k in ("boxes", "failed", "keyed", "seconds")}
            truth = np.concatenate([_visible_boxes(env.data.train[i]) for i in idx])
            q = pseudo_box_quality(pooled["boxes"], truth, pooled["failed"], pooled["keyed"])
            tracked = pooled["seconds"][pooled["seconds"] > 0]
            secs = float(np.median(tracked)) if tracked.size else 0.0
            q.update(seed=seed, tracker_seconds=secs,
                     annotation_seconds=annotation_seconds_per_frame(
                         t, box_seconds=cfg.box_seconds, point_seconds=cfg.point_seconds,
                         tracker_seconds=secs))
            rows[t].append(q)
            if strip is None and t == cfg.sparse_every and idx:
                strip = {"sequence": idx[0], "boxes": cache[idx[0]]["boxes"],
                         "keyed": cache[idx[0]]["keyed"]}
    test = next(iter(res.rows))
    all_label, pseudo_label = (_arm_label("all", cfg.sparse_every),
                               _arm_label("pseudo", cfg.sparse_every))
    ratio = [p["ao"] / a["ao"] for a, p in zip(res.rows[test][all_label],
                                               res.rows[test][pseudo_label]) if a["ao"] > 0]
    secs = float(np.median([r["tracker_seconds"] for r in rows[cfg.sparse_every]]))
    return {"sweep": {str(t): r for t, r in rows.items()},
            "summary": {str(t): {k: dict(zip(("mean", "sd"), mean_sd([r[k] for r in rs])))
                                 for k in ("mean_iou", "iou_above_0.5", "failures_per_100",
                                           "tracker_seconds", "annotation_seconds")}
                        for t, rs in rows.items()},
            "ao_ratio_pseudo_to_all": dict(zip(("mean", "sd"), mean_sd(ratio))),
            "ao_ratio_per_seed": ratio,
            "annotation": _annotation_hours(env, arms, secs),
            "strip": strip}
