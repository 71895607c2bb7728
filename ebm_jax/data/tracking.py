"""A generated single-object tracking benchmark, written in the GOT-10k layout.

No real video with box ground truth exists offline, so the sequences are rendered from
real photos and made hard in the ways real tracking is:

- background: a photo seen through a moving, slowly zooming camera window;
- target: a texture from another photo inside a soft-edged shape (ellipse, rounded
  rectangle, smooth blob, star polygon), moving by a smoothed random walk with occasional
  fast jumps (10-30 % of the frame's shorter side in one frame) and occasional
  out-of-view stretches (it leaves through the nearest border for 5-20 frames and comes
  back), with scale change within `scale_range` of the first frame, aspect drift and
  rotation drift;
- distractors: 1-3 objects of the target's shape family textured from the same photo
  (another region, sometimes recoloured), moving on their own, behind or in front;
- occluders: shapes textured from other photos that cross the target's path;
- photometric: a slow illumination change (global gain and a turning linear ramp),
  occasional motion or Gaussian blur, Gaussian noise.

Photo pools (`PHOTO_POOLS`): whole photos are assigned to either pool, so the train and
val splits (train pool) and the test split (test pool) share no photo, neither for
backgrounds nor for textures; within a sequence, background, target and occluder photos
differ. Photos smaller than 250 px on the shorter side texture objects only.

Layout of a split directory (one per spec):

    list.txt, spec.json (spec_identity), and per sequence <split>_<00001>/:
    00000001.jpg ...       frames (JPEG quality 90)
    groundtruth.txt        x,y,w,h per frame: the exact box of the target's shape (1-indexed
                           GOT-10k / OTB convention), also outside the frame when out of view
    absence.label          1 where no part of the target is visible
    cover.label            ceil(8 * visible fraction): GOT-10k's 8 visible-ratio bins
                           (Huang et al. 2019, the dataset's labels; 0 = not visible)
    visible_ratio.txt      the visible fraction: the target's alpha inside the frame and not
                           covered by what is in front, over its whole alpha
    points.txt             the box centre x + (w - 1) / 2, y + (h - 1) / 2; nan,nan if absent
    noisy_points.txt       the point moved `point_shift` px in a uniformly random direction
    meta.json              frame size, the photos and shapes used, the events' frames

Sparse boxes ("a box every T frames", T = spec.box_every) are rows 0, T, 2T, ... of
groundtruth.txt. Every random draw comes from
`np.random.default_rng([seed, split id, sequence index, purpose id])`, so the same spec
gives byte-identical files and different split names give different sequences.

    spec = TrackingSpec(split="train", num_sequences=40, num_frames=100)
    generate_tracking_split("data/tracking/train", spec)
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

from ebm_jax.data.tracking_render import (PHOTO_POOLS, SHAPE_KINDS, ObjectTrack,
                                          SequencePlan, background_photos, load_photo,
                                          photo_is_grey, random_shape, render_frame,
                                          shape_box)

__all__ = ["PHOTO_POOLS", "TrackingSpec", "TrackingSpecError", "VERSION",
           "generate_tracking_split", "plan_sequence", "sequence_name", "spec_identity",
           "write_jpeg_frame"]

VERSION = 1  # bump when the same spec would render different files
SPLIT_IDS = {"train": 0, "val": 1, "test": 2}
PURPOSES = {"scene": 0, "camera": 1, "target": 2, "motion": 3, "distractors": 4,
            "occluders": 5, "photometric": 6, "noise": 7, "points": 8}
MIN_FIRST_SIDE = 12.0  # px, the target's box in the first frame
JPEG_QUALITY = 90


class TrackingSpecError(ValueError):
    """A TrackingSpec field outside its allowed range."""


# allowed ranges: [low, high]; "(" marks an open lower end
_INTEGERS = {"num_sequences": (1, 99_999), "num_frames": (1, 100_000), "height": (48, 4096),
             "width": (48, 4096), "seed": (0, 2**63 - 1), "box_every": (1, 100_000)}
_NUMBERS = {"point_shift": (0.0, 1e4), "aspect_change": (1.0, 4.0),
            "rotation_speed": (0.0, 45.0), "speed": (0.0, 0.1), "jump_prob": (0.0, 1.0),
            "out_of_view_rate": (0.0, 1.0), "distractor_front_prob": (0.0, 1.0),
            "occlusion_rate": (0.0, 1.0), "camera_speed": (0.0, 0.05),
            "illumination": (0.0, 0.9), "blur_prob": (0.0, 1.0), "noise_std": (0.0, 0.5),
            "edge_softness": ("(", 0.0, 10.0)}
_PAIRS = {"target_size": ("(", 0.0, 0.5), "scale_range": ("(", 0.0, 10.0),
          "num_distractors": (0, 8)}


def _checked(name: str, value, limits):
    """`value` as an int (integer limits) or float, or TrackingSpecError naming the field."""
    open_low = limits[0] == "("
    low, high = limits[-2:]
    integer = isinstance(low, int)
    ok = not isinstance(value, bool) and isinstance(
        value, (int, np.integer) if integer else (int, float, np.integer, np.floating))
    ok = ok and math.isfinite(value) and (low < value if open_low else low <= value) \
        and value <= high
    if not ok:
        kind = "an integer" if integer else "a number"
        raise TrackingSpecError(f"TrackingSpec.{name} must be {kind} in "
                                f"{'(' if open_low else '['}{low}, {high}], got {value!r}")
    return int(value) if integer else float(value)


@dataclasses.dataclass(frozen=True)
class TrackingSpec:
    """What to generate: `num_sequences` x `num_frames` frames of height x width (3 x 12
    at 96 x 128 takes well under a second once the photos are loaded), and how hard."""

    split: str  # "train", "val" (both from the train pool of photos) or "test"
    num_sequences: int
    num_frames: int
    height: int = 240
    width: int = 320
    seed: int = 0
    point_shift: float = 20.0  # px, the noisy point's distance from the true one
    box_every: int = 10  # T of the sparse boxes (rows 0, T, 2T, ...)
    target_size: tuple[float, float] = (0.08, 0.3)  # first 2 sqrt(sx sy) / shorter side
    scale_range: tuple[float, float] = (0.5, 2.0)  # size relative to the first frame
    aspect_change: float = 1.5  # largest factor of aspect-ratio drift
    rotation_speed: float = 0.5  # deg / frame, std of the angular velocity's innovations
    speed: float = 0.006  # std of the velocity's innovations / shorter side, per frame
    jump_prob: float = 0.03  # per frame
    out_of_view_rate: float = 0.005  # per frame, the chance an out-of-view stretch starts
    num_distractors: tuple[int, int] = (1, 3)
    distractor_front_prob: float = 0.25
    occlusion_rate: float = 0.02  # per frame, the chance an occluder starts crossing
    camera_speed: float = 0.003  # std of the pan velocity's innovations / window width
    illumination: float = 0.3  # amplitude of the gain and spatial ramp
    blur_prob: float = 0.1  # per frame
    noise_std: float = 0.02  # largest noise std, a fraction of 255
    edge_softness: float = 1.5  # px, width of the alpha ramp at shape edges

    def __post_init__(self):
        if self.split not in SPLIT_IDS:
            raise TrackingSpecError(f"TrackingSpec.split must be one of {tuple(SPLIT_IDS)}, "
                                    f"got {self.split!r}")
        for name, limits in (_INTEGERS | _NUMBERS).items():
            object.__setattr__(self, name, _checked(name, getattr(self, name), limits))
        for name, limits in _PAIRS.items():
            value = getattr(self, name)
            if not isinstance(value, (tuple, list)) or len(value) != 2:
                raise TrackingSpecError(f"TrackingSpec.{name} must be a pair (min, max), "
                                        f"got {value!r}")
            value = tuple(_checked(name, v, limits) for v in value)
            if value[0] > value[1]:
                raise TrackingSpecError(f"TrackingSpec.{name} must be a pair with min <= max, "
                                        f"got {value!r}")
            object.__setattr__(self, name, value)
        if not self.scale_range[0] <= 1.0 <= self.scale_range[1]:
            raise TrackingSpecError(f"TrackingSpec.scale_range must be a pair with "
                                    f"min <= 1 <= max, got {self.scale_range!r}")


def spec_identity(spec: TrackingSpec) -> dict:
    """The JSON-able content of spec.json: every field and the generator's VERSION."""
    fields = {k: list(v) if isinstance(v, tuple) else v
              for k, v in dataclasses.asdict(spec).items()}
    return {**fields, "version": VERSION}


