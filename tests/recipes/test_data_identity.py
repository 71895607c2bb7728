"""Stage identities of real data cover the content the stages read: with a GOT-10k root
(the tracking and SoCL recipes) a replaced frame or a fixed groundtruth.txt / points.txt
line gives the evaluation and training stages another identity; with a COCO root, a
replaced image does. The same data at another path keeps its identity (a run resumes
wherever the data lives)."""

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from ebm_jax.config import load_config
from ebm_jax.data.tracking import TrackingSpec, generate_tracking_split
from ebm_jax.io import content_hash
from ebm_jax.recipes.tracking import stages as tracking_stages
from ebm_jax.train.stages import RunContext

CONFIG = Path(__file__).parents[2] / "experiments" / "tracking" / "siamfc_box.py"


@pytest.fixture(scope="module")
def got10k(tmp_path_factory):
    root = tmp_path_factory.mktemp("got10k") / "GOT-10k"
    for split, seed in (("train", 1), ("val", 2)):
        generate_tracking_split(root / split, TrackingSpec(
            split=split, num_sequences=2, num_frames=4, height=48, width=64, seed=seed),
            progress=False)
    return root


def _identity(root, workdir):
    cfg = load_config(f"{CONFIG}:tiny", [f"got10k_root={root}", "train_data=got10k",
                                         "num_frames=2", "num_train_sequences=1",
                                         "num_test_sequences=1"])
    ctx = RunContext(workdir, lock=False, progress=False, log=lambda s: None)
    data = tracking_stages.open_data(cfg, ctx)
    return {k: content_hash(v, 8) for k, v in data.identity.items()}


def _first_sequence(root, split):
    return root / split / (root / split / "list.txt").read_text().split()[0]


@pytest.mark.parametrize("edit", ["frame", "groundtruth", "points"])
def test_a_got10k_edit_changes_the_stage_identity(got10k, tmp_path, edit):
    root = tmp_path / "GOT-10k"
    shutil.copytree(got10k, root)
    before = _identity(root, tmp_path / "w")
    assert before == _identity(got10k, tmp_path / "w2")  # another path, the same identity
    split = "val" if edit != "points" else "train"
    seq = _first_sequence(root, split)
    if edit == "frame":  # same name, other content
        (seq / "00000002.jpg").write_bytes((seq / "00000003.jpg").read_bytes())
    elif edit == "groundtruth":
        lines = (seq / "groundtruth.txt").read_text().splitlines()
        x, *rest = lines[1].split(",")
        lines[1] = ",".join([f"{float(x) + 1:.4f}", *rest])
        (seq / "groundtruth.txt").write_text("\n".join(lines) + "\n")
    else:
        lines = (seq / "points.txt").read_text().splitlines()
        lines[2] = ",".join(f"{float(v) + 0.5:.4f}" for v in lines[2].split(","))
        (seq / "points.txt").write_text("\n".join(lines) + "\n")
    after = _identity(root, tmp_path / "w")
    key = "got10k-val" if split == "val" else "train"
    assert after[key] != before[key]
    # the generated splits keep theirs
    assert after["generated-test"] == before["generated-test"]


def test_a_replaced_coco_image_changes_the_data_identity(tmp_path):
    from PIL import Image

    from ebm_jax.data.detection import generate_dataset, simulate_detections
    from ebm_jax.data.detection_sets import open_coco

    root = tmp_path / "coco"
    (root / "annotations").mkdir(parents=True)
    for split, n, seed in (("train2017", 3, 1), ("val2017", 2, 2)):
        paths = generate_dataset(tmp_path / split, num_images=n, image_size=48,
                                 num_classes=2, max_objects=2, min_size=8, seed=seed)
        paths.image_dir.rename(root / split)
        paths.annotations.rename(root / "annotations" / f"instances_{split}.json")
    dets = simulate_detections(root / "annotations" / "instances_val2017.json", seed=0)
    (tmp_path / "dets.json").write_text(json.dumps(dets))
    before = open_coco(root, tmp_path / "dets.json", image_size=48).identity
    moved = tmp_path / "moved"
    shutil.copytree(root, moved)
    assert open_coco(moved, tmp_path / "dets.json", image_size=48).identity == before
    image = sorted(os.listdir(root / "train2017"))[0]
    noise = np.random.default_rng(0).integers(0, 256, (48, 48, 3), np.uint8)
    Image.fromarray(noise).save(root / "train2017" / image)  # same name and size
    after = open_coco(root, tmp_path / "dets.json", image_size=48).identity
    assert after["train"] != before["train"]
    assert after["val"] == before["val"]


def test_training_on_got10k_generates_no_training_split(got10k, tmp_path):
    """With train_data=got10k no arm trains on the generated training split: only the
    generated test split is made."""
    _identity(got10k, tmp_path / "w")
    made = sorted(p.name.split("-")[0] for p in (tmp_path / "w" / "data").iterdir()
                  if p.name.endswith(".records"))
    assert made == ["test"]
