"""benchmarks/losses.py end to end at its smallest (JAX side only: the PyTorch side
needs the side environment), and its table with a PyTorch column."""

import importlib.util
import json
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "bench_losses", Path(__file__).parents[2] / "benchmarks" / "losses.py")
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)


@pytest.mark.heavy
def test_losses_benchmark_writes_json_markdown_and_plot(tmp_path):
    assert bench.main(["--ms", "1,4", "--ks", "2", "--losses", "nce,sm", "--rounds", "2",
                       "--round-seconds", "0.01", "--no-torch", "--out",
                       str(tmp_path)]) == 0
    payload = json.loads((tmp_path / "losses.json").read_text())
    rows = payload["rows"]
    # SM draws no samples: one row per K
    assert [(r["loss"], r["k"], r["m"]) for r in rows] == [("nce", 2, 1), ("nce", 2, 4),
                                                           ("sm", 2, None)]
    for r in rows:
        assert r["finite"] and r["jax_wall"]["min"] <= r["jax_wall"]["median"] \
            <= r["jax_wall"]["max"]
        assert r["compile_s"] > 0 and r["xla_bytes"]["temp"] >= 0
    assert (tmp_path / "losses.png").stat().st_size > 0
    assert "| nce | 2 | 4 |" in (tmp_path / "losses.md").read_text()


def test_markdown_gives_the_speedup_of_medians():
    row = {"loss": "nce", "k": 1, "m": 16, "compile_s": 1.0, "xla_bytes": None,
           "jax_wall": {"median": 1e-3, "min": 1e-3, "max": 2e-3},
           "torch_wall": {"median": 4e-3, "min": 3e-3, "max": 5e-3},
           "speedup_wall": 4.0, "speedup_cpu": 2.0}
    md = bench.markdown({"rows": [row], "rounds": 3, "torch": {"torch": "2.13", "threads": 1},
                         "load_average_start": (0.5, 0, 0), "load_average_end": (1.0, 0, 0)})
    assert "| nce | 1 | 16 | 1 (1-2) | 1.00 | - | 4 (3-5) | 4.0x | 2.0x |" in md
    assert "1 thread(s)" in md and "load average 0.5 at the start" in md