def sequence_name(spec: TrackingSpec, index: int) -> str:
    return f"{spec.split}_{index + 1:05d}"


def _rng(spec: TrackingSpec, index: int, purpose: str) -> np.random.Generator:
    return np.random.default_rng([spec.seed, SPLIT_IDS[spec.split], index, PURPOSES[purpose]])


def _reflect(value: np.ndarray, velocity: np.ndarray, low, high) -> None:
    """Folds `value` back into [low, high] (in place), flipping the velocity's sign."""
    low, high = np.broadcast_to(low, value.shape), np.broadcast_to(high, value.shape)
    below, above = value < low, value > high
    value[below], value[above] = 2 * low[below] - value[below], 2 * high[above] - value[above]
    velocity[below | above] *= -1
    np.clip(value, low, high, out=value)


def _plan_appearance(rng, n: int, spec: TrackingSpec) -> np.ndarray:
    """(n, 3): log scale (within log scale_range), log aspect change (within
    +-log aspect_change), rotation (rad); each a random walk with a smoothed step."""
    noise = rng.normal(size=(n, 3)) * [0.005, 0.004, math.radians(spec.rotation_speed)]
    low = np.log([spec.scale_range[0], 1 / spec.aspect_change, 1.0]) - [0, 0, np.inf]
    high = np.log([spec.scale_range[1], spec.aspect_change, 1.0]) + [0, 0, np.inf]
    out, step = np.zeros((n, 3)), np.zeros(3)
    for t in range(1, n):
        step = 0.93 * step + noise[t]
        value = out[t - 1] + step
        _reflect(value, step, low, high)
        out[t] = value
    return out


