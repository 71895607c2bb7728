"""benchmarks/contrastive.py times one train step of the recipe's models and losses."""

import importlib.util
from pathlib import Path

from ebm_jax.config import load_config
from ebm_jax.recipes import contrastive_stages as rc

ROOT = Path(__file__).parents[2]


def test_throughput_benchmark_times_a_step():
    spec = importlib.util.spec_from_file_location(
        "bench_contrastive", ROOT / "benchmarks" / "contrastive.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    cfg = load_config(f"{ROOT}/experiments/contrastive/instdisc_linear_eval.py:tiny")
    data = bench.fake_data(cfg, 1, 64)
    row = bench.time_method(rc.default_spec("instdisc", cfg), cfg, data, steps=2)
    assert row["images_per_second"] > 0 and row["steps_per_call"] == 1
    assert row["method"] == "instdisc"
