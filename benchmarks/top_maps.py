"""TOP map speed and proposal recall (`ebm_jax.tracking.top_maps`; SoCL, Wu & Chan,
sec. 3.1: "about 0.4 seconds for one video frame (512x512)"; Fig. 4: target
recall against the number of kept proposals, IoU 0.5).

    python benchmarks/top_maps.py --out results/bench [--data DIR] [--repeats 5]

- Speed: seconds per frame of `top_map` on a real photo (scikit-image's astronaut,
  512x512, the point on the face) and on the same photo at the training frame size
  (--train-size, default 200x200), median [min, max] over --repeats after one warm-up
  call; and per component, timed apart through the public functions: random proposals,
  EdgeBoxes (edge map, orientation, proposals; with the downscaling), cues (objectness of
  all proposals; with the downscaling), NMS, and the score map. One thread: OpenCV's
  pool set to 1 and the BLAS/OpenMP variables to 1 before NumPy starts.
- Recall (with --data, a split directory of the generated benchmark or any GOT-10k
  layout with points.txt): for every --stride-th frame whose target is visible and whose
  point (--points: the exact or the noisy one) lies in the frame, up to --max-frames, the
  kept boxes of `top_boxes`; the fraction of frames whose first k boxes hold one with
  IoU >= 0.5 with the true box, for k = 1, 2, 4, ..., keep.

Writes top_maps.json and top_maps.md under --out.
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

import argparse  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import cv2  # noqa: E402
import numpy as np  # noqa: E402

from ebm_jax.io import write_report  # noqa: E402
from ebm_jax.train.records import cpu_name  # noqa: E402
from ebm_jax.tracking import top_maps as tm  # noqa: E402

COMPONENTS = ("random", "edgeboxes", "cues", "nms", "map")
PAPER_SECONDS_512 = 0.4
FACE_POINT_512 = (228.0, 118.0)  # x, y (1-indexed) on the astronaut's face


def spread(values) -> dict:
    """Median, min and max of per-repeat values, and the values."""
    v = np.asarray(values, np.float64)
    return {"median": float(np.median(v)), "min": float(v.min()), "max": float(v.max()),
            "values": v.tolist()}


def photo(size: int) -> tuple[np.ndarray, np.ndarray]:
    """The astronaut photo at size x size (area interpolation) and the face point."""
    from skimage import data

    image = data.astronaut()
    if image.shape[:2] != (size, size):
        image = cv2.resize(image, (size, size), interpolation=cv2.INTER_AREA)
    scale = size / 512
    return image, (np.asarray(FACE_POINT_512) - 0.5) * scale + 0.5


def _timed(fn, *args):
    start = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - start


def time_frame(image, point, settings, seed: int = 0) -> dict:
    """Seconds of each component on one frame, and of `top_map` as a whole."""
    seconds = {}
    boxes, seconds["random"] = _timed(tm.random_proposals, image.shape, point, settings,
                                      np.random.default_rng(seed))
    near, seconds["edgeboxes"] = _timed(tm.edgebox_proposals, image, point, settings)
    boxes = np.concatenate([boxes, near])
    scores, seconds["cues"] = _timed(tm.objectness, image, boxes, settings)
    kept, seconds["nms"] = _timed(tm.nms, boxes, scores, settings.nms_iou, settings.keep)
    _, seconds["map"] = _timed(tm.score_map, image.shape[:2], boxes[kept], scores[kept])
    _, seconds["top_map"] = _timed(tm.top_map, image, point, settings, seed)
    seconds["proposals"] = len(boxes)
    return seconds


def speed(size: int, settings, repeats: int) -> dict:
    image, point = photo(size)
    time_frame(image, point, settings)  # warm-up: imports, first allocations
    runs = [time_frame(image, point, settings) for _ in range(repeats)]
    return {"size": size, "point": point.tolist(), "proposals": runs[0]["proposals"],
            "seconds": {k: spread([r[k] for r in runs]) for k in ("top_map",) + COMPONENTS}}


def recall(data: Path, settings, points: str, stride: int, max_frames: int) -> dict:
    from ebm_jax.data.sequences import read_got10k

    kept, truths, seconds, skipped = [], [], [], 0
    for seq in read_got10k(data):
        where = getattr(seq, points)
        if where is None:
            raise SystemExit(f"--data {data}: sequence {seq.name} has no {points}.txt")
        for i in range(0, len(seq), stride):
            if len(kept) == max_frames:
                break
            height, width = seq.image_size
            x, y = where[i]
            if (seq.absent[i] or np.any(np.isnan(seq.boxes[i]))
                    or not (0.5 <= x <= width + 0.5 and 0.5 <= y <= height + 0.5)):
                skipped += 1
                continue
            (boxes, _), sec = _timed(tm.top_boxes, seq.read_frame(i), where[i], settings)
            kept.append(boxes)
            truths.append(seq.boxes[i])
            seconds.append(sec)
    if not kept:
        raise SystemExit(f"--data {data}: no frame with a visible target and a point inside")
    ks = [2**j for j in range(20) if 2**j < settings.keep] + [settings.keep]
    values = tm.recall_at(kept, np.asarray(truths), ks, iou=0.5)
    return {"data": str(data), "points": points, "frames": len(kept), "skipped": skipped,
            "frame_size_seconds": spread(seconds), "ks": ks,
            "recall": [float(v) for v in values]}


def _fmt(x: dict, digits: int = 4) -> str:
    return f"{x['median']:.{digits}f} [{x['min']:.{digits}f}, {x['max']:.{digits}f}]"


def markdown(report: dict) -> str:
    env, runs = report["environment"], report["speed"]
    header = " | ".join(f"{r['size']}x{r['size']} s" for r in runs)
    lines = [f"TOP maps: seconds per frame, median [min, max] over {report['repeats']} "
             f"repeats (paper: {PAPER_SECONDS_512} s at 512x512); cues and EdgeBoxes on a "
             f"copy with the longer side {report['settings']['cue_size']} px; "
             f"{runs[0]['proposals']} proposals at {runs[0]['size']} px.", "",
             f"| component | {header} |", "|---|" + "---:|" * len(runs)]
    for key in ("top_map",) + COMPONENTS:
        label = "**top_map (whole)**" if key == "top_map" else key
        lines.append(f"| {label} | " + " | ".join(_fmt(r["seconds"][key]) for r in runs)
                     + " |")
    if "recall" in report:
        rec = report["recall"]
        lines += ["", f"Recall at IoU 0.5 against the number of kept proposals (SoCL Fig. 4) "
                  f"on {rec['frames']} frames of {rec['data']} ({rec['points']}; "
                  f"{rec['skipped']} frames skipped: target absent or point outside); "
                  f"{_fmt(rec['frame_size_seconds'])} s per frame there.", "",
                  "| kept | " + " | ".join(str(k) for k in rec["ks"]) + " |",
                  "|---|" + "---:|" * len(rec["ks"]),
                  "| recall | " + " | ".join(f"{v:.3f}" for v in rec["recall"]) + " |"]
    lines += ["", f"Machine: {env['cpu_count']} CPU cores ({env['cpu']}), one thread; "
              f"{env['platform']}; NumPy {env['numpy']}, OpenCV {env['cv2']}; load average "
              f"{env['load_average_before']} before the run."]
    return "\n".join(lines) + "\n"


def run(args) -> dict:
    cv2.setNumThreads(1)
    settings = tm.TopMapSettings()
    load = [round(v, 2) for v in os.getloadavg()]
    report = {"repeats": args.repeats,
              "settings": {k: v for k, v in vars(settings).items()},
              "speed": [speed(size, settings, args.repeats)
                        for size in dict.fromkeys((512, args.train_size))],
              "environment": {"cpu": cpu_name(), "cpu_count": os.cpu_count(),
                              "platform": platform.platform(),
                              "python": platform.python_version(),
                              "numpy": np.__version__, "cv2": cv2.__version__,
                              "load_average_before": load}}
    if args.data is not None:
        report["recall"] = recall(args.data, settings, args.points, args.stride,
                                  args.max_frames)
    return report


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("results/bench"))
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--train-size", type=int, default=200,
                   help="side of the square training-size frame (px)")
    p.add_argument("--data", type=Path, default=None,
                   help="a split directory of the generated tracking benchmark")
    p.add_argument("--points", choices=("points", "noisy_points"), default="points")
    p.add_argument("--stride", type=int, default=1, help="every n-th frame of --data")
    p.add_argument("--max-frames", type=int, default=200)
    args = p.parse_args(argv)
    for name, low in (("repeats", 1), ("train_size", 8), ("stride", 1), ("max_frames", 1)):
        if getattr(args, name) < low:
            p.error(f"--{name.replace('_', '-')} must be >= {low}, got {getattr(args, name)}")
    if args.data is not None and not args.data.is_dir():
        p.error(f"--data {args.data} is not a directory")
    report = run(args)
    table = markdown(report)
    write_report(args.out, "top_maps", report, table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
