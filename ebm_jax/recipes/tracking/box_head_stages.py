"""The training stage of the tracker's box head (Gustafsson et al. 2020, sec. 5: the box
branch trained with KLD-IS, NCE, NCE+ or ML-IS): pairs of frames of the training
sequences, the box energy on a given tracking backbone (Box-Siam's), Adam.

    trained = train_box_head(ctx, sequences, data_identity=..., backbone=model,
                             backbone_identity=box_siam_identity,
                             settings=BoxHeadSettings(method="nce+", steps=600))
    tracker, params = make_box_head_tracker(trained.net.backbone, trained.net.head,
                                            settings)

    <workdir>/box-head-<method>[-joint]-s<seed>-<hash>   checkpoints, metrics

The stage resumes where it stopped (`TrainStage`); its identity holds the data's and
the backbone's identities, every setting, the levels, `joint` and the seed.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from ebm_jax.data.box_head_pairs import jittered_pair_batches
from ebm_jax.data.pipeline import stream_steps
from ebm_jax.data.tracking_pairs import pair_batches
from ebm_jax.models.box_head import BoxEnergyHead, BoxHeadNet
from ebm_jax.models.box_head_atom import AtomBoxHead
from ebm_jax.recipes.tracking.stages import timed_runner
from ebm_jax.tracking.box_head import BoxHeadSettings
from ebm_jax.tracking.box_head_tracker import make_box_head_tracker
from ebm_jax.tracking.box_head_training import make_box_head_loss, training_crops
from ebm_jax.tracking.box_refinement import (RefinementProbe, TrackerProcedure,
                                             gaussian_box_energy, refinement_from_starts,
                                             refinement_measures)
from ebm_jax.tracking.siamfc import SiamFCSettings
from ebm_jax.train import create_train_state, make_train_step, merge_model
from ebm_jax.train.stages import StageFigures, TrainStage


@dataclasses.dataclass(frozen=True)
class TrainedBoxHead:
    """A finished (or resumed) box-head stage: its name and full identity, its figures
    (`StageFigures`) and the trained `BoxHeadNet` (backbone and head)."""

    name: str
    identity: dict
    figures: StageFigures
    net: Any


def build_box_head(backbone, settings: BoxHeadSettings, key,
                   levels: Sequence[int] | None = None) -> BoxEnergyHead | AtomBoxHead:
    """The box head of `settings.head` for `backbone`'s `levels` (their channels,
    strides, offsets; default the backbone's `box_head_levels`), of the widths and
    pools of `settings`, initialised from `key`: a `BoxEnergyHead` ("simple") or an
    `AtomBoxHead` ("atom", in train mode: its batch norm learns in training)."""
    levels = backbone.box_head_levels if levels is None else levels
    geometry = backbone.level_geometry(levels)
    common = dict(strides=[g[0] for g in geometry], offsets=[g[1] for g in geometry],
                  width=settings.width, hidden=settings.hidden, rngs=nnx.Rngs(key))
    if settings.head == "atom":
        return AtomBoxHead(backbone.level_channels(levels),
                           pool_sizes=settings.atom_pool_sizes,
                           ref_pool_sizes=settings.atom_ref_pool_sizes, **common)
    return BoxEnergyHead(backbone.level_channels(levels), pool_size=settings.pool_size,
                         ref_pool_size=settings.ref_pool_size, **common)


def box_head_batches(sequences, settings: BoxHeadSettings, siamfc: SiamFCSettings, *,
                     seed: int, batch_size: int | None = None):
    """`batches(step)` of the box head's training pairs by `settings.processing`:
    SiamFC's regions (`pair_batches`) or PrDiMP's jittered crops
    (`jittered_pair_batches`, crops of the search size)."""
    batch_size = settings.batch_size if batch_size is None else batch_size
    if settings.processing == "prdimp":
        return jittered_pair_batches(sequences, batch_size=batch_size,
                                     max_gap=settings.max_gap, seed=seed,
                                     jitter=settings.crop_jitter,
                                     out_size=siamfc.search_size)
    return pair_batches(sequences, batch_size=batch_size, max_gap=settings.max_gap,
                        seed=seed, exemplar_size=siamfc.exemplar_size,
                        search_size=siamfc.search_size, context=siamfc.context)


def train_box_head(ctx, sequences, *, data_identity, backbone, backbone_identity,
                   settings: BoxHeadSettings, joint: bool = False,
                   siamfc: SiamFCSettings = SiamFCSettings(),
                   levels: Sequence[int] | None = None, name: str | None = None,
                   save_every: int | None = None,
                   prefix_steps: int | None = None) -> TrainedBoxHead:
    """Trains (or resumes) the box head on pairs of `sequences` (`pair_batches`: their
    z/x regions are the reference and test frames; the crops are made in the jitted
    step, `box_head_crops`), `settings.steps` Adam steps of `settings.lr`. The backbone
    is frozen (its parameters outside the optimiser, its features under
    stop_gradient) unless `joint`, which trains both; it runs in eval mode either way.
    Keys: the head's init `ctx.key(name, "init")`, the steps' `ctx.key(name, "train")`
    folded with the step, the pairs' order `ctx.seed_of(name, "pairs")`. `levels`:
    default the backbone's `box_head_levels` (AlexNet conv3 + conv5, ResNet-18 layer2 +
    layer3). `prefix_steps`: the length of a finished stage of the same head stopped
    earlier (an early-stopping candidate), which this one continues rather than
    starting at step 0: the same name, keys, pairs and constant Adam learning rate, so
    its parameters equal those trained from step 0."""
    if not isinstance(settings, BoxHeadSettings):
        raise TypeError(f"settings must be a BoxHeadSettings, got {type(settings).__name__}")
    levels = tuple(int(lv) for lv in (backbone.box_head_levels if levels is None else levels))
    joint = bool(joint)
    name = name or f"box-head-{settings.method}{'-joint' if joint else ''}-s{ctx.seed}"

    def stage_of(s: BoxHeadSettings) -> TrainStage:
        identity = {"data": data_identity, "backbone": backbone_identity,
                    "settings": s.training_identity(),
                    "siamfc": dataclasses.asdict(siamfc), "levels": list(levels),
                    "joint": joint, "seed": int(ctx.seed)}
        every = max(1, s.steps // 20)
        return TrainStage(name, identity, s.steps, log_every=every,
                          save_every=save_every or every * 5)

    stage = stage_of(settings)
    prefix = (None if prefix_steps is None
              else stage_of(dataclasses.replace(settings, steps=int(prefix_steps))))
    head = build_box_head(backbone, settings, stage.key(ctx, "init"), levels)
    net = BoxHeadNet(backbone, head, levels=levels, frozen=not joint)
    trainable = net.trainable_filter
    opt = optax.adam(settings.lr)
    graphdef, state = create_train_state(net, opt, stage.key(ctx, "train"),
                                         trainable=trainable)
    step = make_train_step(graphdef, make_box_head_loss(settings, siamfc), opt, ctx.mesh,
                           trainable=trainable)
    batches = stream_steps(box_head_batches(sequences, settings, siamfc,
                                            seed=ctx.seed_of(name, "pairs")), settings.steps)
    ctx.log(f"stage {name}: {settings.steps} steps of {settings.batch_size} pairs "
            f"({settings.method}, M = {settings.num_samples}, "
            f"{'joint' if joint else 'frozen backbone'}) from {batches.num_sequences} "
            f"sequences ({batches.num_frames} usable frames)")
    state, figures = stage.run(ctx, state, step, batches, prefix=prefix)
    return TrainedBoxHead(name, stage.full_identity, figures, merge_model(graphdef, state))


# the sharper probe's start overlaps (IoU with the truth)
START_IOUS = (0.5, 0.7, 0.8)


@functools.lru_cache(maxsize=8)
def _probe_program(graphdef, settings: BoxHeadSettings, siamfc: SiamFCSettings,
                   probe: RefinementProbe):
    """The jitted probe of one net structure and its settings: compiled once, run for
    every head of that structure and every candidate set of step lengths."""
    control = gaussian_box_energy(settings.label_sigma)
    # the tracker's own refinement beside the single ascent, with its settings
    procedure = TrackerProcedure(settings.num_candidates, settings.jitter_center,
                                 settings.jitter_size, settings.top_k)
    # the control's own step: sigma^2, one Newton step on its curvature 1 / sigma^2
    control_probe = dataclasses.replace(probe, step_lengths=(settings.label_sigma ** 2,))

    @jax.jit
    def measure(state, batch, key, candidates):
        model = nnx.merge(graphdef, state)
        ref, ref_boxes, test, test_boxes = training_crops(key, batch, settings, siamfc,
                                                          augment=False)
        mods = jax.vmap(model.head.modulation)(list(model.levels(ref)), ref_boxes)
        tests = jax.vmap(model.head.test_features)(list(model.levels(test)))
        def score(inp, b):
            return model.head.score(inp[0], inp[1], b)

        head = refinement_measures(score, (mods, tests), test_boxes, key, probe)
        by_candidate = refinement_measures(score, (mods, tests), test_boxes, key, probe,
                                           step_lengths=candidates)["iou_refined"]
        # the sharper probe: starts of set overlap, and the same starts refined with
        # another pair's reference (a head that ignores its reference gains as much)
        starts = refinement_from_starts(score, (mods, tests), test_boxes, key, probe,
                                        START_IOUS, procedure=procedure)
        other = jax.tree.map(lambda a: jnp.roll(a, 1, axis=0), mods)
        wrong = refinement_from_starts(score, (other, tests), test_boxes, key, probe,
                                       START_IOUS)
        return head, refinement_measures(control, test_boxes, test_boxes, key,
                                         control_probe), by_candidate, starts, wrong

    return measure


def probe_box_head(net, sequences, settings: BoxHeadSettings,
                   siamfc: SiamFCSettings = SiamFCSettings(), *, seed: int,
                   num_batches: int = 4, batch_size: int = 16,
                   probe: RefinementProbe | None = None, candidates=None) -> dict:
    """The refinement probe (`ebm_jax.tracking.box_refinement`) of a trained
    `BoxHeadNet` on pairs of `sequences` (held-out targets) cut as in training
    (`box_head_batches`, the pair seed `seed`; no appearance augmentation), and of the
    analytic Gaussian energy on the same pairs (the control, refined with its own
    Newton step, label_sigma^2, from the same starts). `probe`: default the
    tracker's refinement (`settings.step_lengths`, `refine_steps`,
    `reject_decreasing`). `candidates` (C, 4): step lengths (cx, cy, log w, log h), each
    > 0, whose mean refined IoU is reported too ("candidates", C floats), from the same
    starts. Returns {"head": means, "control": means, "pairs": n, "candidates": [...]},
    means of "iou_start", "iou_refined", "outranks", "rank_correlation" and
    "chance_outranks", with "head_se" (standard errors over the pairs, and of the gain
    iou_refined - iou_start, paired by pair) and "candidates_gain_se"; "from_starts":
    the sharper probe (`_from_starts`): per start IoU of `START_IOUS`, the refinement
    from starts of that overlap with the pair's own reference and with another
    pair's (the wrong-reference control: a head that does not use its reference
    refines as well with another target's)."""
    probe = probe or RefinementProbe(step_lengths=settings.step_lengths,
                                     num_steps=settings.refine_steps,
                                     reject_decreasing=settings.reject_decreasing)
    lengths = (np.broadcast_to(np.asarray(probe.step_lengths, np.float32), (1, 4))
               if candidates is None else np.asarray(candidates, np.float32).reshape(-1, 4))
    if not (np.all(np.isfinite(lengths)) and np.all(lengths > 0)):
        raise ValueError(f"candidates must be step lengths > 0, got {lengths.tolist()}")
    batches = box_head_batches(sequences, settings, siamfc, seed=seed,
                               batch_size=batch_size)
    graphdef, state = nnx.split(net)
    measure = _probe_program(graphdef, settings, siamfc, probe)
    parts = {"head": [], "control": []}
    by_candidate = []
    from_starts = {"right": [], "wrong": []}
    for step in range(num_batches):
        head, ctrl, cand, starts, wrong = measure(state, batches(step), jax.random.key(step),
                                                  lengths)
        parts["head"].append(head)
        parts["control"].append(ctrl)
        by_candidate.append(np.asarray(cand))
        from_starts["right"].append(starts)
        from_starts["wrong"].append(wrong)
    pooled = {name: {k: np.concatenate([np.asarray(p[k]) for p in rows]) for k in rows[0]}
              for name, rows in parts.items()}
    out = {name: {k: float(v.mean()) for k, v in values.items()}
           for name, values in pooled.items()}
    n = num_batches * batch_size
    gain = pooled["head"]["iou_refined"] - pooled["head"]["iou_start"]
    # standard errors over the pairs (one seed's spread; the seeds' comes from the caller)
    out["head_se"] = {k: float(v.std(ddof=1) / np.sqrt(n)) for k, v in pooled["head"].items()}
    out["head_se"]["gain"] = float(gain.std(ddof=1) / np.sqrt(n))
    out["pairs"] = n
    by_candidate = np.concatenate(by_candidate, axis=1)
    out["candidates"] = by_candidate.mean(axis=1).tolist()
    out["candidates_gain_se"] = [float(g.std(ddof=1) / np.sqrt(n)) for g in
                                 by_candidate - pooled["head"]["iou_start"][None]]
    out["from_starts"] = _from_starts(from_starts, n)
    return out


