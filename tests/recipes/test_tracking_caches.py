"""The tracking and SoCL recipes' per-sequence caches: a corrupt cache file (cut short,
garbled, of the wrong shape) counts as missing, is computed again with one warning line
and replaced whole; it is never returned as a result."""

import json

import numpy as np
import pytest

from ebm_jax.recipes import socl_stages, tracking_stages
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
