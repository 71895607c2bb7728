"""Generated tracking data as ArrayRecord records (`ebm_jax.data.tracking_records`):
the same frames, annotations and training batches as the GOT-10k folders they were
written from; the generator's identity checked; old or foreign records refused."""

import dataclasses
import os
import shutil

import numpy as np
import pytest

from ebm_jax.data import records_write as rw
from ebm_jax.data.box_head_pairs import jittered_pair_batches
from ebm_jax.data.pipeline import stream_steps
from ebm_jax.data.records import RecordsError
from ebm_jax.data.sequences import read_got10k
from ebm_jax.data.tracking import TrackingSpec, generate_tracking_split, spec_identity
from ebm_jax.data.tracking_pairs import pair_batches
from ebm_jax.data.tracking_records import generated_records, read_tracking_records
from ebm_jax.ops.jitter import CropJitter

SPEC = TrackingSpec(split="train", num_sequences=3, num_frames=6, height=64, width=80,
                    seed=3)


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """The same generated split as folders and as records."""
    root = tmp_path_factory.mktemp("trk")
    folders = read_got10k(generate_tracking_split(root / "folders", SPEC, progress=False))
    path, records = generated_records(root / "records", SPEC, progress=False)
    return folders, records, path


def _same(a, b):
    if a is None or b is None:
        assert a is None and b is None
    else:
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))  # NaN == NaN here
        assert np.asarray(a).dtype == np.asarray(b).dtype


def test_records_hold_the_folders_frames_and_annotations_exactly(both):
    folders, records, _ = both
    assert [s.name for s in records] == [s.name for s in folders]
    for f, r in zip(folders, records):
        assert len(r) == len(f) and r.image_size == f.image_size
        for field in ("boxes", "absent", "cover", "visible_ratio", "points",
                      "noisy_points"):
            _same(getattr(f, field), getattr(r, field))
        np.testing.assert_array_equal(r.visible, f.visible)
        for i in range(len(f)):
            assert r.frame_bytes(i) == f.frame_bytes(i)
            np.testing.assert_array_equal(r.read_frame(i), f.read_frame(i))


def test_the_pair_samplers_cut_the_same_batches_from_records(both):
    folders, records, _ = both
    for make in (lambda s: pair_batches(s, batch_size=3, max_gap=4, seed=5,
                                        exemplar_size=31, search_size=63, min_size=2.0),
                 lambda s: jittered_pair_batches(s, batch_size=3, max_gap=4, seed=5,
                                                 jitter=CropJitter(), out_size=63,
                                                 min_size=2.0)):
        a, b = make(folders), make(records)
        streamed = stream_steps(make(records), 4)
        for step in range(4):
            x, y, z = a(step), b(step), streamed(step)
            assert x.keys() == y.keys() == z.keys()
            for k in x:
                np.testing.assert_array_equal(x[k], y[k])
                np.testing.assert_array_equal(x[k], z[k])
        assert streamed.num_sequences == a.num_sequences and streamed.batches_read == 4
        assert streamed.wait_seconds >= 0.0


def test_a_stream_resumed_mid_way_gives_the_same_batches(both):
    _, records, _ = both
    make = lambda: pair_batches(records, batch_size=2, max_gap=4, seed=1,  # noqa: E731
                                exemplar_size=31, search_size=63, min_size=2.0)
    plain, streamed = make(), stream_steps(make(), 6)
    for step in (3, 4, 1, 2):  # out of order: a new grain iterator at that step
        np.testing.assert_array_equal(streamed(step)["x_frames"], plain(step)["x_frames"])


def test_generated_records_are_written_once_and_leave_no_folders(both, tmp_path):
    _, _, path = both
    assert not path.with_name(path.name + ".folders").exists()
    stamp = {p: p.stat().st_mtime_ns for p in path.rglob("*") if p.is_file()}
    _, again = generated_records(path, SPEC, progress=False)
    assert {p: p.stat().st_mtime_ns for p in path.rglob("*") if p.is_file()} == stamp
    assert len(again) == SPEC.num_sequences