def _poses(centres, appearance, half_size, aspect, angle) -> np.ndarray:
    sx = half_size * math.sqrt(aspect) * np.exp(appearance[:, 0] + appearance[:, 1] / 2)
    sy = half_size / math.sqrt(aspect) * np.exp(appearance[:, 0] - appearance[:, 1] / 2)
    return np.column_stack([centres, sx, sy, angle + appearance[:, 2]])


def _plan_track(rng, n, spec: TrackingSpec, start, *, jump_prob, out_rate, radius, events):
    """Centres (n, 2): velocity AR(1) of innovations `speed` x shorter side, reflected
    at the frame's borders; jumps; out-of-view stretches (through the nearest border to
    `radius` + 3 px beyond it, 5-20 frames out, back to a random point inside)."""
    height, width = spec.height, spec.width
    short, size = min(height, width), np.array([width - 1.0, height - 1.0])
    centres = np.empty((n, 2))
    centres[0] = pos = np.array(start, float)
    velocity = np.zeros(2)
    t = 1
    while t < n:
        if t >= 5 and rng.random() < out_rate:
            lengths = rng.integers([2, 5, 2], [6, 21, 6])
            edge = int(np.argmin([pos[0], size[0] - pos[0], pos[1], size[1] - pos[1]]))
            axis, outside = edge // 2, pos.copy()
            outside[axis] = -(radius + 3) if edge % 2 == 0 else size[axis] + radius + 3
            drifted = outside.copy()
            drifted[1 - axis] += rng.uniform(-0.3, 0.3) * size[1 - axis]
            inside = rng.uniform(0.2, 0.8, 2) * size
            path = [pos + (outside - pos) * k / lengths[0] for k in range(1, lengths[0] + 1)]
            path += [outside + (drifted - outside) * k / lengths[1]
                     for k in range(1, lengths[1] + 1)]
            path += [drifted + (inside - drifted) * k / lengths[2]
                     for k in range(1, lengths[2] + 1)]
            m = min(len(path), n - t)
            centres[t:t + m] = path[:m]
            if t + lengths[0] < n:
                events["out_of_view"].append(
                    [t + int(lengths[0]), min(t + int(lengths[0] + lengths[1]), n) - 1])
            t += m
            pos, velocity = centres[t - 1].copy(), np.zeros(2)
            continue
        velocity = 0.85 * velocity + rng.normal(0.0, spec.speed * short, 2)
        if rng.random() < jump_prob:
            phi = rng.uniform(0.0, 2 * math.pi)
            pos = pos + rng.uniform(0.1, 0.3) * short * np.array([np.cos(phi), np.sin(phi)])
            events["jumps"].append(t)
        pos = pos + velocity
        _reflect(pos, velocity, 0.0, size)
        centres[t] = pos
        t += 1
    return centres


