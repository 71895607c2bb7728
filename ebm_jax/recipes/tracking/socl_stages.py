"""The stages of the SoCL recipe (`ebm_jax.recipes.tracking.socl`), beside the tracking recipe's
(data, Box-Siam, evaluation; `ebm_jax.recipes.tracking.stages`):

    <workdir>/top-<points>-<hash>/<sequence>.npz   TOP proposals of the annotated frames
                                                  (kept boxes and scores), one file per
                                                  sequence, written whole (an
                                                  `ItemCache`: a stopped computation
                                                  resumes at the next one, --restart
                                                  computes them again)
    <workdir>/socl-s<seed>-<hash>                  SoCL-Siam (loss 10) on point annotations
    <workdir>/bce-siam-s<seed>-<hash>              SiamFC's BCE on pseudo boxes from TOP maps
    <workdir>/box-siam-s<seed>-<hash>              Box-Siam (on a budget's subset when given)

Annotated frames: every `annotate_every`-th frame of a training sequence whose point is
usable (`ebm_jax.data.socl_pairs.point_frames`); the same frames carry the boxes of the
box-annotated baselines, so that annotation costs compare frame for frame.

Every `cfg` here is the recipe's Config (`ebm_jax.recipes.tracking.socl.Config`), which
this module never imports: a recipe imports its stages, never the reverse.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import time

import numpy as np

from ebm_jax.io import CorruptFileError
from ebm_jax.recipes.item_cache import ItemCache
from ebm_jax.recipes.tracking.stages import Trained
from ebm_jax.tracking.top_maps import TopMapSettings


def point_annotations(seq, kind: str) -> np.ndarray:
    pts = seq.points if kind == "clean" else seq.noisy_points
    if pts is None:
        raise ValueError(f"sequence {seq.name!r} has no {'noisy_' if kind == 'noisy' else ''}"
                         "points.txt: SoCL trains on point annotations (the generated "
                         "benchmark writes them; for a real set give them beside "
                         "groundtruth.txt, or take the box centres as the paper does on "
                         "GOT-10k with --config.points_from_boxes=true)")
    return np.asarray(pts, np.float64)


def points_from_boxes(seq, shift: float, seed: int):
    """`seq` with the paper's points for box-annotated sets (sec. 4.1, "we generate center
    point annotations from the original box annotations"): the box centre (1-indexed, as
    points.txt), and the centre moved `shift` px in a uniformly random direction (seeded
    by `seed`) as the noisy point. Sequences that carry points are returned unchanged."""
    if seq.points is not None:
        return seq
    boxes = np.asarray(seq.boxes, np.float64)
    centres = boxes[:, :2] + (boxes[:, 2:] - 1.0) / 2.0
    phi = np.random.default_rng(seed).uniform(0.0, 2 * np.pi, len(seq))
    noisy = centres + shift * np.column_stack([np.cos(phi), np.sin(phi)])
    return dataclasses.replace(seq, points=centres, noisy_points=noisy)


def annotated_frames(seq, kind: str, every: int) -> np.ndarray:
    from ebm_jax.data.socl_pairs import point_frames

    frames = point_frames(seq, point_annotations(seq, kind))
    return frames[frames % every == 0]


# The TOP maps' settings (sec. 3.1, the paper's values): a value, not a config field
TOP_SETTINGS = TopMapSettings()


SERIAL_BELOW = 64  # frames: fewer are computed in this process (about 10 s on one CPU)


def _top_of_frames(images, points, seeds, settings) -> tuple:
    """(boxes (F, keep, 4), scores (F, keep), seconds (F,)) of `top_boxes` on each of
    `images` at its point and seed, NaN-padded past the kept boxes; the seconds are each
    frame's own. Arrays in, arrays out: one task of `top_cache`'s worker processes."""
    from ebm_jax.tracking.top_maps import top_boxes

    keep = settings.keep
    boxes = np.full((len(images), keep, 4), np.nan, np.float32)
    scores = np.full((len(images), keep), np.nan, np.float32)
    seconds = np.zeros(len(images), np.float64)
    for r, (image, point, seed) in enumerate(zip(images, points, seeds)):
        start = time.perf_counter()
        b, sc = top_boxes(image, point, settings, seed=seed)
        seconds[r] = time.perf_counter() - start
        boxes[r, :len(b)], scores[r, :len(sc)] = b, sc
    return boxes, scores, seconds


def top_cache(ctx, sequences, data_identity, kind: str, every: int, *,
              name: str = "top", workers: int | None = None) -> dict:
    """{sequence index: {"frames", "boxes", "scores", "seconds"}}: the TOP proposals of
    every annotated frame (every `every`-th with a usable `kind` point), computed once
    (`top_boxes`, sec. 3.1) with a progress bar, one file per sequence in an
    `ItemCache` (resumes; `--restart` computes them again) named `<name>-<kind>-<hash>`.

    `workers` processes (default: the CPUs this process may use, at most 8, as the data
    generation; one process below `SERIAL_BELOW` frames to compute, which would not pay
    for the workers' start) compute the sequences in parallel, a sequence a task. Each
    frame's proposals depend on its own seed alone, so they are the same for any
    number of workers; "seconds" is each frame's own time in its process (one process
    per CPU at most)."""
    from tqdm.auto import tqdm

    from ebm_jax.data.tracking import default_workers

    workers = default_workers() if workers is None else workers
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    settings = TOP_SETTINGS
    identity = {"data": data_identity, "points": kind, "every": every,
                "settings": dataclasses.asdict(settings)}
    cache = ItemCache(ctx, ctx.stage_dir(f"{name}-{kind}", identity, host_only=True),
                      identity, what="TOP cache")
    plan = [(i, seq, annotated_frames(seq, kind, every)) for i, seq in enumerate(sequences)]
    out, todo = {}, []
    bar = tqdm(total=sum(len(f) for _, _, f in plan), desc=f"TOP maps ({kind} points)",
               unit="frame", disable=not ctx.progress, leave=False)
    for i, seq, frames in plan:
        rec = cache.load(f"{seq.name}.npz", functools.partial(
            _read_top, frames=frames, keep=settings.keep))
        if rec is not None:
            out[i] = rec
            bar.update(len(frames))
        else:
            todo.append((i, seq, frames))

    def task(seq, frames):
        """The arguments of `_top_of_frames` for one sequence: its frames read here."""
        pts = point_annotations(seq, kind)
        # points are 1-indexed here as in top_maps (points.txt's convention)
        return ([seq.read_frame(int(t)) for t in frames], [pts[t] for t in frames],
                [ctx.seed_of(f"top-{kind}", f"{seq.name}/{int(t)}") for t in frames],
                settings)

    def keep(i, seq, frames, result):
        boxes, scores, seconds = result
        out[i] = {"frames": frames, "boxes": boxes, "scores": scores, "seconds": seconds}
        buf = io.BytesIO()
        np.savez_compressed(buf, **out[i])
        cache.save(f"{seq.name}.npz", buf.getvalue())
        bar.update(len(frames))

    frames_to_compute = sum(len(f) for _, _, f in todo)
    if workers == 1 or len(todo) < 2 or frames_to_compute < SERIAL_BELOW:
        for i, seq, frames in todo:
            keep(i, seq, frames, _top_of_frames(*task(seq, frames)))
    else:  # spawned workers: the caller holds threads (JAX) that fork would copy
        import collections
        import concurrent.futures
        import multiprocessing

        workers = min(workers, len(todo))
        with concurrent.futures.ProcessPoolExecutor(
                workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            running = collections.deque()  # in order; at most 2 per worker hold frames
            try:
                for i, seq, frames in todo:
                    running.append((i, seq, frames,
                                    pool.submit(_top_of_frames, *task(seq, frames))))
                    while len(running) > 2 * workers:
                        *head, job = running.popleft()
                        keep(*head, job.result())
                while running:
                    *head, job = running.popleft()
                    keep(*head, job.result())
            except BaseException:
                pool.shutdown(wait=True, cancel_futures=True)
                raise
    bar.close()
    return {i: out[i] for i in sorted(out)}


def _read_top(path, frames: np.ndarray, keep: int) -> dict | None:
    """The cached TOP proposals in `path` when they are those of `frames`; None when
    they are of other frames; CorruptFileError for arrays of the wrong shape (and any
    error of a file that is cut short or garbled)."""
    with np.load(io.BytesIO(path.read_bytes())) as z:
        rec = {k: z[k] for k in ("frames", "boxes", "scores", "seconds")}
    if not np.array_equal(rec["frames"], frames):
        return None
    n = len(frames)
    shapes = {"boxes": (n, keep, 4), "scores": (n, keep), "seconds": (n,)}
    if any(rec[k].shape != shape for k, shape in shapes.items()):
        raise CorruptFileError(f"{path} is not a TOP cache of {n} frames x {keep} boxes; "
                               "computing it again")
    return rec


def budget_subset(sequences, annotated: list[np.ndarray], frames: int, seed: int):
    """Whole sequences in a fixed random order (the same for every method) until
    `frames` annotated frames are spent; returns their indices."""
    order = np.random.default_rng(seed).permutation(len(sequences))
    chosen, spent = [], 0
    for i in order:
        n = len(annotated[i])
        if n == 0:
            continue
        if spent + n > frames:
            break
        chosen.append(int(i))
        spent += n
    return sorted(chosen), spent


def pseudo_box_sequences(sequences, tops: dict, kind: str, alpha: float):
    """The sequences with BCE-Siam's boxes (paper Fig. 8): on each annotated frame the
    box thresholded from its TOP map at `alpha` x the peak around the point, NaN on the
    others (so that the pair sampler skips them)."""
    from ebm_jax.tracking.top_maps import pseudo_box, score_map

    out = []
    for i, seq in enumerate(sequences):
        boxes = np.full((len(seq), 4), np.nan)
        top = tops.get(i)
        if top is not None:
            pts = point_annotations(seq, kind)
            for r, t in enumerate(top["frames"]):
                ok = np.isfinite(top["scores"][r])
                pixels = score_map(tuple(seq.image_size), top["boxes"][r][ok],
                                   top["scores"][r][ok])
                boxes[int(t)] = pseudo_box(pixels, pts[int(t)], alpha)
        out.append(dataclasses.replace(seq, boxes=boxes))
    return out


# SoCLSettings fields added after stages were first cached: a stage records them only
# where they differ from the values every stage had before them, so that those stages
# keep their identities. eq. 10's form is recorded unless it is the symmetrised one:
# the printed form (symmetric=False), the default since the LST study chose it on the
# validation split, is always recorded, so no stage cached under the old default (the
# symmetrised loss, recorded by no key) is taken for one of the new default.
_LATER_FIELDS = {"symmetric": True, "mix_scope": "batch"}


def settings_identity(settings) -> dict:
    """What a SoCL stage's identity records of its SoCLSettings."""
    out = dataclasses.asdict(settings)
    for k, default in _LATER_FIELDS.items():
        if out[k] == default:
            del out[k]
    return out


def socl_settings(cfg, overrides=()):
    """SoCLSettings of the config's tau, theta_b, b_p and loss switches
    (include_positive, symmetric, mix_scope) with an arm's `overrides` ((field, value)
    pairs)."""
    from ebm_jax.contrastive.socl import SoCLSettings

    base = SoCLSettings(tau=cfg.tau, theta_b=cfg.theta_b, b_p=cfg.b_p,
                        include_positive=cfg.include_positive, symmetric=cfg.symmetric,
                        mix_scope=cfg.mix_scope)
    return dataclasses.replace(base, **dict(overrides))


# frames of the training split the TOP temperature is calibrated on
CALIBRATION_FRAMES = 64


def calibration_maps(cfg, sequences, tops: dict, kind: str, embedding_grid, seed: int):
    """(maps (F, g, g) at temperature 1, target cells (F,)) of up to CALIBRATION_FRAMES
    annotated frames (drawn with `seed`): each frame's region of `context_side` centred
    on its point, as the training regions without their jitter; the target's extent
    in cells is that of the box of the proposals' extent (`proposal_extent`) centred on
    the point (`box_cells`). No true box is read."""
    from ebm_jax.data.socl_pairs import region_boxes, region_top_map
    from ebm_jax.tracking.top_maps import box_cells, proposal_extent

    rows = [(i, r) for i in sorted(tops) for r in range(len(tops[i]["frames"]))
            if np.isfinite(tops[i]["scores"][r]).any()]
    if not rows:
        raise ValueError("no annotated frame with TOP proposals to calibrate the TOP "
                         "temperature on")
    pick = np.random.default_rng(seed).permutation(len(rows))[:CALIBRATION_FRAMES]
    grid = embedding_grid(cfg.input_size)
    maps, cells = [], []
    for i, r in (rows[k] for k in sorted(pick)):
        top, t = tops[i], int(tops[i]["frames"][r])
        px, py = point_annotations(sequences[i], kind)[t]
        centre = (py - 1.0, px - 1.0)
        maps.append(region_top_map(top["boxes"][r], top["scores"][r], centre,
                                   cfg.context_side, cfg.input_size, 1.0, embedding_grid))
        w, h = proposal_extent(top["boxes"][r], top["scores"][r])
        box = region_boxes(np.array([px - (w - 1) / 2, py - (h - 1) / 2, w, h]), centre,
                           cfg.context_side, cfg.input_size)
        cells.append(int(box_cells(box, grid).sum()))
    return np.stack(maps), np.asarray(cells)


