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


def test_ensemble_epoch_traces_once_and_learns():
    x, y = toy1d.sample(jax.random.key(0), 2, 256)
    loss = chex.assert_max_traces(make_loss("nce", sigmas=(0.1, 0.8), num_samples=16), n=1)
    graphdef, params = r.init_ensemble(jax.random.key(1), 3)
    opt = optax.adam(1e-2)
    opt_state = jax.vmap(opt.init)(params)
    epoch = r.make_ensemble_epoch(r.energy_fn(graphdef), loss, opt, 256, 32)
    keys = jax.random.split(jax.random.key(2), 3)
    losses = []
    for e in range(8):
        ks = jax.vmap(lambda k: jax.random.fold_in(k, e))(keys)
        params, opt_state, l = epoch(params, opt_state, ks, x, y)
        losses.append(np.asarray(l))
    assert losses[0].shape == (3,)
    assert np.all(losses[-1] < losses[0])
    # the models of the ensemble are independent: different initialisations
    w = params["out"]["kernel"][...]
    assert not np.allclose(w[0], w[1])


def test_ensemble_matches_a_single_model():
    x, y = toy1d.sample(jax.random.key(0), 1, 100)
    loss = make_loss("ml-is", sigmas=(0.2, 1.6), num_samples=8)
    graphdef, params = r.init_ensemble(jax.random.key(1), 2)
    opt = optax.adam(1e-3)
    epoch = r.make_ensemble_epoch(r.energy_fn(graphdef), loss, opt, 100, 32)
    keys = jax.random.split(jax.random.key(2), 2)
    single = jax.tree.map(lambda a: a[1:], params)
    both, _, _ = epoch(params, jax.vmap(opt.init)(params), keys, x, y)
    one, _, _ = epoch(single, jax.vmap(opt.init)(single), keys[1:], x, y)
    chex.assert_trees_all_close(jax.tree.map(lambda a: a[1:], both), one, rtol=1e-5, atol=1e-6)


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
