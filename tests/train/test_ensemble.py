"""The ensemble training of the 1D comparison: independent models, epoch batches, the
setup that TrainStage runs."""

import json

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from ebm_jax.data import toy1d
from ebm_jax.energy import make_loss
from ebm_jax.models import ToyEnergyMLP, count_parameters
from ebm_jax.train import (
    init_train_state,
    make_mesh,
    make_train_step,
    replicate,
    shard_batch,
)
from ebm_jax.train.ensemble import (
    ensemble_bytes,
    ensemble_training,
    init_ensemble,
    make_ensemble_loss,
    make_epoch_batches,
)
from ebm_jax.train.stages import RunContext, TrainStage
from tests.tolerances import assert_within, float32_sum_atol, toy_mlp_atol


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
    # the same sums, perhaps in other orders (the model splits the joint layer in two):
    # the float32 bound of tests/tolerances.py
    assert_within(model(x, y), lin(model.out, h)[:, 0], toy_mlp_atol(model, x, y))


@pytest.mark.heavy
def test_ensemble_trains_through_a_stage_and_traces_once(tmp_path):
    x, y = toy1d.sample(jax.random.key(0), 2, 256)
    loss = chex.assert_max_traces(make_loss("nce", sigmas=(0.1, 0.8), num_samples=16), n=1)
    k = jax.random.split(jax.random.key(1), 3)
    setup = ensemble_training(x, y, loss, num_models=3, init_key=k[0], train_key=k[1],
                              batch_key=k[2], learning_rate=1e-2)
    assert setup.steps_per_epoch == 8  # 256 / 32
    stage = TrainStage("nce-test", {"seed": 1}, num_steps=6 * 8, log_every=8)
    with RunContext(tmp_path, progress=False) as ctx:
        state, figures = stage.run(ctx, setup.state, setup.step_fn, setup.batches)
    rows = [json.loads(ln) for ln in (stage.dir(ctx) / "metrics.jsonl").open()]
    assert [row["step"] for row in rows] == [8 * e for e in range(1, 7)]
    assert rows[-1]["mean_model_loss"] < rows[0]["mean_model_loss"]
    # the logged loss is the ensemble's sum: / N is the mean model's loss (float32 sum
    # and mean of 3 positive losses, each averaged over the epoch's 8 steps of one call:
    # within 3 + 1 + 8 terms' rounding, relative; tests/tolerances.py)
    assert figures.final_loss / 3 == pytest.approx(rows[-1]["mean_model_loss"],
                                                   rel=float32_sum_atol(3 + 1 + 8, 1.0))
    assert figures.finite and figures.seconds_per_step > 0
    # the models of the ensemble are independent: different initialisations
    w = state.params["out"]["kernel"][...]
    assert w.shape[0] == 3 and not np.allclose(w[0], w[1])


@pytest.mark.heavy
def test_ensemble_models_train_independently():
    """Changing model 0's initialisation leaves model 1's training untouched."""
    x, y = toy1d.sample(jax.random.key(0), 1, 96)
    loss = make_loss("ml-is", sigmas=(0.2, 1.6), num_samples=8)
    graphdef, params = init_ensemble(jax.random.key(1), 2)
    opt = optax.adam(1e-3)
    single, _, rest = nnx.split(ToyEnergyMLP(rngs=nnx.Rngs(0)), nnx.Param, ...)
    batches, steps = make_epoch_batches(x, y, jax.random.key(2), 2, 32)
    mesh = make_mesh(1)
    step = make_train_step(single, make_ensemble_loss(graphdef, loss), opt, mesh,
                           steps_per_call=steps, stacked=True)
    other = jax.tree.map(lambda a: a.at[0].multiply(-0.5), params)
    out = []
    for p in (params, other):
        state = replicate(init_train_state(p, rest, opt, jax.random.key(3)), mesh)
        for e in range(2):
            state, _ = step(state, shard_batch(batches(e * steps), mesh, stacked=True))
        out.append(state.params)
    chex.assert_trees_all_close(jax.tree.map(lambda a: a[1], out[0]),
                                jax.tree.map(lambda a: a[1], out[1]), rtol=1e-5, atol=1e-6)
    assert not np.allclose(out[0]["out"]["kernel"][0], out[1]["out"]["kernel"][0])


def test_epoch_batches_visit_every_example_once_per_model():
    x = np.arange(70, dtype=np.float32)[:, None]
    batches, steps = make_epoch_batches(x, x, jax.random.key(0), 3, 32)
    bx, by, w = batches(steps)
    assert steps == 3 and bx.shape == (3, 32, 3, 1) and w.shape == (3, 32, 3)
    for j in range(3):
        seen = bx[:, :, j, 0].reshape(-1)[w[:, :, j].reshape(-1) > 0]
        assert sorted(seen.tolist()) == list(range(70))
    assert not np.array_equal(bx[:, :, 0], bx[:, :, 1])  # each model its own order
    assert not np.array_equal(batches(0)[0], bx)  # and a new order every epoch
    with pytest.raises(ValueError, match="multiple of 3"):
        batches(1)


