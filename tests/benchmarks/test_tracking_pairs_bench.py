"""The tracking pairs benchmark (`benchmarks/tracking_pairs.py`) at a tiny size: it
writes its JSON and Markdown, with the three readers' rates and a run's training rate."""

import importlib.util
import json
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "bench_tracking_pairs", Path(__file__).parents[2] / "benchmarks" / "tracking_pairs.py")
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)


@pytest.mark.slow  # generates 2 x 80 frames twice: ~30 s
def test_tracking_pairs_benchmark_smoke(tmp_path):
    results = tmp_path / "results.json"
    results.write_text(json.dumps({
        "ebm_jax": {"config": {"batch_size": 8, "box_head": {"batch_size": 4}}},
        "training": {"box-siam-s0": {"seconds_per_step": 2.0},
                     "box-head-nce+-s0": {"seconds_per_step": 0.5}}}))
    assert bench.main(["--sequences", "2", "--steps", "2", "--rounds", "1",
                       "--batch-size", "2", "--results", str(results),
                       "--out", str(tmp_path / "out")]) == 0
    payload = json.loads((tmp_path / "out" / "tracking_pairs.json").read_text())
    assert [r["reader"] for r in payload["rows"]] == ["folders", "records", "grain"]
    assert all(r["pairs_per_second"] > 0 for r in payload["rows"])
    assert payload["training"] == [{"stage": "box-siam-s0", "pairs_per_second": 4.0},
                                   {"stage": "box-head-nce+-s0", "pairs_per_second": 8.0}]
    assert "| grain |" in (tmp_path / "out" / "tracking_pairs.md").read_text()
