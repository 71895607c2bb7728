"""The ArrayRecord data path: each kind of dataset round-trips through tensorflow-datasets
(no TensorFlow), and the grain pipeline reads it deterministically, per host and from a
checkpointed iterator position."""

import dataclasses
import json

import numpy as np
import pytest

pytest.importorskip("tensorflow_datasets")
grain = pytest.importorskip("grain")

from ebm_jax.data import images as image_data  # noqa: E402
from ebm_jax.data import records as rec  # noqa: E402
from ebm_jax.data import records_write as rw  # noqa: E402
from ebm_jax.data.pipeline import (  # noqa: E402
    ArraySource,
    HostShard,
    StepReader,
    batch_indices,
    default_read_options,
    image_batches,
    step_batches,
)


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    """The digits at 8 px (train 1347, test 450) and their records."""
    data = image_data.load_image_data("digits", 8, seed=3).subset(200, 60)
    path = rw.write_image_records(data, tmp_path_factory.mktemp("rec") / "digits")
    return data, path


def test_toy1d_round_trip(tmp_path):
    import jax

    from ebm_jax.data import toy1d

    x, y = toy1d.sample(jax.random.key(0), 2, 300)
    path = rw.write_toy1d_records(x, y, tmp_path / "t", metadata={"dataset": 2})
    r = rec.open_records(tmp_path / "t", "toy1d")  # the parent of the dataset dir works
    assert r.path == path and r.splits == {"train": 300}
    assert r.metadata["dataset"] == 2 and r.metadata["num"] == 300
    assert sorted(p.name for p in (tmp_path / "t").iterdir()) == ["ebm_jax_toy1d_records"]
    back = r.read_all()
    assert back["x"].shape == (300, 1)
    np.testing.assert_array_equal(back["x"], np.asarray(x, np.float32))
    np.testing.assert_array_equal(back["y"], np.asarray(y, np.float32))


def test_images_round_trip_as_uint8(digits):
    data, path = digits
    r = rec.open_records(path, "images")
    assert r.splits == {"train": 200, "test": 60}
    for split in ("train", "test"):
        back = r.read_all(split)
        assert back["image"].dtype == np.uint8 and back["image"].shape[1:] == (8, 8, 1)
        np.testing.assert_array_equal(
            back["image"], np.round(getattr(data, f"{split}_images") * 255).astype(np.uint8))
        np.testing.assert_array_equal(back["label"], getattr(data, f"{split}_labels"))
    loaded = image_data.load_image_data("records", 8, data_root=path)
    assert loaded.num_classes == 10 and loaded.records == str(path)
    np.testing.assert_allclose(loaded.train_images, data.train_images, atol=0.5 / 255)
    np.testing.assert_array_equal(loaded.train_index, np.arange(200))
    # written again from what was read: the same bytes (uint8 / 255 is exact)
    again = rw.write_image_records(loaded, path.parents[2] / "again")
    np.testing.assert_array_equal(rec.open_records(again).read_all()["image"],
                                  r.read_all()["image"])
    assert image_data.dataset_sizes("records", path) == (200, 60, 1)


def test_detection_round_trip(shapes_dataset, tmp_path):
    from PIL import Image

    path = rw.write_detection_records(shapes_dataset.annotations, shapes_dataset.image_dir,
                                       tmp_path / "det",
                                       noisy_annotations=shapes_dataset.noisy_annotations)
    r = rec.open_records(path, "detection")
    coco = json.loads(shapes_dataset.annotations.read_text())
    noisy = json.loads(shapes_dataset.noisy_annotations.read_text())
    assert r.splits == {"train": len(coco["images"])}
    assert r.metadata["categories"] == coco["categories"]
    source = r.source()
    for i, im in enumerate(coco["images"]):
        ex = source[i]
        with Image.open(shapes_dataset.image_dir / im["file_name"]) as f:
            np.testing.assert_array_equal(ex["image"], np.asarray(f.convert("RGB")))
        anns = [a for a in coco["annotations"] if a["image_id"] == im["id"]]
        assert ex["image_id"] == im["id"]
        np.testing.assert_allclose(ex["boxes"], np.asarray([a["bbox"] for a in anns],
                                                            np.float32).reshape(-1, 4))
        nb = {a["id"]: a["bbox"] for a in noisy["annotations"]}
        np.testing.assert_allclose(ex["noisy_boxes"], np.asarray(
            [nb[a["id"]] for a in anns], np.float32).reshape(-1, 4))
        np.testing.assert_array_equal(ex["category"], [a["category_id"] for a in anns])


