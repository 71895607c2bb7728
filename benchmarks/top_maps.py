"""TOP map speed and proposal recall (`ebm_jax.tracking.top_maps`; SoCL, Wu & Chan,
sec. 3.1: "about 0.4 seconds for one video frame (512x512)"; Fig. 4: target
recall against the number of kept proposals, IoU 0.5).

    python benchmarks/top_maps.py --out results/bench [--data DIR] [--repeats 5]

- Speed: seconds per frame of `top_map` on a real photo (scikit-image's astronaut,
  512x512, the point on the face) and on the same photo at the training frame size
  (--train-size, default 200x200), median [min, max] over --repeats (alias --rounds)
  rounds after one untimed warm-up round; and per component, timed apart through the
  public functions: random proposals, EdgeBoxes (edge map, orientation, proposals; with
  the downscaling), cues (objectness of all proposals; with the downscaling), NMS, and
  the score map. Each round times every component, then `top_map`, once. Every time is
  taken in wall time (time.perf_counter) and in process CPU time (time.process_time).
  One thread: OpenCV's pool set to 1 and the BLAS/OpenMP variables to 1 before NumPy
  starts. The load average is recorded before and after the run.
- Recall (with --data, a split directory of the generated benchmark or any GOT-10k
  layout with points.txt): for every --stride-th frame whose target is visible and whose
  point (--points: the exact or the noisy one) lies in the frame, up to --max-frames, the
  kept boxes of `top_boxes`; the fraction of frames whose first k boxes hold one with
  IoU >= 0.5 with the true box, for k = 1, 2, 4, ..., keep; and the wall and CPU
  seconds of `top_boxes` on those frames, median [min, max].

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

from ebm_jax.train.records import cpu_name  # noqa: E402
from ebm_jax.tracking import top_maps as tm  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_protocol import BenchRun, summary  # noqa: E402

COMPONENTS = ("random", "edgeboxes", "cues", "nms", "map")
PAPER_SECONDS_512 = 0.4
FACE_POINT_512 = (228.0, 118.0)  # x, y (1-indexed) on the astronaut's face


def spread(values) -> dict:
    """Median, min and max of per-round values (`summary`), and the values."""
    return {**summary(values), "values": [float(v) for v in values]}


def photo(size: int) -> tuple[np.ndarray, np.ndarray]:
    """The astronaut photo at size x size (area interpolation) and the face point."""
    from skimage import data

    image = data.astronaut()
    if image.shape[:2] != (size, size):
        image = cv2.resize(image, (size, size), interpolation=cv2.INTER_AREA)
    scale = size / 512
    return image, (np.asarray(FACE_POINT_512) - 0.5) * scale + 0.5


def _timed(fn, *args):
    """fn(*args), its wall seconds and its process CPU seconds."""
    start, cpu = time.perf_counter(), time.process_time()
    out = fn(*args)
    return out, (time.perf_counter() - start, time.process_time() - cpu)


def time_frame(image, point, settings, seed: int = 0) -> dict:
    """(wall, CPU) seconds of each component on one frame, and of `top_map` as a whole;
    and the number of proposals."""
    t = {}
    boxes, t["random"] = _timed(tm.random_proposals, image.shape, point, settings,
                                np.random.default_rng(seed))
    near, t["edgeboxes"] = _timed(tm.edgebox_proposals, image, point, settings)
    boxes = np.concatenate([boxes, near])
    scores, t["cues"] = _timed(tm.objectness, image, boxes, settings)
    kept, t["nms"] = _timed(tm.nms, boxes, scores, settings.nms_iou, settings.keep)
    _, t["map"] = _timed(tm.score_map, image.shape[:2], boxes[kept], scores[kept])
    _, t["top_map"] = _timed(tm.top_map, image, point, settings, seed)
    t["proposals"] = len(boxes)
    return t


def speed(size: int, settings, repeats: int) -> dict:
    image, point = photo(size)
    time_frame(image, point, settings)  # warm-up: imports, first allocations
    runs = [time_frame(image, point, settings) for _ in range(repeats)]
    keys = ("top_map",) + COMPONENTS
    return {"size": size, "point": point.tolist(), "proposals": runs[0]["proposals"],
            "seconds": {k: spread([r[k][0] for r in runs]) for k in keys},
            "cpu_seconds": {k: spread([r[k][1] for r in runs]) for k in keys}}


def recall(data: Path, settings, points: str, stride: int, max_frames: int) -> dict:
    from ebm_jax.data.sequences import read_got10k

    kept, truths, seconds, skipped = [], [], [], 0  # seconds: (wall, CPU) per frame
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
            "frame_size_seconds": spread([w for w, _ in seconds]),
            "frame_size_cpu_seconds": spread([c for _, c in seconds]), "ks": ks,
            "recall": [float(v) for v in values]}


def _fmt(x: dict, digits: int = 4) -> str:
    return f"{x['median']:.{digits}f} [{x['min']:.{digits}f}, {x['max']:.{digits}f}]"


def markdown(report: dict) -> str:
    env, runs = report["environment"], report["speed"]
    header = " | ".join(f"{r['size']}x{r['size']} s | {r['size']}x{r['size']} CPU s"
                        for r in runs)
    lines = [f"TOP maps: seconds per frame, median [min, max] over {report['repeats']} "
             f"rounds, wall and process CPU time (paper: {PAPER_SECONDS_512} s at "
             f"512x512); cues and EdgeBoxes on a copy with the longer side "
             f"{report['settings']['cue_size']} px; {runs[0]['proposals']} proposals at "
             f"{runs[0]['size']} px; load average {env['load_average_before'][0]} before, "
             f"{env['load_average_after'][0]} after.", "",
             f"| component | {header} |", "|---|" + "---:|" * 2 * len(runs)]
    for key in ("top_map",) + COMPONENTS:
        label = "**top_map (whole)**" if key == "top_map" else key
        lines.append(f"| {label} | " + " | ".join(
            f"{_fmt(r['seconds'][key])} | {_fmt(r['cpu_seconds'][key])}" for r in runs)
            + " |")
    if "recall" in report:
        rec = report["recall"]
        lines += ["", f"Recall at IoU 0.5 against the number of kept proposals (SoCL Fig. 4) "
                  f"on {rec['frames']} frames of {rec['data']} ({rec['points']}; "
                  f"{rec['skipped']} frames skipped: target absent or point outside); "
                  f"{_fmt(rec['frame_size_seconds'])} s per frame there "
                  f"({_fmt(rec['frame_size_cpu_seconds'])} CPU s).", "",
                  "| kept | " + " | ".join(str(k) for k in rec["ks"]) + " |",
                  "|---|" + "---:|" * len(rec["ks"]),
                  "| recall | " + " | ".join(f"{v:.3f}" for v in rec["recall"]) + " |"]
    lines += ["", f"Machine: {env['cpu_count']} CPU cores ({env['cpu']}), one thread; "
              f"{env['platform']}; NumPy {env['numpy']}, OpenCV {env['cv2']}; load average "
              f"{env['load_average_before']} before the run, {env['load_average_after']} "
              "after."]
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
    report["environment"]["load_average_after"] = [round(v, 2) for v in os.getloadavg()]
    return report


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("results/bench"))
    p.add_argument("--repeats", "--rounds", dest="repeats", type=int, default=5,
                   help="timed rounds per frame size (after one warm-up round)")
    p.add_argument("--train-size", type=int, default=200,
                   help="side of the square training-size frame (px)")
    p.add_argument("--data", type=Path, default=None,
                   help="a split directory of the generated tracking benchmark")
    p.add_argument("--points", choices=("points", "noisy_points"), default="points")
    p.add_argument("--stride", type=int, default=1, help="every n-th frame of --data")
    p.add_argument("--max-frames", type=int, default=200)
    args = p.parse_args(argv)
    bench_run = BenchRun(__file__, argv)
    for name, low in (("repeats", 1), ("train_size", 8), ("stride", 1), ("max_frames", 1)):
        if getattr(args, name) < low:
            flag = "--repeats (--rounds)" if name == "repeats" else f"--{name.replace('_', '-')}"
            p.error(f"{flag} must be >= {low}, got {getattr(args, name)}")
    if args.data is not None and not args.data.is_dir():
        p.error(f"--data {args.data} is not a directory")
    report = run(args)
    table = markdown(report)
    bench_run.write(args.out, "top_maps", report, table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