def _from_starts(parts: dict, n: int) -> dict:
    """The sharper probe's figures per start IoU: the mean refined IoU from starts of
    that overlap with the pair's own reference (one ascent, and the tracker's own
    procedure: jittered copies, the top-k mean) and with another pair's, the gains and
    the difference (own - other reference), each with its standard error over the n
    pairs (paired by pair)."""
    out = {}
    for level in START_IOUS:
        def pooled(kind, key):
            return np.concatenate([np.asarray(p[float(level)][key]) for p in parts[kind]])

        start, right, wrong = (pooled("right", "iou_start"), pooled("right", "iou_refined"),
                               pooled("wrong", "iou_refined"))

        def se(v):
            return float(v.std(ddof=1) / np.sqrt(n)) if n > 1 else float("nan")

        tracked = pooled("right", "iou_procedure")
        out[f"{level:g}"] = {
            "iou_start": float(start.mean()), "iou_refined": float(right.mean()),
            "gain": float((right - start).mean()), "gain_se": se(right - start),
            "iou_procedure": float(tracked.mean()),
            "procedure_gain": float((tracked - start).mean()),
            "procedure_gain_se": se(tracked - start),
            "iou_refined_other_reference": float(wrong.mean()),
            "own_minus_other": float((right - wrong).mean()),
            "own_minus_other_se": se(right - wrong)}
    return out


def box_head_runner(net, settings: BoxHeadSettings, *, refine: bool = True,
                    siamfc: SiamFCSettings = SiamFCSettings(),
                    levels: Sequence[int] | None = None):
    """`run(seq) -> (boxes, seconds)` of the box-head tracker (`make_box_head_tracker`,
    jitted) of a trained `BoxHeadNet`; `refine=False` is its coarse tracker (SiamFC's
    centre, one scale, the previous size), the same model without the refinement.
    Compiled before the first timed frame (`timed_runner`). `levels`: default those the
    net was trained on."""
    tracker, params = make_box_head_tracker(
        net.backbone, net.head, settings, siamfc,
        levels=net.levels_used if levels is None else levels, refine=refine)
    return timed_runner(tracker, params)


__all__ = ["TrainedBoxHead", "box_head_batches", "box_head_runner", "build_box_head",
           "probe_box_head", "train_box_head"]
