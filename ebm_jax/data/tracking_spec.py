"""What the generated tracking benchmark (`ebm_jax.data.tracking`) renders: the
`TrackingSpec` of a split, its fields checked against their allowed ranges, shared by the
generator and the plans of its sequences (`ebm_jax.data.tracking_motion`)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

__all__ = ["SPLIT_IDS", "TrackingSpec", "TrackingSpecError"]

SPLIT_IDS = {"train": 0, "val": 1, "test": 2, "outside": 3}


class TrackingSpecError(ValueError):
    """A TrackingSpec field outside its allowed range."""


# allowed ranges: [low, high]; "(" marks an open lower end
_INTEGERS = {"num_sequences": (1, 99_999), "num_frames": (1, 100_000), "height": (48, 4096),
             "width": (48, 4096), "seed": (0, 2**63 - 1), "box_every": (1, 100_000),
             "scene_group": (1, 64)}
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

    # "train", "val" (both from the train pool of photos), "test" (the test pool) or
    # "outside" (procedural photos drawn from the seed: appearance from neither pool)
    split: str
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
    # sequences k g .. k g + g - 1 share their scene (background photo, camera path,
    # illumination, blur): each has its own target, distractors, occluders and motion, so
    # that a video's scene no longer tells it apart from its group's (1: every sequence
    # its own scene)
    scene_group: int = 1
    # a scene group's targets move together: every one follows the centre path (start,
    # motion, jumps, out-of-view stretches) of its group's first sequence's target, so
    # that the background around the target is shared too (needs scene_group > 1)
    scene_path: bool = False

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
        if not isinstance(self.scene_path, (bool, np.bool_)):
            raise TrackingSpecError(f"TrackingSpec.scene_path must be True or False, "
                                    f"got {self.scene_path!r}")
        object.__setattr__(self, "scene_path", bool(self.scene_path))
        if self.scene_path and self.scene_group == 1:
            raise TrackingSpecError("TrackingSpec.scene_path moves a scene group's targets "
                                    "together: it needs scene_group in [2, 64], got 1")
        if not self.scale_range[0] <= 1.0 <= self.scale_range[1]:
            raise TrackingSpecError(f"TrackingSpec.scale_range must be a pair with "
                                    f"min <= 1 <= max, got {self.scale_range!r}")