def test_tracking_round_trip(tmp_path):
    from ebm_jax.data.sequences import read_got10k
    from ebm_jax.data.tracking import TrackingSpec, generate_tracking_split

    spec = TrackingSpec(split="train", num_sequences=2, num_frames=4, height=48, width=64,
                        seed=1)
    seqs = read_got10k(generate_tracking_split(tmp_path / "d", spec, progress=False))
    path = rw.write_tracking_records(seqs, tmp_path / "trk")
    r = rec.open_records(path, "tracking")
    assert [m["name"] for m in r.metadata["sequences"]] == [s.name for s in seqs]
    assert [m["length"] for m in r.metadata["sequences"]] == [4, 4]
    assert r.splits == {"train": 8}
    back = r.read_all(fields=[k for k in r.source()[0] if k != "frame_file"])
    back["frame_file"] = [r.source()[i]["frame_file"] for i in range(8)]
    np.testing.assert_array_equal(back["sequence"], [0, 0, 0, 0, 1, 1, 1, 1])
    np.testing.assert_array_equal(back["frame_index"], [0, 1, 2, 3] * 2)
    for s, seq in enumerate(seqs):
        rows = slice(4 * s, 4 * s + 4)
        assert [bytes(f) for f in back["frame_file"][rows]] == [
            open(f, "rb").read() for f in seq.frames]  # the JPEG files as stored
        np.testing.assert_allclose(back["box"][rows], seq.boxes.astype(np.float32))
        np.testing.assert_allclose(back["point"][rows], seq.points.astype(np.float32))
        np.testing.assert_allclose(back["noisy_point"][rows],
                                   seq.noisy_points.astype(np.float32))
        np.testing.assert_array_equal(back["absent"][rows], seq.absent)


def test_bad_records_paths_are_named(tmp_path, digits):
    with pytest.raises(rec.RecordsError, match="no such records directory"):
        rec.open_records(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(rec.RecordsError, match="no dataset"):
        rec.open_records(tmp_path / "empty")
    with pytest.raises(rec.RecordsError, match="holds images records, not toy1d"):
        rec.open_records(digits[1], "toy1d")
    with pytest.raises(rec.RecordsError, match="no split 'val'"):
        rec.open_records(digits[1]).source("val")
    with pytest.raises(rec.RecordsError, match="already holds a dataset"):
        rw.write_image_records(digits[0], digits[1].parents[1])
    with pytest.raises(rec.RecordsError, match="set image_size to 8"):
        image_data.load_image_data("records", 16, data_root=digits[1])


def test_batches_are_the_in_memory_batches(digits):
    """Step s of the grain pipeline over the records holds the images the in-memory
    path indexes at step s: the epoch's permutation, sliced."""
    data, path = digits
    loaded = image_data.load_image_data("records", 8, data_root=path)
    ds = image_batches(loaded, batch_size=32, seed=11, num_steps=20, with_labels=True,
                       shard=HostShard())
    assert len(ds) == 20
    for s in (0, 5, 6, 19):  # 6 steps per epoch: 6 and 19 are in later epochs
        idx = batch_indices(11, s, 200, 32)
        np.testing.assert_array_equal(ds[s]["index"], idx)
        np.testing.assert_array_equal(ds[s]["image"], loaded.train_images[idx])
        np.testing.assert_array_equal(ds[s]["label"], loaded.train_labels[idx])
    in_memory = image_batches(dataclasses.replace(loaded, records=None), batch_size=32,
                              seed=11, num_steps=20, shard=HostShard())
    np.testing.assert_array_equal(in_memory[7]["image"], ds[7]["image"])
    # an epoch visits each item once
    epoch = np.concatenate([batch_indices(11, s, 200, 32) for s in range(6)])
    assert len(set(epoch.tolist())) == 6 * 32


def test_validation_split_reads_its_records(digits):
    data, path = digits
    val = image_data.validation_split(
        image_data.load_image_data("records", 8, data_root=path), 0.2, seed=0)
    assert len(val.train_index) == len(val.train_images) < 200
    ds = image_batches(val, batch_size=16, seed=0, num_steps=3, shard=HostShard())
    idx = batch_indices(0, 2, len(val.train_index), 16)
    np.testing.assert_array_equal(ds[2]["image"], val.train_images[idx])


def test_two_hosts_read_disjoint_halves_covering_each_item_once():
    source = ArraySource(x=np.arange(48) * 10)
    steps, b = 6, 16  # 3 steps per epoch: two epochs
    per_host = []
    for p in range(2):
        ds = step_batches(source, batch_size=b, seed=5, num_steps=steps, fields=("x",),
                          shard=HostShard(p, 2))
        per_host.append([ds[s] for s in range(steps)])
    for s in range(steps):
        rows = [per_host[p][s]["index"] for p in range(2)]
        assert all(len(r) == b // 2 for r in rows)
        np.testing.assert_array_equal(np.concatenate(rows), batch_indices(5, s, 48, b))
        np.testing.assert_array_equal(per_host[0][s]["x"], rows[0] * 10)
    for epoch in range(2):
        seen = np.concatenate([per_host[p][s]["index"] for p in range(2)
                               for s in range(3 * epoch, 3 * epoch + 3)])
        np.testing.assert_array_equal(np.bincount(seen, minlength=48), np.ones(48))
    with pytest.raises(ValueError, match="divisible by the number of processes"):
        step_batches(source, batch_size=15, seed=0, num_steps=1, shard=HostShard(0, 2))
    with pytest.raises(ValueError, match="0 <= index < count"):
        HostShard(2, 2)


def test_iterator_resumes_from_its_checkpointed_state(digits):
    data, path = digits
    loaded = image_batches(image_data.load_image_data("records", 8, data_root=path),
                           batch_size=32, seed=1, num_steps=12, shard=HostShard())
    options = grain.ReadOptions(num_threads=2, prefetch_buffer_size=3)
    it = iter(loaded.to_iter_dataset(options))
    for _ in range(5):
        next(it)
    state = it.get_state()
    expected = [next(it)["index"] for _ in range(7)]
    resumed = iter(loaded.to_iter_dataset(options))
    resumed.set_state(json.loads(json.dumps(state)))  # the state survives JSON
    got = [next(resumed)["index"] for _ in range(7)]
    for a, b in zip(expected, got):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(StopIteration):
        next(resumed)
    # StepReader, as `fit` calls it: in order, then a jump back (a resumed run)
    reader = StepReader(loaded, convert=lambda e: e["index"])
    for s in (0, 1, 2, 7, 8, 3):
        np.testing.assert_array_equal(reader(s), batch_indices(1, s, 200, 32))


def _damage(path, how):
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 3])
    else:  # one bit flipped inside the first chunk's data
        path.write_bytes(data[:1000] + bytes([data[1000] ^ 0x10]) + data[1001:])