def _texture_rect(rng, photo_name: str) -> tuple[float, float, float, float]:
    h, w = load_photo(photo_name).shape[:2]
    tw = rng.uniform(0.25, 0.6) * min(h, w)
    th = min(tw * rng.uniform(0.7, 1.4), 0.9 * h)
    return (float(rng.uniform(0, w - tw)), float(rng.uniform(0, h - th)), float(tw), float(th))


def _gain(rng, photo_name: str) -> tuple[float, float, float]:
    """The tint of a greyscale photo (1 for a colour photo)."""
    tint = 1.0 - 0.35 * rng.random(3)
    return tuple(map(float, tint)) if photo_is_grey(photo_name) else (1.0, 1.0, 1.0)


def _plan_camera(rng, photo_shape, n: int, spec: TrackingSpec):
    """(n, 3) window centre and width in the photo (pan: velocity AR(1); zoom: log
    width a smoothed walk within x0.8-1.25), and the photo's pre-resize factor."""
    hp, wp = photo_shape
    ratio = spec.height / spec.width
    fit = min(wp, hp / ratio)
    base = rng.uniform(0.45, 0.8) * fit
    step = spec.camera_speed * base
    noise = rng.normal(size=(n, 3)) * np.array([step, step, 0.003])
    camera = np.empty((n, 3))
    zoom, zoom_step, velocity = np.zeros(1), np.zeros(1), np.zeros(2)
    window = base
    pos = rng.uniform([window / 2, window * ratio / 2],
                      [wp - window / 2, hp - window * ratio / 2])
    for t in range(n):
        if t:
            zoom_step = 0.95 * zoom_step + noise[t, 2]
            zoom = zoom + zoom_step
            _reflect(zoom, zoom_step, math.log(0.8), math.log(1.25))
            window = min(base * math.exp(zoom[0]), fit)
            velocity = 0.9 * velocity + noise[t, :2]
            pos = pos + velocity
            _reflect(pos, velocity, [window / 2, window * ratio / 2],
                     [wp - window / 2, hp - window * ratio / 2])
        camera[t] = (pos[0] - 0.5, pos[1] - 0.5, window)
    scale = min(1.0, round(1.25 * spec.width / camera[:, 2].min(), 4))
    return camera, scale