def top_temperature(cfg, ctx, sequences, tops: dict, kind: str, embedding_grid,
                    theta: float) -> tuple[float, dict | None]:
    """(temperature, calibration record or None): `cfg.top_temperature` when it is a
    number; with "calibrated", the temperature of this feature grid at which the
    `theta` (theta_b) mass of the TOP maps covers about the target's extent estimated
    from the proposals (`top_maps.calibrate_temperature`, on `calibration_maps`)."""
    from ebm_jax.tracking.top_maps import calibrate_temperature

    if cfg.top_temperature != "calibrated":
        return float(cfg.top_temperature), None
    maps, cells = calibration_maps(cfg, sequences, tops, kind, embedding_grid,
                                   ctx.seed_of("top-temperature", "frames"))
    temperature, record = calibrate_temperature(maps, cells, theta)
    record["median_target_cells"] = float(np.median(cells))
    return temperature, record


def fine_tune_identity(cfg) -> dict:
    """The fine-tuning options a SoCL stage's identity records: those that differ from
    training everything at one rate with batch statistics (the stages before them)."""
    out = {}
    if cfg.freeze != "none":
        out["freeze"] = cfg.freeze
    if cfg.backbone_lr_scale != 1.0:
        out["backbone_lr_scale"] = float(cfg.backbone_lr_scale)
    if cfg.freeze_bn:
        out["freeze_bn"] = True
    return out