def test_records_of_another_spec_or_generator_version_are_refused(both, monkeypatch):
    _, _, path = both
    other = dataclasses.replace(SPEC, seed=4)
    with pytest.raises(RecordsError, match=r"another generated split.*seed: 3 \(needed 4\)"):
        generated_records(path, other, progress=False)
    from ebm_jax.data import tracking

    monkeypatch.setattr(tracking, "VERSION", tracking.VERSION + 1)
    with pytest.raises(RecordsError, match="version"):
        read_tracking_records(path, generator=spec_identity(SPEC))


def test_records_without_a_generator_or_of_the_old_format_are_refused(both, tmp_path):
    folders, _, _ = both
    plain = rw.write_tracking_records(folders[:1], tmp_path / "plain")
    assert len(read_tracking_records(plain)) == 1  # no identity asked: readable
    with pytest.raises(RecordsError, match="without a generator identity"):
        read_tracking_records(plain, generator=spec_identity(SPEC))
    rows = lambda: iter([{"frame": folders[0].read_frame(0)}])  # noqa: E731
    old = rw._write("tracking", tmp_path / "old", {"frame": ((None, None, 3), np.uint8)},
                    {"train": rows}, {"sequences": [folders[0].name], "lengths": [1]})
    with pytest.raises(RecordsError, match="format 1"):
        read_tracking_records(old)


def test_truncated_or_missing_records_are_one_clear_error(both, tmp_path):
    _, _, path = both
    copy = tmp_path / "copy"
    shutil.copytree(path, copy)
    (file,) = copy.rglob("*.array_record*")
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])
    with pytest.raises(RecordsError, match="truncated or corrupted"):
        read_tracking_records(copy)
    with pytest.raises(RecordsError, match="no such records directory"):
        read_tracking_records(tmp_path / "nothing")


def test_a_failed_write_leaves_no_records(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(rw, "write_tracking_records", broken)
    spec = dataclasses.replace(SPEC, num_sequences=1, num_frames=2)
    with pytest.raises(OSError):
        generated_records(tmp_path / "r", spec, progress=False)
    assert not any((tmp_path / "r").glob("*/*/dataset_info.json"))


def test_large_records_are_written_as_several_splits_without_tensorflow(both, tmp_path,
                                                                       monkeypatch):
    """tfds' writer keeps a split in memory up to a limit (1 GB) and past it spills
    through TensorFlow, which is not installed: a 1000-sequence split failed so. Splits
    of at most `shard_bytes` stay under the limit (here both made small)."""
    from tensorflow_datasets.core import shuffle

    folders, _, _ = both
    frame_bytes = [sum(len(s.frame_bytes(i)) for i in range(len(s))) for s in folders]
    monkeypatch.setattr(shuffle, "MAX_MEM_BUFFER_SIZE", max(frame_bytes) + 4096)
    with pytest.raises(ModuleNotFoundError, match="tensorflow"):  # one split: spills
        rw.write_tracking_records(folders, tmp_path / "one", shard_bytes=1 << 40)
    path = rw.write_tracking_records(folders, tmp_path / "many",
                                     shard_bytes=max(frame_bytes))
    back = read_tracking_records(path)
    assert [s.source is back[0].source for s in back] == [True, False, False]
    for f, r in zip(folders, back):
        _same(f.boxes, r.boxes)
        for i in (0, len(f) - 1):
            np.testing.assert_array_equal(r.read_frame(i), f.read_frame(i))


def test_shards_hold_whole_sequences_in_order():
    class Seq:
        def __init__(self, sizes):
            self.frames, self.sizes = [None] * len(sizes), sizes

        def __len__(self):
            return len(self.sizes)

        def frame_bytes(self, i):
            return b"x" * self.sizes[i]

    seqs = [Seq([4, 4]), Seq([3]), Seq([9]), Seq([1, 1])]
    assert rw.tracking_shards(seqs, 11) == [[0, 1], [2, 3]]  # 8 + 3, 9 + 2 bytes
    assert rw.tracking_shards(seqs, 1) == [[0], [1], [2], [3]]  # one sequence at least


def test_an_edited_annotation_is_one_line_naming_the_sequence_and_frame(both, tmp_path):
    """The metadata's annotations carry a checksum: a box moved by 30 px in
    metadata.json is refused on open, naming the sequence and the frame."""
    import json

    _, records, path = both
    copy = tmp_path / "copy"
    shutil.copytree(path, copy)
    (meta_file,) = copy.rglob("metadata.json")
    meta = json.loads(meta_file.read_text())
    seq = meta["sequences"][1]
    original = seq["boxes"][3][0]
    seq["boxes"][3][0] += 30.0
    meta_file.write_text(json.dumps(meta))
    with pytest.raises(RecordsError) as error:
        read_tracking_records(copy)
    text = str(error.value)
    assert f"sequence {seq['name']!r}, frame 4 do not match their checksum" in text
    assert "\n" not in text and str(copy) in text
    seq["boxes"][3][0] = original  # put back: read as before
    meta_file.write_text(json.dumps(meta))
    assert len(read_tracking_records(copy)) == len(records)


def test_a_flipped_bit_in_the_records_is_found_when_they_are_opened(both, tmp_path):
    _, _, path = both
    copy = tmp_path / "records"
    shutil.copytree(path, copy)
    (file,) = copy.rglob("*.array_record*")
    data = bytearray(file.read_bytes())
    data[len(data) // 5] ^= 0x10  # inside a chunk of frames (opening reads no chunk)
    file.write_bytes(bytes(data))
    with pytest.raises(RecordsError, match="truncated or corrupted") as error:
        generated_records(copy, SPEC, progress=False)
    assert "\n" not in str(error.value) and file.name in str(error.value)


def test_a_killed_attempts_leftovers_are_removed_by_the_next(tmp_path):
    """A run killed mid-write leaves its `.partial` folder and the GOT-10k folders it
    generated for the records; the next attempt removes both (a live process's partial
    folder, and folders a user put there, are left alone)."""
    import socket
    import subprocess
    import sys as sys_module

    from ebm_jax.data.tracking import TrackingSpec, generate_tracking_split
    from ebm_jax.data.tracking_records import generated_records

    spec = TrackingSpec(split="train", num_sequences=2, num_frames=4, height=48, width=64,
                        seed=3)
    done = subprocess.run([sys_module.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead = int(done.stdout)  # a process that has ended
    host = socket.gethostname().replace(".", "_")
    killed = tmp_path / f".split.{host}.{dead}.abc.partial"
    live = tmp_path / f".split.{host}.{os.getpid()}.def.partial"
    for d in (killed, live):
        (d / "train_00001").mkdir(parents=True)
    generate_tracking_split(tmp_path / "split", spec, progress=False)
    assert not killed.exists() and live.exists()
    assert not list(tmp_path.glob(f".split.{host}.{os.getpid()}.*.partial"))[1:]

    # the records' GOT-10k folders of a killed attempt: generated, marked, no records
    dest = tmp_path / "trk"
    folders = tmp_path / "trk.folders"
    (tmp_path / "trk.folders.generated").touch()
    generate_tracking_split(folders, spec, progress=False)
    generated_records(dest, spec, progress=False)
    assert not folders.exists() and not (tmp_path / "trk.folders.generated").exists()

    # folders that were there without the marker are kept
    mine = tmp_path / "mine.folders"
    generate_tracking_split(mine, spec, progress=False)
    generated_records(tmp_path / "mine", spec, progress=False)
    assert mine.is_dir()
