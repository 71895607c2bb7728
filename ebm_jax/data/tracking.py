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
differ. Photos smaller than 250 px on the shorter side texture objects only. The
"outside" split's photos are procedural, drawn from its seed
(`ebm_jax.data.procedural_textures`): its appearance comes from neither pool, and each
seed draws another pool of them.

Scene groups (`TrackingSpec.scene_group` = g > 1): sequences k g .. k g + g - 1 share
their scene, the background photo, the camera path and the photometric changes, and
differ in target (texture, shape, motion), distractors and occluders, so that a
contrastive learner whose negatives are other videos can tell a group's videos apart by
their targets only (`ebm_jax.data.socl_pairs.context_batches` puts whole groups in a
batch). With `TrackingSpec.scene_path` the group's targets also move together (each on
the centre path of the group's first target, with its own shape, size and texture), so
the background around the target is shared as well. meta.json's jumps and out-of-view
stretches are then the first target's; a larger target can stay partly in view during
such a stretch, and its labels (visible_ratio.txt, absence.label) say so, as they come
from the rendered frame.

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

Modules: this one holds the spec, the per-purpose random generators, `plan_sequence`
(photos, photometric changes, and the plans of `ebm_jax.data.tracking_motion`: camera
path, the objects' shapes, textures and poses) and the writer; frames are drawn by
`ebm_jax.data.tracking_render`, shapes and their exact boxes are in
`ebm_jax.data.tracking_shapes`.

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
from pathlib import Path

import numpy as np
from PIL import Image

from ebm_jax.data.tracking_motion import (MIN_FIRST_SIDE, photo_gain, plan_camera,
                                          plan_distractors, plan_occluders, plan_target)
from ebm_jax.data.tracking_render import (PHOTO_POOLS, SequencePlan, background_photos,
                                          load_photo, photo_pool, render_frame)
from ebm_jax.data.tracking_spec import SPLIT_IDS, TrackingSpec, TrackingSpecError
from ebm_jax.io import partial_dir

__all__ = ["MIN_FIRST_SIDE", "PHOTO_POOLS", "TrackingSpec", "TrackingSpecError", "VERSION",
           "default_workers",
           "generate_tracking_split", "plan_sequence", "scene_ids", "scene_of",
           "sequence_name", "spec_identity", "write_jpeg_frame"]

VERSION = 1  # bump when the same spec would render different files
PURPOSES = {"scene": 0, "camera": 1, "target": 2, "motion": 3, "distractors": 4,
            "occluders": 5, "photometric": 6, "noise": 7, "points": 8, "texture": 9}
SHARED_PURPOSES = ("scene", "camera", "photometric")  # drawn per scene group
JPEG_QUALITY = 90


def spec_identity(spec: TrackingSpec) -> dict:
    """The JSON-able content of spec.json: every field and the generator's VERSION
    (`scene_group` only where it is not 1, `scene_path` only where it is True, so that
    the splits written before they existed keep their identity)."""
    fields = {k: list(v) if isinstance(v, tuple) else v
              for k, v in dataclasses.asdict(spec).items()}
    if fields["scene_group"] == 1:
        del fields["scene_group"]
    if not fields["scene_path"]:
        del fields["scene_path"]
    return {**fields, "version": VERSION}


def scene_of(spec: TrackingSpec, index: int) -> int:
    """The scene group of sequence `index` (`TrackingSpec.scene_group`): the sequences
    of one group share background photo, camera path and photometric changes."""
    return index // spec.scene_group


def sequence_name(spec: TrackingSpec, index: int) -> str:
    return f"{spec.split}_{index + 1:05d}"


def scene_ids(names, scene_group: int) -> list[int]:
    """The scene group (`scene_of`) of each generated sequence named "<split>_<00001>"
    (`sequence_name`), for splits written with `TrackingSpec.scene_group`."""
    ids = []
    for name in names:
        head, _, number = str(name).rpartition("_")
        if head not in SPLIT_IDS or not number.isdigit() or int(number) < 1:
            raise ValueError(f"sequence {name!r} is not a generated one (<split>_<00001>): "
                             "its scene group is unknown")
        ids.append((int(number) - 1) // scene_group)
    return ids


def _rng(spec: TrackingSpec, index: int, purpose: str) -> np.random.Generator:
    """The generator of one purpose of sequence `index`; a shared purpose's is its scene
    group's (the group's first sequence's, so `scene_group=1` draws as before)."""
    if purpose in SHARED_PURPOSES:
        index = scene_of(spec, index) * spec.scene_group
    return np.random.default_rng([spec.seed, SPLIT_IDS[spec.split], index, PURPOSES[purpose]])


def _plan_target(spec: TrackingSpec, index: int, textures, scene, events):
    """Sequence `index`'s target texture (one scene's sequences differ in their target:
    with scene groups the texture is drawn per sequence, and `scene`, the scene's
    generator, is used only without them) and `plan_target`."""
    pick = scene if spec.scene_group == 1 else _rng(spec, index, "texture")
    texture = textures[pick.integers(len(textures))]
    return texture, plan_target(_rng(spec, index, "target"), _rng(spec, index, "motion"),
                                spec.num_frames, spec, texture, events)


def plan_sequence(spec: TrackingSpec, index: int) -> SequencePlan:
    """Sequence `index` of the split: photos, camera path, the target's and the other
    objects' shapes and poses, photometric changes (rendered by
    `ebm_jax.data.tracking_render.render_frame`)."""
    if not isinstance(spec, TrackingSpec):
        raise TypeError(f"spec must be a TrackingSpec, got {type(spec).__name__}")
    if isinstance(index, bool) or not 0 <= index < spec.num_sequences:
        raise ValueError(f"sequence index must be in [0, {spec.num_sequences}), got {index!r}")
    n = spec.num_frames
    pool = photo_pool(spec.split, spec.seed)
    scene = _rng(spec, index, "scene")
    backgrounds = background_photos(pool)
    background = backgrounds[scene.integers(len(backgrounds))]
    textures = [p for p in pool if p != background]
    camera, background_scale = plan_camera(_rng(spec, index, "camera"),
                                           load_photo(background).shape[:2], n, spec)
    events = {"jumps": [], "out_of_view": [], "occlusions": [], "blur": []}
    texture, target = _plan_target(spec, index, textures, scene, events)
    leader = scene_of(spec, index) * spec.scene_group
    if spec.scene_path and index != leader:
        # the group's targets move together: the first sequence's centres, jumps and
        # out-of-view stretches; this target's own shape, size, pose and appearance
        path = {"jumps": [], "out_of_view": []}
        _, first = _plan_target(spec, leader, textures, None, path)  # groups: no scene draw
        poses = target.poses.copy()
        poses[:, :2] = first.poses[:, :2]
        target = dataclasses.replace(target, poses=poses)
        events.update(path)
    meta = {"background": background, **({"scene": scene_of(spec, index)}
                                         if spec.scene_group > 1 else {}),
            "target": {"texture": texture, "shape": target.shape.kind},
            "distractors": [], "occluders": [], "events": events}
    behind, front = plan_distractors(_rng(spec, index, "distractors"), n, spec, target, meta)
    front += plan_occluders(_rng(spec, index, "occluders"), n, spec, target,
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
        spec.height, spec.width, background, background_scale, photo_gain(rng, background),
        camera, target, tuple(behind), tuple(front), illumination, blur,
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


def _write_one(tmp: str, name: str, spec: TrackingSpec, index: int) -> None:
    """One sequence, planned and written (a worker process's task)."""
    _write_sequence(Path(tmp) / name, plan_sequence(spec, index), spec, index)


def default_workers() -> int:
    """Worker processes of the host-side work that runs per sequence (writing a split,
    TOP maps): the CPUs this process may use, at most 8."""
    from ebm_jax.data.pipeline import usable_cpus

    return min(8, usable_cpus())


def generate_tracking_split(dest, spec: TrackingSpec, *, progress: bool = True,
                            workers: int | None = None) -> Path:
    """Writes the split into the directory `dest` (layout in the module docstring) and
    returns it. Atomic: written into a sibling temporary directory renamed into place,
    so a stopped generation leaves nothing at `dest`. An existing `dest` with the same
    spec.json is returned as it is; one with another spec (or other content) raises
    ValueError naming it. `workers` processes (default: the CPUs this process may use,
    at most 8) write sequences in parallel; every sequence's draws depend on its index
    alone, so the files are the same for any number of workers."""
    from tqdm.auto import tqdm

    if not isinstance(spec, TrackingSpec):
        raise TypeError(f"spec must be a TrackingSpec, got {type(spec).__name__}")
    workers = default_workers() if workers is None else workers
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
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
    tmp = partial_dir(dest)  # (a killed attempt's is removed)
    try:
        names = [sequence_name(spec, i) for i in range(spec.num_sequences)]
        bar = tqdm(total=spec.num_sequences, desc=f"tracking {spec.split}", unit="seq",
                   disable=not progress)
        if workers == 1 or spec.num_sequences < 4:
            for i in range(spec.num_sequences):
                _write_one(str(tmp), names[i], spec, i)
                bar.update()
        else:  # spawned workers: the caller may hold threads (JAX) that fork would copy
            import concurrent.futures
            import multiprocessing

            with concurrent.futures.ProcessPoolExecutor(
                    min(workers, spec.num_sequences),
                    mp_context=multiprocessing.get_context("spawn")) as pool:
                jobs = [pool.submit(_write_one, str(tmp), names[i], spec, i)
                        for i in range(spec.num_sequences)]
                try:
                    for done in concurrent.futures.as_completed(jobs):
                        done.result()
                        bar.update()
                except BaseException:
                    pool.shutdown(wait=True, cancel_futures=True)
                    raise
        bar.close()
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
