"""The content identity of a tracking set and of a COCO set's images: what a stage
records of the data it read (annotations, and the frames' or images' names and bytes),
never a path. An edited set (a frame replaced, a line of groundtruth.txt or points.txt
fixed, a COCO image replaced) gets another identity, so its stages are computed again;
the same data gives the same identity in a new process and at another path."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from ebm_jax.data.detection import load_detection_set
from ebm_jax.data.detection_sets import images_fingerprint
from ebm_jax.data.sequences import fingerprint, read_got10k
from ebm_jax.data.tracking import TrackingSpec, generate_tracking_split
from ebm_jax.io import file_digests
from ebm_jax.recipes.tracking.stages import annotation_identity


def _age(root, seconds=3600):
    """Every file's modification time moved into the past (data that has been there)."""
    past = (os.stat(root).st_mtime_ns - seconds * 10**9)
    for p in root.rglob("*"):
        if p.is_file():
            os.utime(p, ns=(past, past))


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """A tiny generated benchmark in the GOT-10k layout."""
    root = tmp_path_factory.mktemp("got") / "train"
    spec = TrackingSpec(split="train", num_sequences=2, num_frames=4, height=48, width=64,
                        seed=0)
    generate_tracking_split(root, spec, progress=False)
    _age(root)
    return root


def _fp(root, **kw):
    return fingerprint(read_got10k(root), **kw)


def _edit_line(path, line, edit):
    lines = path.read_text().splitlines()
    lines[line] = edit(lines[line])
    path.write_text("\n".join(lines) + "\n")


def test_the_identity_is_stable_and_path_independent(generated, tmp_path):
    first = _fp(generated)
    assert first == _fp(generated, digest_cache=tmp_path / "digests.json")
    assert first == _fp(generated, digest_cache=tmp_path / "digests.json")  # cached
    assert set(json.loads((tmp_path / "digests.json").read_text())["files"]) == {
        os.path.abspath(f) for s in read_got10k(generated) for f in s.frames}
    assert first == annotation_identity(read_got10k(generated))
    # a new process
    code = ("import json, sys; from ebm_jax.data.sequences import fingerprint, read_got10k;"
            "print(json.dumps(fingerprint(read_got10k(sys.argv[1]))))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code, str(generated)], env=env,
                         capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == first
    # a copy at another path (new modification times), with and without the cache
    copy = tmp_path / "elsewhere" / "moved"
    shutil.copytree(generated, copy, copy_function=shutil.copyfile)
    assert _fp(copy) == first
    assert _fp(copy, digest_cache=tmp_path / "digests.json") == first


@pytest.mark.parametrize("cached", [False, True])
@pytest.mark.parametrize("edit", ["frame-bytes", "frame-size", "groundtruth", "points",
                                  "noisy-points", "cover"])
def test_an_edited_set_gets_another_identity(generated, tmp_path, edit, cached):
    root = tmp_path / "train"
    shutil.copytree(generated, root)  # keeps the files' times
    cache = tmp_path / "digests.json" if cached else None
    before = _fp(root, digest_cache=cache)
    seq = root / sorted(p.name for p in root.iterdir() if p.is_dir())[0]
    frame = seq / "00000002.jpg"
    if edit == "frame-bytes":  # same name, same size, other content (header intact)
        data = bytearray(frame.read_bytes())
        data[len(data) // 2] ^= 0x55
        frame.write_bytes(bytes(data))
    elif edit == "frame-size":  # another frame's bytes under this name
        frame.write_bytes((seq / "00000003.jpg").read_bytes())
    elif edit == "groundtruth":
        _edit_line(seq / "groundtruth.txt", 1,
                   lambda s: ",".join([f"{float(s.split(',')[0]) + 1:.4f}",
                                       *s.split(",")[1:]]))
    elif edit in ("points", "noisy-points"):
        name = "points.txt" if edit == "points" else "noisy_points.txt"
        _edit_line(seq / name, 2, lambda s: ",".join(
            f"{float(v) + 0.5:.4f}" for v in s.split(",")))
    else:
        labels = (seq / "cover.label").read_text().split()
        assert labels[3] != "0"
        _edit_line(seq / "cover.label", 3, lambda s: str(max(1, int(s) - 1))
                   if s != "1" else "2")
    after = _fp(root, digest_cache=cache)
    assert after != before and after["sequences"] == before["sequences"]


def test_file_digests_cache_by_size_and_time(tmp_path):
    a = tmp_path / "a.bin"
    a.write_bytes(b"one")
    _age(tmp_path)
    cache = tmp_path / "cache" / "d.json"
    (d1,) = file_digests([a], cache=cache)
    t = os.stat(a).st_mtime_ns
    a.write_bytes(b"two")  # same size, other bytes: its time changes
    os.utime(a, ns=(t + 10**9, t + 10**9))
    (d2,) = file_digests([a], cache=cache)
    assert d1 != d2
    cache.write_text("{garbled")  # an unreadable cache counts as empty
    assert file_digests([a], cache=cache) == [d2]
    with pytest.raises(OSError):
        file_digests([tmp_path / "missing"], cache=cache)


def test_a_replaced_coco_image_changes_the_identity(coco_folder, tmp_path):
    from PIL import Image

    ann = coco_folder([{"id": 1, "image_id": 1, "category_id": 3, "bbox": [1, 1, 10, 8],
                        "area": 80, "iscrowd": 0}], sizes=((40, 20), (40, 20)))
    ds = load_detection_set(ann, tmp_path / "img", image_size=64)
    first = images_fingerprint(ds)
    copy = tmp_path / "copy"
    shutil.copytree(tmp_path / "img", copy)
    moved = load_detection_set(ann, copy, image_size=64)
    assert images_fingerprint(moved, digest_cache=tmp_path / "d.json") == first
    Image.fromarray(np.zeros((20, 40, 3), np.uint8)).save(copy / "2.png")  # replaced
    assert images_fingerprint(load_detection_set(ann, copy, image_size=64)) != first