def _plan_target(rng, motion_rng, n: int, spec: TrackingSpec, texture: str, events: dict):
    """The target: a shape, a first size (its box at least MIN_FIRST_SIDE px on each
    side), a start where the first box lies inside the frame, appearance and motion."""
    kind = SHAPE_KINDS[rng.integers(len(SHAPE_KINDS))]
    shape = random_shape(rng, kind)
    aspect, angle = math.exp(rng.uniform(-0.5, 0.5)), rng.normal(0.0, 0.3)
    unit_pose = (0.0, 0.0, 0.5 * math.sqrt(aspect), 0.5 / math.sqrt(aspect), angle)
    x, y, w, h = shape_box(shape, unit_pose)  # of size 1; a box scales with the size
    size = max(rng.uniform(*spec.target_size) * min(spec.height, spec.width),
               MIN_FIRST_SIDE / min(w, h))
    size = min(size, 0.9 * spec.width / w, 0.9 * spec.height / h)
    first = np.array([x - 1.5, y - 1.5, x - 1.5 + w, y - 1.5 + h]) * size  # around (0, 0)
    margin = spec.edge_softness + 2.0
    low = margin - first[:2]
    high = np.array([spec.width - 1.0, spec.height - 1.0]) - margin - first[2:]
    start = rng.uniform(low, np.maximum(high, low))
    appearance = _plan_appearance(rng, n, spec)
    half_sizes = _poses(np.zeros((n, 2)), appearance, size / 2, aspect, angle)[:, 2:4]
    centres = _plan_track(motion_rng, n, spec, start, jump_prob=spec.jump_prob,
                          out_rate=spec.out_of_view_rate,
                          radius=half_sizes.max() + spec.edge_softness, events=events)
    poses = _poses(centres, appearance, size / 2, aspect, angle)
    return ObjectTrack(shape, poses, texture, _texture_rect(rng, texture), _gain(rng, texture))


def _plan_distractors(rng, n: int, spec: TrackingSpec, target: ObjectTrack, meta: dict):
    """1-3 (num_distractors) objects of the target's photo (another region, recoloured
    half of the time) and shape family, moving on their own; in front of the target
    with distractor_front_prob unless they overlap it in the first frame."""
    behind, front = [], []
    kind, first = target.shape.kind, target.poses[0]
    size = 2 * math.sqrt(first[2] * first[3])
    for _ in range(rng.integers(spec.num_distractors[0], spec.num_distractors[1] + 1)):
        shape = random_shape(rng, kind)
        d_size, aspect = size * rng.uniform(0.7, 1.3), math.exp(rng.uniform(-0.5, 0.5))
        radius = (d_size / 2 * math.exp(0.25) * math.sqrt(spec.aspect_change)
                  * spec.scale_range[1])
        for _ in range(50):
            start = rng.uniform(0, 1, 2) * [spec.width - 1, spec.height - 1]
            clear = (np.hypot(*(start - first[:2])) > max(first[2:4]) + radius
                     + spec.edge_softness + 2)
            if clear:
                break
        in_front = bool(clear and rng.random() < spec.distractor_front_prob)
        centres = _plan_track(rng, n, spec, start, jump_prob=spec.jump_prob / 2, out_rate=0.0,
                              radius=radius, events={"jumps": []})
        recolour = rng.uniform(0.75, 1.25, 3) if rng.random() < 0.5 else np.ones(3)
        poses = _poses(centres, _plan_appearance(rng, n, spec), d_size / 2, aspect,
                       rng.uniform(-math.pi, math.pi))
        (front if in_front else behind).append(ObjectTrack(
            shape, poses, target.texture, _texture_rect(rng, target.texture),
            tuple(float(g) for g in np.array(target.colour_gain) * recolour)))
        meta["distractors"].append({"texture": target.texture, "shape": kind,
                                    "in_front": in_front})
    return behind, front