def test_ensemble_training_rejects_bad_data():
    loss = make_loss("sm")
    keys = dict(init_key=jax.random.key(0), train_key=jax.random.key(1),
                batch_key=jax.random.key(2))
    x = np.zeros((10, 1), np.float32)
    with pytest.raises(ValueError, match="same batch size"):
        ensemble_training(x, np.zeros((9, 1)), loss, num_models=1, **keys)
    bad = np.zeros((10, 1), np.float32)
    bad[3, 0] = np.nan
    with pytest.raises(ValueError, match="y must be finite"):
        ensemble_training(x, bad, loss, num_models=1, **keys)
    bad[3, 0] = np.inf
    with pytest.raises(ValueError, match="x must be finite"):
        ensemble_training(bad, x, loss, num_models=1, **keys)
    with pytest.raises(ValueError, match="num_models"):
        ensemble_training(x, x, loss, num_models=0, **keys)
    with pytest.raises(ValueError, match="shape"):
        ensemble_training(x[:, 0], x[:, 0], loss, num_models=1, **keys)


def test_ensemble_bytes_grows_with_every_size():
    base = ensemble_bytes(5, 32, 256, 2000)
    assert ensemble_bytes(10, 32, 256, 2000) > 1.9 * base
    assert ensemble_bytes(5, 32, 1024, 2000) > 3.9 * base
    assert ensemble_bytes(5, 32, 10**9, 2000) > 10**13  # refused by fits_in_memory


def test_the_state_does_not_alias_the_callers_key():
    """The step donates the state: a key the caller still holds (here the same key as
    train and batch key) must survive the first epoch."""
    x, y = toy1d.sample(jax.random.key(0), 1, 64)
    loss = make_loss("nce", sigmas=(0.1, 0.8), num_samples=4)
    key = jax.random.key(5)
    setup = ensemble_training(x, y, loss, num_models=1, init_key=key, train_key=key,
                              batch_key=key)
    state = replicate(setup.state, setup.step_fn.mesh)
    for epoch in range(2):
        batch = shard_batch(setup.batches(epoch * setup.steps_per_epoch),
                            setup.step_fn.mesh, stacked=True)
        state, _ = setup.step_fn(state, batch)
        jax.block_until_ready(state)
    assert not jax.random.key_data(key).is_deleted()


def _epochs(setup, epochs=2):
    state = replicate(setup.state, setup.step_fn.mesh)
    for epoch in range(epochs):
        batch = shard_batch(setup.batches(epoch * setup.steps_per_epoch),
                            setup.step_fn.mesh, stacked=True)
        state, _ = setup.step_fn(state, batch)
    return jax.device_get(state.params)


@pytest.mark.heavy
def test_two_datasets_share_one_compiled_step():
    """ML-MCMC with each dataset's Langevin step: the step size is an argument of the
    step (`loss_args`), so the second dataset trains with the first one's executable,
    and each trains as with its step size bound in the loss."""
    from ebm_jax.train.compilation import CompileMeter

    hp = dict(num_steps=2, num_samples=2)
    keys = dict(init_key=jax.random.key(0), train_key=jax.random.key(1),
                batch_key=jax.random.key(2))
    step_fn, params = None, []
    for dataset, step_size in ((1, 0.05), (2, 0.0125)):
        x, y = toy1d.sample(jax.random.key(dataset), dataset, 64)
        loss = make_loss("ml-mcmc", runtime=("step_size",), step_size=step_size, **hp)
        with CompileMeter() as meter:
            setup = ensemble_training(x, y, loss, num_models=2, **keys,
                                      loss_args={"step_size": step_size}, step_fn=step_fn)
            params.append(_epochs(setup))
        if step_fn is None:
            assert meter.compilations >= 1
        else:
            assert setup.step_fn is step_fn and meter.compilations == 0
        step_fn = setup.step_fn
    # the second dataset, trained with the first one's step, as with its step size bound
    bound = ensemble_training(x, y, make_loss("ml-mcmc", step_size=0.0125, **hp),
                              num_models=2, **keys)
    chex.assert_trees_all_close(params[-1], _epochs(bound), rtol=1e-5, atol=1e-6)
    assert not np.allclose(params[0]["out"]["kernel"], params[1]["out"]["kernel"])
    x, y = toy1d.sample(jax.random.key(1), 1, 96)  # 3 steps an epoch, not 2
    with pytest.raises(ValueError, match="this training needs 3"):
        ensemble_training(x, y, loss, num_models=2, **keys,
                          loss_args={"step_size": 0.05}, step_fn=step_fn)


def test_epoch_batches_carry_the_run_time_values():
    x = np.arange(40, dtype=np.float32)[:, None]
    batches, steps = make_epoch_batches(x, x, jax.random.key(0), 2, 16,
                                        loss_args={"sigma": 0.075})
    *_, args = batches(0)
    assert set(args) == {"sigma"} and args["sigma"].shape == (steps, 16)
    assert args["sigma"].dtype == np.float32 and np.all(args["sigma"] == np.float32(0.075))
    assert len(make_epoch_batches(x, x, jax.random.key(0), 2, 16)[0](0)) == 3
