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


def test_the_summary_gives_a_line_a_loss_at_m_1024_with_k_4_and_m_4096_beside():
    def row(loss, k, m, wall):
        return {"loss": loss, "k": k, "m": m, "compile_s": 1.0 + k / 10,
                "xla_bytes": {"temp": 9.7e6},
                "jax_wall": {"median": 1e-3, "min": 1e-3, "max": 2e-3},
                "torch_wall": {"median": 4e-3, "min": 3e-3, "max": 5e-3},
                "speedup_wall": wall, "speedup_cpu": wall / 2}

    rows = [row("nce", 1, 1024, 4.0), row("nce", 1, 4096, 3.0), row("nce", 4, 1024, 2.0),
            row("nce", 1, 16, 9.0), row("sm", 1, None, 6.0), row("sm", 4, None, 8.0)]
    md = bench.markdown({"rows": rows, "rounds": 3, "torch": {"torch": "2.13", "threads": 1},
                         "load_average_start": (0.5, 0, 0), "load_average_end": (1.0, 0, 0)})
    summary, full = md.split("## Every loss, K and M")
    assert "## Summary" in summary
    # the M = 1024, K = 1 speed-up, then K = 4's, then M = 4096's; compile over all rows
    assert ("| nce | 1 (1-2) | 4 | 4.0x / 2.0x | 2.0x / 1.0x | 3.0x / 1.5x | 1.1-1.4 | 9.7 |"
            in summary)
    # SM draws no samples: its one setting at K = 1 and K = 4, no M = 4096
    assert "| sm | 1 (1-2) | 4 | 6.0x / 3.0x | 8.0x / 4.0x | - | 1.1-1.4 | 9.7 |" in summary
    assert full.count("\n| nce |") == 4 and full.count("\n| sm |") == 2


def test_a_report_records_the_tree_its_benchmark_started_from(tmp_path, monkeypatch):
    """The commit and dirty flag are read when the benchmark starts: a file edited while
    it runs does not mark what it measured as modified (nor hide an edit made before)."""
    from ebm_jax.report import provenance

    states = iter([{"commit": "a" * 40, "dirty": False}, {"commit": "a" * 40, "dirty": True}])
    monkeypatch.setattr(provenance, "git_state", lambda *a: next(states))
    run = bench.BenchRun("benchmarks/losses.py", ["--out", str(tmp_path)])
    run.write(tmp_path, "x", {"rows": []}, "| a |\n|---|\n")
    p = json.loads((tmp_path / "x.json").read_text())["ebm_jax"]["provenance"]
    assert p["package"] == {"name": "ebm_jax", "version": p["package"]["version"],
                            "commit": "a" * 40, "dirty": False}
    assert "(modified)" not in (tmp_path / "x.md").read_text()
