import json

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from ebm_jax import cli
from ebm_jax.data import toy1d
from ebm_jax.energy import make_loss
from ebm_jax.experiments import regression1d as r
from ebm_jax.models import ToyEnergyMLP, count_parameters


def test_reference_network_has_591_parameters():
    assert count_parameters(ToyEnergyMLP(rngs=nnx.Rngs(0))) == 591


def test_network_equals_its_layer_by_layer_definition():
    model = ToyEnergyMLP(rngs=nnx.Rngs(3))
    x, y = jnp.array([[0.5], [-1.0]]), jnp.array([[0.2], [0.9]])
    lin = lambda layer, h: h @ layer.kernel[...] + layer.bias[...]
    hx = jax.nn.relu(lin(model.x2, jax.nn.relu(lin(model.x1, x))))
    h = jnp.tanh(lin(model.joint, jnp.concatenate([hx, jnp.tanh(lin(model.y1, y))], -1)))
    h = jnp.tanh(lin(model.res1, h)) + h
    h = jnp.tanh(lin(model.res2, h)) + h
    np.testing.assert_allclose(model(x, y), lin(model.out, h)[:, 0], rtol=1e-5, atol=1e-6)


def test_ensemble_trains_and_traces_once(tmp_path):
    x, y = toy1d.sample(jax.random.key(0), 2, 256)
    loss = chex.assert_max_traces(make_loss("nce", sigmas=(0.1, 0.8), num_samples=16), n=1)
    graphdef, params, final, spe, _ = r.train_ensemble(
        x, y, loss, key=jax.random.key(1), num_models=3, epochs=6, learning_rate=1e-2,
        stage_dir=tmp_path / "stage")
    rows = [json.loads(ln) for ln in (tmp_path / "stage" / "metrics.jsonl").open()]
    assert [row["step"] for row in rows] == [8 * e for e in range(1, 7)]  # 256 / 32 steps
    assert rows[-1]["mean_model_loss"] < rows[0]["mean_model_loss"]
    assert final == rows[-1]["mean_model_loss"] and spe > 0
    # the models of the ensemble are independent: different initialisations
    w = params["out"]["kernel"][...]
    assert w.shape[0] == 3 and not np.allclose(w[0], w[1])


def test_ensemble_models_train_independently():
    """Changing model 0's initialisation leaves model 1's training untouched."""
    x, y = toy1d.sample(jax.random.key(0), 1, 96)
    loss = make_loss("ml-is", sigmas=(0.2, 1.6), num_samples=8)
    graphdef, params = r.init_ensemble(jax.random.key(1), 2)
    opt = optax.adam(1e-3)
    from ebm_jax.train import init_train_state, make_mesh, make_train_step

    single, _, rest = nnx.split(ToyEnergyMLP(rngs=nnx.Rngs(0)), nnx.Param, ...)
    batches, steps = r.make_epoch_batches(x, y, jax.random.key(2), 2, 32)
    step = make_train_step(single, r.make_ensemble_loss(graphdef, loss), opt, make_mesh(1),
                           steps_per_call=steps, stacked=True)
    other = jax.tree.map(lambda a: a.at[0].multiply(-0.5), params)
    out = []
    for p in (params, other):
        state = init_train_state(p, rest, opt, jax.random.key(3))
        for e in range(2):
            state, _ = step(state, batches(e * steps))
        out.append(state.params)
    chex.assert_trees_all_close(jax.tree.map(lambda a: a[1], out[0]),
                                jax.tree.map(lambda a: a[1], out[1]), rtol=1e-5, atol=1e-6)
    assert not np.allclose(out[0]["out"]["kernel"][0], out[1]["out"]["kernel"][0])


def test_epoch_batches_visit_every_example_once_per_model():
    x = np.arange(70, dtype=np.float32)[:, None]
    batches, steps = r.make_epoch_batches(x, x, jax.random.key(0), 3, 32)
    bx, by, w = batches(steps)
    assert steps == 3 and bx.shape == (3, 32, 3, 1) and w.shape == (3, 32, 3)
    for j in range(3):
        seen = bx[:, :, j, 0].reshape(-1)[w[:, :, j].reshape(-1) > 0]
        assert sorted(seen.tolist()) == list(range(70))
    assert not np.array_equal(bx[:, :, 0], bx[:, :, 1])  # each model its own order
    assert not np.array_equal(batches(0)[0], bx)  # and a new order every epoch
    with pytest.raises(ValueError, match="multiple of 3"):
        batches(1)


def test_train_ensemble_rejects_bad_data():
    loss = make_loss("sm")
    x = np.zeros((10, 1), np.float32)
    with pytest.raises(ValueError, match="same batch size"):
        r.train_ensemble(x, np.zeros((9, 1)), loss, key=jax.random.key(0), num_models=1, epochs=1)
    bad = np.zeros((10, 1), np.float32)
    bad[3, 0] = np.nan
    with pytest.raises(ValueError, match="y must be finite"):
        r.train_ensemble(x, bad, loss, key=jax.random.key(0), num_models=1, epochs=1)
    bad[3, 0] = np.inf
    with pytest.raises(ValueError, match="x must be finite"):
        r.train_ensemble(bad, x, loss, key=jax.random.key(0), num_models=1, epochs=1)
    with pytest.raises(ValueError, match="num_models"):
        r.train_ensemble(x, x, loss, key=jax.random.key(0), num_models=0, epochs=1)


SMOKE = ["regression1d", "--num-models", "2", "--epochs", "1", "--num-samples", "4",
         "--grid", "64", "--no-progress"]


@pytest.fixture(autouse=True)
def _runs_in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # default --run-dir runs/regression1d/<profile>


def test_cli_smoke_writes_results_and_table(tmp_path, capsys):
    out = tmp_path / "run"
    rc = cli.main(SMOKE + ["--methods", "nce+", "sm", "ml-mcmc-2", "--datasets", "2",
                           "--out", str(out)])
    assert rc == 0
    payload = json.loads((out / "results.json").read_text())
    recs = payload["records"]
    assert [(x["method"], x["dataset"]) for x in recs] == [("nce+", 2), ("sm", 2),
                                                          ("ml-mcmc-2", 2)]
    for rec in recs:
        for field in ("method", "dataset", "num_models", "epochs", "kl_mean", "kl_std",
                      "kl_top5", "seconds_per_epoch"):
            assert field in rec
        assert rec["num_models"] == 2 and rec["epochs"] == 1
        assert np.isfinite(rec["kl_mean"]) and rec["kl_top5"] > 0
        assert rec["kl_top5"] <= rec["kl_mean"] + 1e-9
    table = (out / "table.md").read_text()
    assert "| nce+ |" in table and "| ml-mcmc-2 |" in table
    assert (out / "density_dataset2.png").stat().st_size > 0
    assert "nce+" in capsys.readouterr().out


def test_cli_sweep_m_writes_figure(tmp_path):
    out = tmp_path / "sweep"
    rc = cli.main(SMOKE + ["--sweep-m", "--sweep-values", "1", "2", "--methods", "ml-is",
                           "nce", "--datasets", "1", "--out", str(out)])
    assert rc == 0
    recs = json.loads((out / "sweep_m.json").read_text())["records"]
    assert sorted((x["method"], x["num_samples"]) for x in recs) == [
        ("ml-is", 1), ("ml-is", 2), ("nce", 1), ("nce", 2)]
    assert (out / "sweep_m.png").stat().st_size > 0
    assert "M=1" in (out / "sweep_m.md").read_text()


@pytest.mark.parametrize(
    "args, match",
    [
        (["--methods", "ml-iss"], "method must be one of"),
        (["--methods", "ml-mcmc-0"], "ml-mcmc-L"),
        (["--datasets", "3"], "dataset must be one of"),
    ],
)
def test_cli_bad_input_fails_before_writing(tmp_path, capsys, args, match):
    out = tmp_path / "never"
    assert cli.main(SMOKE + args + ["--out", str(out)]) == 2
    assert match in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("flag", ["--num-models", "--epochs", "--num-samples"])
def test_cli_rejects_non_positive_counts(tmp_path, capsys, flag):
    with pytest.raises(SystemExit):
        cli.main(["regression1d", flag, "0", "--out", str(tmp_path / "x")])
    assert f"{flag} must be an integer >= 1" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_cli_rerun_resumes_a_stopped_stage_and_matches(tmp_path, capsys):
    import shutil

    args = SMOKE + ["--methods", "nce", "--datasets", "1", "--epochs", "3",
                    "--save-every", "1", "--run-dir", str(tmp_path / "runs")]
    assert cli.main(args + ["--out", str(tmp_path / "a")]) == 0
    stage = tmp_path / "runs" / "nce-d1"
    # the last two checkpoints are kept; as if killed during epoch 3, drop the last one
    assert sorted(p.name for p in (stage / "checkpoints").iterdir()) == ["126", "189"]
    shutil.rmtree(stage / "checkpoints" / "189")
    assert cli.main(args + ["--out", str(tmp_path / "b")]) == 0
    info = json.loads((stage / "run.json").read_text())
    assert info["resumed_at"] == [126]
    a = json.loads((tmp_path / "a" / "results.json").read_text())["records"][0]
    b = json.loads((tmp_path / "b" / "results.json").read_text())["records"][0]
    assert a["kl_all"] == b["kl_all"]  # bitwise the same models
    # --restart starts over, and a changed config is refused rather than resumed
    assert cli.main(args + ["--out", str(tmp_path / "c"), "--restart"]) == 0
    assert json.loads((stage / "run.json").read_text())["resumed_at"] == []
    assert cli.main(args + ["--seed", "1", "--out", str(tmp_path / "d")]) == 2
    assert "another config (differs in ['seed'])" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()
