"""The tracking and SoCL recipes' per-sequence caches: a corrupt cache file (cut short,
garbled, of the wrong shape) counts as missing, is computed again with one warning line
and replaced whole; it is never returned as a result."""

import json
from pathlib import Path

import numpy as np
import pytest

from ebm_jax.recipes.tracking import socl_stages
from ebm_jax.recipes.tracking import stages as tracking_stages
from ebm_jax.train.stages import RunContext
from tests.recipes.small_sequences import small_sequences


CORRUPT = ["", "{\"name\": \"a\", \"fra", "\x00\x01garbage", "[1, 2]",
           json.dumps({"name": "a", "frames": 3, "boxes": [[1, 2, 3, 4]],
                       "seconds": [0.1, 0.1, 0.1]}),
           json.dumps({"name": "a", "frames": 3, "boxes": [[1, 2, 3, 4]] * 3,
                       "seconds": "fast"})]


@pytest.mark.parametrize("content", CORRUPT)
def test_a_corrupt_sequence_result_is_tracked_again(tmp_path, content):
    seqs = small_sequences(tmp_path / "data")
    lines, calls = [], []

    def run(seq):
        calls.append(seq.name)
        return np.repeat(seq.boxes[:1], len(seq), axis=0), np.full(len(seq), 0.01)

    ctx = RunContext(tmp_path / "w", lock=False, progress=False, log=lines.append)
    first = tracking_stages.evaluate(ctx, "static", {"set": 1}, "test", seqs, run,
                                     progress_desc="")
    (stage,) = (tmp_path / "w").glob("eval-static-*")
    path = stage / "test" / "a.json"
    good = path.read_bytes()
    path.write_text(content)
    again = tracking_stages.evaluate(ctx, "static", {"set": 1}, "test", seqs, run,
                                     progress_desc="")
    assert again == first
    assert calls == ["a", "b", "a"]  # only the corrupt one again
    assert len(lines) == 1 and "a.json" in lines[0] and "\n" not in lines[0], lines
    assert lines[0].startswith("warning:")
    assert path.read_bytes() == good


@pytest.mark.parametrize("content", [b"", b"PK\x03\x04 cut short", b"not a zip"])
def test_a_corrupt_top_cache_is_computed_again(tmp_path, monkeypatch, content):
    from ebm_jax.tracking import top_maps

    keep = socl_stages.TOP_SETTINGS.keep
    calls = []

    def fake_top_boxes(frame, point, settings, seed):
        calls.append(seed)
        return np.tile([[1.0, 1.0, 5.0, 5.0]], (2, 1)), np.array([0.9, 0.5])

    monkeypatch.setattr(top_maps, "top_boxes", fake_top_boxes)
    seqs = small_sequences(tmp_path / "data")
    lines = []
    ctx = RunContext(tmp_path / "w", lock=False, progress=False, log=lines.append)
    first = socl_stages.top_cache(ctx, seqs, {"d": 1}, "clean", 1)
    assert len(calls) == 6
    (stage,) = (tmp_path / "w").glob("top-clean-*")
    path = stage / "a.npz"
    good = path.read_bytes()
    path.write_bytes(content)
    again = socl_stages.top_cache(ctx, seqs, {"d": 1}, "clean", 1)
    assert len(calls) == 9  # sequence a's three frames again, b's from the cache
    for i in first:
        for k in first[i]:
            np.testing.assert_array_equal(again[i][k].shape, first[i][k].shape)
    assert again[0]["boxes"].shape == (3, keep, 4)
    assert len(lines) == 1 and "a.npz" in lines[0] and lines[0].startswith("warning:")
    assert path.stat().st_size > 0 and path.read_bytes()[:2] == good[:2] == b"PK"


@pytest.mark.parametrize("name", ["ABS", "../a", "x/a"])
def test_a_cache_item_never_lies_outside_its_stage(tmp_path, name):
    import dataclasses

    seqs = small_sequences(tmp_path / "data")
    outside = tmp_path / "data" / "a"
    name = str(outside) if name == "ABS" else name
    named = [dataclasses.replace(seqs[0], name=name)]

    def run(seq):
        return np.repeat(seq.boxes[:1], len(seq), axis=0), np.full(len(seq), 0.01)

    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    ctx = RunContext(tmp_path / "w", lock=False, progress=False, log=lambda s: None)
    with pytest.raises(ValueError) as caught:
        tracking_stages.evaluate(ctx, "static", {"set": 1}, "test", named, run,
                                 progress_desc="")
    message = str(caught.value)
    assert "\n" not in message and repr(name + ".json") in message
    assert "one file name" in message
    after = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")
                   if not p.is_relative_to(tmp_path / "w"))
    assert after == [p for p in before if not (tmp_path / p).is_relative_to(tmp_path / "w")]


def _fine_boxes(seq):
    """Boxes with more digits than 4 decimals hold (a tracker's output)."""
    rng = np.random.default_rng(len(seq.name))
    return seq.boxes + rng.uniform(-1, 1, seq.boxes.shape) / 3


def test_a_tracking_result_is_cached_in_full_precision(tmp_path):
    seqs = small_sequences(tmp_path / "data")
    calls = []

    def run(seq):
        calls.append(seq.name)
        return _fine_boxes(seq), np.full(len(seq), 1 / 3)

    ctx = RunContext(tmp_path / "w", lock=False, progress=False, log=lambda s: None)
    first = tracking_stages.evaluate(ctx, "t", {"set": 1}, "test", seqs, run,
                                     progress_desc="")
    again = tracking_stages.evaluate(ctx, "t", {"set": 1}, "test", seqs, run,
                                     progress_desc="")
    assert calls == ["a", "b"]
    for rec, cached, seq in zip(first, again, seqs):
        np.testing.assert_array_equal(np.asarray(rec["boxes"]), _fine_boxes(seq))
        np.testing.assert_array_equal(np.asarray(cached["boxes"]), _fine_boxes(seq))
        assert cached["seconds"] == rec["seconds"] == [1 / 3] * len(seq)
    # a result cached in 4 decimals (before full precision) is tracked again
    (stage,) = (tmp_path / "w").glob("eval-t-*")
    path = stage / "test" / "a.json"
    old = json.loads(path.read_text())
    old.pop("precision", None)
    old["boxes"] = np.round(np.asarray(old["boxes"]), 4).tolist()
    path.write_text(json.dumps(old))
    third = tracking_stages.evaluate(ctx, "t", {"set": 1}, "test", seqs, run,
                                     progress_desc="")
    assert calls == ["a", "b", "a"]
    np.testing.assert_array_equal(np.asarray(third[0]["boxes"]), _fine_boxes(seqs[0]))


def test_pseudo_boxes_resumed_from_the_cache_equal_fresh_ones(tmp_path, monkeypatch):
    """SoCL Table 5: the pseudo boxes a resumed run reads back are those an
    uninterrupted run computed, bit for bit (not rounded to 4 decimals)."""
    import types

    from ebm_jax.config import load_config
    from ebm_jax.recipes.tracking import sparse_boxes
    from ebm_jax.recipes.tracking.stages import Trained
    from ebm_jax.tracking import dcf
    from ebm_jax.tracking.pseudo_boxes import PseudoBoxes

    calls = []
    tracker = types.SimpleNamespace(init=lambda params, frame, box: None,
                                    update=lambda params, state, frame: (state, None))
    monkeypatch.setattr(dcf, "make_dcf_tracker", lambda model, settings: (tracker, None))

    def fake_pseudo_boxes(tracker, params, read_frame, boxes, points, keys, **kw):
        calls.append(len(boxes))
        n = len(boxes)
        rng = np.random.default_rng(n)
        return PseudoBoxes(boxes=boxes + rng.uniform(-1, 1, (n, 4)) / 3,
                           failed=np.zeros(n, bool), keyed=np.isin(np.arange(n), keys),
                           seconds=rng.uniform(0, 1, n) / 7)

    monkeypatch.setattr(sparse_boxes, "pseudo_boxes", fake_pseudo_boxes)
    cfg = load_config(f"{Path(__file__).parents[2]}/experiments/tracking/"
                      "socl_table5_sparse_boxes.py:tiny", [])
    seqs = small_sequences(tmp_path / "data", n=4)
    ctx = RunContext(tmp_path / "w", lock=False, progress=False, log=lambda s: None)
    env = types.SimpleNamespace(cfg=cfg, ctx=ctx, data=types.SimpleNamespace(
        train=seqs, identity={"train": {"d": 1}}))
    socl = Trained(None, {"trained": {"socl": 1}})
    fresh = sparse_boxes.pseudo_box_cache(env, 0, socl, 2)
    resumed = sparse_boxes.pseudo_box_cache(env, 0, socl, 2)
    assert len(calls) == 2 and sorted(fresh) == sorted(resumed) == [0, 1]
    for i in fresh:
        for k in ("boxes", "failed", "keyed", "seconds"):
            np.testing.assert_array_equal(resumed[i][k], fresh[i][k])
            assert np.asarray(resumed[i][k]).dtype == np.asarray(fresh[i][k]).dtype


def test_the_top_cache_is_the_same_from_worker_processes(tmp_path, monkeypatch):
    """Four sequences in two spawned workers (the frames' floor for them lowered) give
    the proposals and scores one process gives; a third run reads it all back."""
    monkeypatch.setattr(socl_stages, "SERIAL_BELOW", 1)
    seqs = small_sequences(tmp_path / "data", n=2, names=("a", "b", "c", "d"))

    def ctx(name):
        return RunContext(tmp_path / name, lock=False, progress=False, log=lambda _: None)

    one = socl_stages.top_cache(ctx("w1"), seqs, {"d": 1}, "clean", 1, workers=1)
    two = socl_stages.top_cache(ctx("w2"), seqs, {"d": 1}, "clean", 1, workers=2)
    assert list(one) == list(two) == [0, 1, 2, 3]
    for i in one:
        for key in ("frames", "boxes", "scores"):
            np.testing.assert_array_equal(two[i][key], one[i][key])
        assert np.all(np.isfinite(one[i]["boxes"][:, 0])) and np.all(two[i]["seconds"] > 0)
    back = socl_stages.top_cache(ctx("w2"), seqs, {"d": 1}, "clean", 1, workers=2)
    for i in one:
        np.testing.assert_array_equal(back[i]["seconds"], two[i]["seconds"])


@pytest.mark.parametrize("workers", [0, -1, 1.5, True])
def test_the_top_cache_names_a_bad_worker_count(tmp_path, workers):
    seqs = small_sequences(tmp_path / "data")
    ctx = RunContext(tmp_path / "w", lock=False, progress=False, log=lambda _: None)
    with pytest.raises(ValueError, match=r"workers must be an integer >= 1"):
        socl_stages.top_cache(ctx, seqs, {"d": 1}, "clean", 1, workers=workers)
