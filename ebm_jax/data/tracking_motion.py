"""Planning of the generated tracking benchmark's sequences (`ebm_jax.data.tracking`):
the camera's path over the background photo, and each object's shape, texture and poses
over the frames.

- camera (`plan_camera`): a window over the photo panning by a velocity AR(1) and
  zooming by a smoothed walk of its log width, reflected at the photo's borders;
- target (`plan_target`): a random shape and first size, appearance (log scale, log
  aspect change, rotation) a smoothed random walk within the spec's ranges, centres a
  velocity AR(1) reflected at the frame's borders with jumps and out-of-view stretches;
- distractors (`plan_distractors`) and occluders (`plan_occluders`): the objects drawn
  behind and in front of the target.

Each planner draws only from the generators it is given, in a fixed order, so that
`ebm_jax.data.tracking.plan_sequence` gives the same plan for the same spec. Poses are
rows (cx, cy, sx, sy, angle) as `ebm_jax.data.tracking_render.ObjectTrack` holds them.
"""

from __future__ import annotations

import math

import numpy as np

from ebm_jax.data.tracking_render import ObjectTrack, load_photo, photo_is_grey
from ebm_jax.data.tracking_shapes import SHAPE_KINDS, random_shape, shape_box
from ebm_jax.data.tracking_spec import TrackingSpec

MIN_FIRST_SIDE = 12.0  # px, the target's box in the first frame


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


def photo_gain(rng, photo_name: str) -> tuple[float, float, float]:
    """The tint of a greyscale photo (1 for a colour photo)."""
    tint = 1.0 - 0.35 * rng.random(3)
    return tuple(map(float, tint)) if photo_is_grey(photo_name) else (1.0, 1.0, 1.0)


def plan_camera(rng, photo_shape, n: int, spec: TrackingSpec):
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


def plan_target(rng, motion_rng, n: int, spec: TrackingSpec, texture: str, events: dict):
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
    return ObjectTrack(shape, poses, texture, _texture_rect(rng, texture),
                       photo_gain(rng, texture))


def plan_distractors(rng, n: int, spec: TrackingSpec, target: ObjectTrack, meta: dict):
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


def plan_occluders(rng, n: int, spec: TrackingSpec, target: ObjectTrack, photos, meta):
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
                                     _texture_rect(rng, photo), photo_gain(rng, photo)))
        span = [int(frames[0]), int(frames[-1])]
        meta["events"]["occlusions"].append(span)
        meta["occluders"].append({"texture": photo, "shape": kind, "frames": span})
        t += duration
    return occluders