def _plan_occluders(rng, n: int, spec: TrackingSpec, target: ObjectTrack, photos, meta):
    """Occlusion events (from frame 2, starting with occlusion_rate per frame, 6-20
    frames long): a shape textured from another photo crossing, on a straight line, the
    point where the target is planned to be at the event's middle frame."""
    occluders, t = [], 2
    radius = np.maximum(target.poses[:, 2], target.poses[:, 3])
    while t < n - 1:
        if rng.random() >= spec.occlusion_rate:
            t += 1
            continue
        duration, kind = int(rng.integers(6, 21)), SHAPE_KINDS[rng.integers(len(SHAPE_KINDS))]
        photo = photos[rng.integers(len(photos))]
        mid = min(t + duration // 2, n - 1)
        half, log_aspect = radius[mid] * rng.uniform(0.6, 1.4), rng.uniform(-0.7, 0.7)
        psi, offset = rng.uniform(0, 2 * math.pi), rng.uniform(-0.5, 0.5) * radius[mid]
        along = np.array([math.cos(psi), math.sin(psi)])
        across = np.array([-along[1], along[0]])
        travel = 2 * (radius[mid] + half * math.exp(abs(log_aspect) / 2)
                      + spec.edge_softness + 2)
        frames = np.arange(t, min(t + duration, n))
        poses = np.full((n, 5), np.nan)
        poses[frames, :2] = (target.poses[mid, :2] + offset * across
                             + np.outer((frames - mid) / duration * travel, along))
        poses[frames, 2:] = (half * math.exp(log_aspect / 2), half * math.exp(-log_aspect / 2),
                             rng.uniform(-math.pi, math.pi))
        poses[frames, 4] += (frames - t) * rng.normal(0.0, 0.03)
        occluders.append(ObjectTrack(random_shape(rng, kind), poses, photo,
                                     _texture_rect(rng, photo), _gain(rng, photo)))
        span = [int(frames[0]), int(frames[-1])]
        meta["events"]["occlusions"].append(span)
        meta["occluders"].append({"texture": photo, "shape": kind, "frames": span})
        t += duration
    return occluders


def plan_sequence(spec: TrackingSpec, index: int) -> SequencePlan:
    """Sequence `index` of the split: photos, camera path, the target's and the other
    objects' shapes and poses, photometric changes (rendered by
    `ebm_jax.data.tracking_render.render_frame`)."""
    if not isinstance(spec, TrackingSpec):
        raise TypeError(f"spec must be a TrackingSpec, got {type(spec).__name__}")
    if isinstance(index, bool) or not 0 <= index < spec.num_sequences:
        raise ValueError(f"sequence index must be in [0, {spec.num_sequences}), got {index!r}")
    n = spec.num_frames
    pool = PHOTO_POOLS["test" if spec.split == "test" else "train"]
    scene = _rng(spec, index, "scene")
    backgrounds = background_photos(pool)
    background = backgrounds[scene.integers(len(backgrounds))]
    textures = [p for p in pool if p != background]
    texture = textures[scene.integers(len(textures))]
    camera, background_scale = _plan_camera(_rng(spec, index, "camera"),
                                            load_photo(background).shape[:2], n, spec)
    events = {"jumps": [], "out_of_view": [], "occlusions": [], "blur": []}
    target = _plan_target(_rng(spec, index, "target"), _rng(spec, index, "motion"), n, spec,
                          texture, events)
    meta = {"background": background,
            "target": {"texture": texture, "shape": target.shape.kind},
            "distractors": [], "occluders": [], "events": events}
    behind, front = _plan_distractors(_rng(spec, index, "distractors"), n, spec, target, meta)
    front += _plan_occluders(_rng(spec, index, "occluders"), n, spec, target,
                             [p for p in textures if p != texture], meta)

    # photometric: illumination gain and turning ramp, blur (never in frame 0), noise
    rng, frames = _rng(spec, index, "photometric"), np.arange(n)
    periods, phases = rng.uniform(60, 240, 2), rng.uniform(0, 2 * math.pi, 3)
    illumination = np.column_stack([
        0.5 * spec.illumination * np.sin(2 * math.pi * frames / periods[0] + phases[0]),
        spec.illumination * np.sin(2 * math.pi * frames / periods[1] + phases[1]),
        phases[2] + rng.uniform(-0.02, 0.02) * frames])
    blurred = (rng.random(n) < spec.blur_prob) & (frames > 0)
    kinds = np.where(rng.random(n) < 0.6, 1, 2) * blurred
    sizes = np.where(kinds == 1, rng.choice([3, 5, 7, 9], n), rng.uniform(0.6, 1.6, n))
    blur = np.column_stack([kinds, sizes, rng.uniform(0, math.pi, n)])
    events["blur"] = [int(i) for i in np.flatnonzero(blurred)]
    return SequencePlan(
        spec.height, spec.width, background, background_scale, _gain(rng, background), camera,
        target, tuple(behind), tuple(front), illumination, blur,
        spec.noise_std * float(rng.uniform(0.25, 1.0)),
        (spec.seed, SPLIT_IDS[spec.split], index, PURPOSES["noise"]), spec.edge_softness, meta)


def write_jpeg_frame(path: Path, frame: np.ndarray) -> None:
    """A uint8 RGB frame as baseline JPEG (quality 90, no metadata; deterministic)."""
    Image.fromarray(frame, "RGB").save(path, format="JPEG", quality=JPEG_QUALITY)


def _lines(rows) -> str:
    return "".join(f"{row}\n" for row in rows)


def _write_sequence(seq_dir: Path, plan: SequencePlan, spec: TrackingSpec, index: int) -> None:
    seq_dir.mkdir()
    n = plan.num_frames
    boxes, visible = np.empty((n, 4)), np.empty(n)
    for t in range(n):
        frame = render_frame(plan, t)
        write_jpeg_frame(seq_dir / f"{t + 1:08d}.jpg", frame.image)
        boxes[t], visible[t] = frame.box, frame.visible
    visible_text = [f"{v:.4f}" for v in visible]
    visible = np.array([float(v) for v in visible_text])  # the labels agree with the file
    absent = visible == 0.0
    points = boxes[:, :2] + (boxes[:, 2:] - 1.0) / 2.0
    points[absent] = np.nan
    phi = _rng(spec, index, "points").uniform(0.0, 2 * math.pi, n)
    noisy = points + spec.point_shift * np.column_stack([np.cos(phi), np.sin(phi)])
    (seq_dir / "groundtruth.txt").write_text(
        _lines(",".join(f"{v:.4f}" for v in box) for box in boxes))
    (seq_dir / "absence.label").write_text(_lines(int(a) for a in absent))
    (seq_dir / "cover.label").write_text(_lines(math.ceil(8 * v) for v in visible))
    (seq_dir / "visible_ratio.txt").write_text(_lines(visible_text))
    for name, xy in (("points.txt", points), ("noisy_points.txt", noisy)):
        (seq_dir / name).write_text(_lines(f"{x:.4f},{y:.4f}" for x, y in xy))
    meta = {"name": seq_dir.name, "frame_size": {"height": plan.height, "width": plan.width},
            "num_frames": n, **plan.meta}
    (seq_dir / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")


def _holds_spec(dest: Path, identity: dict) -> bool:
    try:
        return json.loads((dest / "spec.json").read_text()) == identity
    except (OSError, ValueError):
        return False


def generate_tracking_split(dest, spec: TrackingSpec, *, progress: bool = True) -> Path:
    """Writes the split into the directory `dest` (layout in the module docstring) and
    returns it. Atomic: written into a sibling temporary directory renamed into place,
    so a stopped generation leaves nothing at `dest`. An existing `dest` with the same
    spec.json is returned as it is; one with another spec (or other content) raises
    ValueError naming it."""
    from tqdm.auto import tqdm

    if not isinstance(spec, TrackingSpec):
        raise TypeError(f"spec must be a TrackingSpec, got {type(spec).__name__}")
    dest = Path(dest).expanduser()
    identity = json.loads(json.dumps(spec_identity(spec)))

    def check_existing() -> bool:
        if _holds_spec(dest, identity):
            return True
        if dest.is_dir() and not any(dest.iterdir()):
            return False  # an empty directory is replaced
        raise ValueError(f"tracking split directory {dest} already exists and does not hold "
                         f"this spec ({dest / 'spec.json'} differs or is missing); choose "
                         f"another directory or delete it")

    if dest.exists() and check_existing():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".partial"))
    try:
        names = [sequence_name(spec, i) for i in range(spec.num_sequences)]
        for i in tqdm(range(spec.num_sequences), desc=f"tracking {spec.split}", unit="seq",
                      disable=not progress):
            _write_sequence(tmp / names[i], plan_sequence(spec, i), spec, i)
        (tmp / "list.txt").write_text(_lines(names))
        (tmp / "spec.json").write_text(json.dumps(identity, indent=2, sort_keys=True) + "\n")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes 0700
        try:
            os.rename(tmp, dest)  # replaces at most an empty directory
        except OSError:
            if not dest.exists() or not check_existing():
                raise
            shutil.rmtree(tmp)  # written meanwhile by another process
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest
