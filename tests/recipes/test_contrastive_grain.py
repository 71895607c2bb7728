"""The contrastive experiment trained from ArrayRecord records through grain
(`--config.data=records --config.loader=grain`) gives the same results as the same
records loaded into memory (`--config.loader=memory`): the same batches, losses,
parameters and accuracies."""

import json
from pathlib import Path

import pytest

pytest.importorskip("tensorflow_datasets")
pytest.importorskip("grain")

from ebm_jax.config import ConfigError, load_config  # noqa: E402
from ebm_jax.data import images as image_data  # noqa: E402
from ebm_jax.data.records_write import write_image_records  # noqa: E402
from ebm_jax.recipes import run_experiment  # noqa: E402

# a minute or more on 2 CPU cores: in `make test-heavy` (and CI), not `make test`
pytestmark = pytest.mark.heavy

CONFIG = Path(__file__).parents[2] / "experiments" / "contrastive" / "moco_linear_eval.py"


def _run(tmp_path, name, records, *overrides):
    cfg = load_config(f"{CONFIG}:tiny", ["data=records", f"data_root={records}",
                                         "num_train=None", "num_test=None", *overrides])
    out = tmp_path / name / "out"
    run_experiment(cfg, workdir=tmp_path / name / "runs", out=out, progress=False,
                   log=lambda s: None)
    return json.loads((out / "results.json").read_text()), tmp_path / name / "runs"


def _losses(runs: Path) -> dict[str, list[float]]:
    out = {}
    for metrics in sorted(runs.glob("*/metrics.jsonl")):
        rows = [json.loads(line) for line in metrics.read_text().splitlines()]
        out[metrics.parent.name] = [r["loss"] for r in rows]
    return out


def test_grain_from_records_equals_memory(tmp_path):
    data = image_data.load_image_data("digits", 8, seed=0).subset(96, 40)
    records = write_image_records(data, tmp_path / "records")
    memory, runs_m = _run(tmp_path, "memory", records, "loader=memory")
    grain, runs_g = _run(tmp_path, "grain", records, "loader=grain")
    losses_m, losses_g = _losses(runs_m), _losses(runs_g)
    # MoCo and the supervised ceiling train; same stage names (the loader is not part
    # of a stage's identity) and the same loss at every logged step
    assert len(losses_m) == 2 and losses_m == losses_g
    rows_m = {r["name"]: r for r in memory["tables"]["main"]}
    rows_g = {r["name"]: r for r in grain["tables"]["main"]}
    assert set(rows_m) == set(rows_g)
    for name, row in rows_m.items():
        for key in ("linear_accuracy", "few_label_accuracy", "knn5_accuracy",
                    "final_loss"):
            assert row.get(key) == rows_g[name].get(key), (name, key)


def test_loader_is_checked():
    with pytest.raises(ConfigError, match="loader"):
        load_config(f"{CONFIG}:tiny", ["loader=tfdata"])
    assert "records" in image_data.DATASETS