def train_socl(cfg, ctx, sequences, tops: dict, kind: str, data_identity,
               overrides, seed: int, *, label: str = "SoCL-Siam", data=None) -> Trained:
    """The SoCL-Siam stage of one arm and training seed (resumes): the backbone's start
    (`build_model`: random, ImageNet's where `cfg.pretrained`, MoCo's on `data` with
    `init="moco"`),
    Adam (lr x 0.1 after `socl_lr_drop` of the steps, as the paper's drop at epoch 500
    of 1000), loss (10) on `context_batches` with TOP maps at `top_temperature`. The
    fine-tuning options (`socl_siam`): levels up to `cfg.freeze` keep their start
    (parameters and batch-norm statistics), the backbone's updates x
    `backbone_lr_scale`, every batch norm on its start's statistics with `freeze_bn`.
    Every arm of a seed starts from the same weights and sees the same batch order
    (paired comparisons). With `scene_group` > 1 a batch takes whole scene groups
    (negatives that share the scene)."""
    import optax

    from ebm_jax.data.pipeline import stream_steps
    from ebm_jax.data.socl_pairs import context_batches
    from ebm_jax.data.tracking import scene_ids
    from ebm_jax.recipes.tracking.stages import backbone_identity, build_model
    from ebm_jax.tracking import socl_siam
    from ebm_jax.train import create_train_state, make_train_step, merge_model
    from ebm_jax.train.stages import TrainStage

    settings = socl_settings(cfg, overrides)
    name = f"socl-s{seed}"
    model = build_model(cfg, ctx, name, data)
    temperature, calibration = top_temperature(cfg, ctx, sequences, tops, kind,
                                               model.embedding_grid, settings.theta_b)
    if calibration is not None:
        ctx.log(f"stage {name} ({label}): TOP temperature {temperature:.3g}, calibrated "
                f"on {calibration['frames']} frames (the theta_b mass covers the "
                f"proposals' extent, a median {calibration['median_target_cells']:g} "
                "cells)")
    identity = {"data": data_identity, "points": kind, "every": cfg.annotate_every,
                "top": dataclasses.asdict(TOP_SETTINGS),
                "top_temperature": temperature, "socl": settings_identity(settings),
                "width": cfg.width, "steps": cfg.socl_steps, "videos": cfg.videos,
                "lr": cfg.socl_lr, "lr_drop": cfg.socl_lr_drop, "input": cfg.input_size,
                "context_side": cfg.context_side, "jitter": [cfg.shift_jitter,
                                                             cfg.scale_jitter],
                "max_gap": cfg.max_gap, "seed": seed, **fine_tune_identity(cfg),
                **backbone_identity(cfg, data)}
    every = max(1, cfg.socl_steps // 20)
    stage = TrainStage(name, identity, cfg.socl_steps, log_every=every, save_every=every * 5)
    socl_siam.freeze_batch_norm(model, cfg.freeze, every=cfg.freeze_bn)
    trainable = socl_siam.trainable_filter(model, cfg.freeze)
    drop = max(1, int(round(cfg.socl_lr_drop * cfg.socl_steps)))
    schedule = optax.piecewise_constant_schedule(cfg.socl_lr, {drop: 0.1})
    opt = optax.adam(schedule)
    if cfg.backbone_lr_scale != 1.0:
        opt = optax.chain(opt, socl_siam.scale_backbone_updates(model,
                                                                cfg.backbone_lr_scale))
    graphdef, state = create_train_state(model, opt, stage.key(ctx, "train"), trainable)
    step = make_train_step(graphdef, socl_siam.make_socl_siam_loss(settings), opt, ctx.mesh,
                           trainable=trainable)
    points = [point_annotations(s, kind) for s in sequences]
    batches = context_batches(sequences, tops, points=points, videos=cfg.videos,
                              max_gap=cfg.max_gap, seed=ctx.seed_of(name, "batches"),
                              input_size=cfg.input_size, context_side=cfg.context_side,
                              shift_jitter=cfg.shift_jitter, scale_jitter=cfg.scale_jitter,
                              temperature=temperature,
                              embedding_grid=model.embedding_grid,
                              groups=scene_ids([s.name for s in sequences], cfg.scene_group)
                              if cfg.scene_group > 1 else None)
    batches = stream_steps(batches, cfg.socl_steps)
    ctx.log(f"stage {name} ({label}): {cfg.socl_steps} steps of {cfg.videos} videos x "
            f"2 frames from {batches.num_sequences} sequences ({batches.num_frames} frames "
            "with TOP maps)")
    state, figures = stage.run(ctx, state, step, batches)
    return Trained(merge_model(graphdef, state), {"trained": stage.full_identity}, figures,
                   name)