@pytest.mark.parametrize("how", ["truncated", "bit-flipped"])
def test_a_damaged_record_file_is_one_line_naming_it(tmp_path, digits, how):
    """Read through grain a damaged file was a 48-line traceback, and `records info`
    reported full counts; now opening (truncated) or verifying (any damage) names the
    file, and loading the images for a run (before training) verifies them."""
    import shutil

    from ebm_jax import cli

    copy = tmp_path / "d"
    shutil.copytree(digits[1], copy)
    (train,) = copy.glob("*-train.array_record-*")
    _damage(train, how)
    msg = (rf"{train}: the ArrayRecord file is truncated or corrupted \(.*\); write the "
           r"records again")
    with pytest.raises(rec.RecordsError, match=msg):
        rec.open_records(copy).verify()
    with pytest.raises(rec.RecordsError, match=msg):  # what a run loads in its check
        image_data.load_image_data("records", 8, data_root=copy)
    assert cli.main(["records", "info", str(copy)]) == 2


def test_records_info_says_it_verified(tmp_path, digits, capsys):
    from ebm_jax import cli

    assert cli.main(["records", "info", str(digits[1])]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["splits"] == {"train": 200, "test": 60}
    assert info["verified"].startswith("every record of every split read back")


def test_a_run_on_damaged_records_stops_before_training_in_one_line(tmp_path, digits,
                                                                     capsys):
    import shutil
    from pathlib import Path

    from ebm_jax import cli

    copy = tmp_path / "d"
    shutil.copytree(digits[1], copy)
    (train,) = copy.glob("*-train.array_record-*")
    _damage(train, "bit-flipped")
    config = Path(__file__).parents[2] / "experiments/contrastive/moco_linear_eval.py"
    assert cli.main(["run", f"{config}:tiny", "--config.data=records",
                     f"--config.data_root={copy}", "--config.loader=grain",
                     "--config.image_size=8", "--workdir", str(tmp_path / "w"),
                     "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{train}: the ArrayRecord file is truncated or corrupted" in err
    assert not list((tmp_path / "w").rglob("checkpoints")) and not (tmp_path / "o").exists()


def test_grain_reading_a_damaged_record_names_the_file(tmp_path, digits):
    """Past the checks (a file damaged during a run), a grain read of a bad record is
    one RecordsError naming the file, not a 48-line traceback."""
    import shutil

    copy = tmp_path / "d"
    shutil.copytree(digits[1], copy)
    (train,) = copy.glob("*-train.array_record-*")
    _damage(train, "bit-flipped")
    r = rec.open_records(copy)  # a bit flip inside a chunk opens: only reads see it
    reader = StepReader(step_batches(r.source("train"), batch_size=200, seed=0,
                                     num_steps=1))
    with pytest.raises(rec.RecordsError, match=rf"{train}: the ArrayRecord file is "
                       r"truncated or corrupted \(chunk data hash mismatch\)"):
        reader(0)


@pytest.mark.parametrize("name,text", [("metadata.json", '{"kind": "images", garbled'),
                                       ("features.json", "{garbled"),
                                       ("dataset_info.json", '{"name": garbled'),
                                       ("dataset_info.json", '{"no_such_field": 1}')])
def test_garbled_records_files_are_one_line_naming_them(tmp_path, digits, capsys, name,
                                                        text):
    """`records info` on a garbled metadata.json named no file; on a garbled
    dataset_info.json it was 46 lines of protobuf traceback."""
    import shutil

    from ebm_jax import cli

    copy = tmp_path / "d"
    shutil.copytree(digits[1], copy)
    (copy / name).write_text(text)
    with pytest.raises(rec.RecordsError, match=str(copy)):
        rec.open_records(copy)
    capsys.readouterr()
    assert cli.main(["records", "info", str(copy)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ebm-jax records: error: ")
    assert str(copy / name) in err and "write the records again" in err


def _tiny_got10k(tmp_path):
    from ebm_jax.data.tracking import TrackingSpec, generate_tracking_split

    return generate_tracking_split(tmp_path / "got", TrackingSpec(
        split="train", num_sequences=1, num_frames=2, height=48, width=64, seed=1),
        progress=False)


def test_records_to_a_read_only_dir_is_one_line(tmp_path, monkeypatch, capsys):
    """`records tracking` to a directory that cannot be written was an OSError
    traceback (a read-only file system: simulated, as root writes anywhere)."""
    import errno
    import os

    from ebm_jax import cli

    root = _tiny_got10k(tmp_path)
    read_only = tmp_path / "ro"
    read_only.mkdir()
    mkdir = os.mkdir

    def refuse(path, *a, **k):
        if str(path).startswith(str(read_only)):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return mkdir(path, *a, **k)

    monkeypatch.setattr(os, "mkdir", refuse)
    capsys.readouterr()
    out = read_only / "trk"
    assert cli.main(["records", "tracking", "--root", str(root), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err[-2000:]
    assert str(out) in err and os.strerror(errno.EROFS) in err


def test_records_writes_leave_nothing_in_the_temporary_folder(tmp_path, monkeypatch,
                                                              capsys):
    """Every write left an empty `tmp*tfds` folder in the system's temporary folder."""
    import tempfile

    from ebm_jax import cli

    root = _tiny_got10k(tmp_path)
    system_tmp = tmp_path / "system-tmp"
    system_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(system_tmp))
    assert cli.main(["records", "toy1d", "--dataset", "1", "--num", "8", "--out",
                     str(tmp_path / "t")]) == 0
    assert cli.main(["records", "tracking", "--root", str(root), "--out",
                     str(tmp_path / "trk")]) == 0
    assert cli.main(["records", "info", str(tmp_path / "trk")]) == 0
    assert list(system_tmp.iterdir()) == []


@pytest.mark.parametrize("cpus,threads", [(1, 2), (2, 2), (16, 16), (96, 16)])
def test_read_ahead_threads_follow_the_usable_cpus(monkeypatch, cpus, threads):
    """StepReader reads ahead on one thread per usable CPU, in [2, MAX_READ_THREADS],
    with two batches buffered per thread: a fixed 2 threads left a 16-core GPU machine
    waiting for pairs most of each tracking stage."""
    from ebm_jax.data import pipeline

    monkeypatch.setattr(pipeline, "usable_cpus", lambda: cpus)
    options = default_read_options()
    assert options.num_threads == threads
    assert options.prefetch_buffer_size == 2 * threads
    reader = StepReader(step_batches(ArraySource(index=np.arange(50)), batch_size=5,
                                     seed=2, num_steps=9))
    assert reader.read_options.num_threads == threads
    for s in (0, 1, 2, 3, 8):  # the same batches on any number of threads
        np.testing.assert_array_equal(reader(s)["index"], batch_indices(2, s, 50, 5))
