"""ebm_jax.train: sharded step, checkpoints, resume, records."""

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from ebm_jax import cli
from ebm_jax.energy import batch_loss, make_loss
from ebm_jax.models import ToyEnergyMLP
from ebm_jax.train import (
    CheckpointError,
    ConfigMismatchError,
    StageCheckpoints,
    abstract_like,
    create_train_state,
    fit,
    load_stage_params,
    make_mesh,
    make_train_step,
    read_metrics,
    replicate,
    shard_batch,
)
from tests.tolerances import float32_sum_atol, toy_mlp_atol

NCE = make_loss("nce", sigmas=(0.1, 0.8), num_samples=16)
RNG = np.random.default_rng(0)
X = RNG.uniform(-3, 3, (32, 1)).astype(np.float32)
Y = (np.sin(X) + 0.1 * RNG.normal(size=X.shape)).astype(np.float32)


def nce_loss_fn(model, batch, key):
    x, y = batch
    f = lambda xx, yy: model(xx[None], yy[None])[0]  # noqa: E731
    return batch_loss(NCE, f, x, y, key), {"mean_y": jnp.mean(y)}


def _params(state):
    return [np.asarray(a) for a in jax.tree.leaves(state.params)]


def _train(num_devices, optimizer, steps, loss_fn=nce_loss_fn, per_device=False):
    graphdef, state = create_train_state(ToyEnergyMLP(rngs=nnx.Rngs(0)), optimizer,
                                         jax.random.key(0))
    mesh = make_mesh(num_devices)
    step = make_train_step(graphdef, loss_fn, optimizer, mesh, per_device=per_device)
    state = replicate(state, mesh)
    losses = []
    for _ in range(steps):
        state, metrics = step(state, shard_batch((X, Y), mesh))
        jax.block_until_ready(state)
        losses.append(float(metrics["loss"]))
    return state, losses


def test_four_fake_devices_are_there():
    assert len(jax.devices()) >= 4


def test_one_step_on_four_devices_equals_one_device():
    # SGD with lr 1: the parameter change of one step is the gradient itself
    sgd = optax.sgd(1.0)
    s1, l1 = _train(1, sgd, 1)
    s4, l4 = _train(4, sgd, 1)
    _, init = create_train_state(ToyEnergyMLP(rngs=nnx.Rngs(0)), sgd, jax.random.key(0))
    # 1 and 4 devices are two programs (other batch shapes, a cross-device mean), so two
    # float32 orders: each energy within the network's bound (over the proposals' range,
    # Y +- 6 sigma), to which NCE's log-softmax is 2-Lipschitz, plus its 17-term
    # log-sum-exp and the 32-term mean of positive losses (tests/tolerances.py)
    y = np.linspace(Y.min() - 6 * 0.8, Y.max() + 6 * 0.8, 101)[None, :, None]
    model = ToyEnergyMLP(rngs=nnx.Rngs(0))
    f_atol = float(toy_mlp_atol(model, X[:, None], y).max())
    assert l1[0] == pytest.approx(l4[0], abs=2 * f_atol + float32_sum_atol(17 + 32, l1[0]))
    # The parameter changes are NCE's gradients, the network's backward pass, which
    # tests/tolerances.py does not bound. The tolerance is absolute, against changes of
    # O(0.1); measured gap 6e-8 under the default (AVX-512), AVX2 and SSE4_2 kernels,
    # 1/170 of it.
    changed = 0
    for p0, a, b in zip(_params(init), _params(s1), _params(s4)):
        np.testing.assert_allclose(p0 - a, p0 - b, atol=1e-5)
        changed += int(np.any(p0 != a))
    assert changed >= 12  # all but the output bias (NCE is blind to a constant shift)


def test_twenty_steps_on_four_devices_equal_one_device():
    opt = optax.sgd(0.05, momentum=0.9)
    s1, l1 = _train(1, opt, 20)
    s4, l4 = _train(4, opt, 20)
    # Trajectories through 20 momentum steps: no useful float32 bound (each step's
    # rounding is carried through the gradients of all later ones). The tolerances are
    # absolute, against losses of O(1) and parameters of O(0.1-1); measured gaps under
    # the default (AVX-512), AVX2 and SSE4_2 kernels: losses up to 9.5e-7 (AVX2), 1/11 of
    # theirs, parameters up to 7.5e-8, 1/1300.
    np.testing.assert_allclose(l1, l4, atol=1e-5)
    for a, b in zip(_params(s1), _params(s4)):
        np.testing.assert_allclose(a, b, atol=1e-4)
    assert int(s4.step) == 20 and l1[-1] < l1[0]


def test_per_device_hook_sees_its_own_shard():
    def batch_stat_loss(model, batch, key):
        # a per-device statistic, as in shuffled batch norm: the shard's mean of y
        x, y = batch
        f = model(x, y)
        return jnp.mean((f - jnp.mean(y)) ** 2), {"shard_mean": jnp.mean(y)}

    opt = optax.sgd(0.1)
    plain, lp = _train(4, opt, 3, batch_stat_loss)
    local, ll = _train(4, opt, 3, batch_stat_loss, per_device=True)
    # per device: f is pulled to each shard's own mean, not the global one
    means = Y.reshape(4, -1).mean(axis=1)
    assert not np.allclose(means, Y.mean())
    assert lp[0] != pytest.approx(ll[0], rel=1e-4)
    # with a loss that has no per-device statistic the two modes agree
    def global_loss(model, batch, key):
        x, y = batch
        return jnp.mean((model(x, y) - 0.5) ** 2)

    a, la = _train(4, opt, 3, global_loss)
    b, lb = _train(4, opt, 3, global_loss, per_device=True)
    # Two programs (the loss per device or on the global batch), three SGD steps through
    # the network: no useful float32 bound. The tolerances are relative to the losses
    # and absolute against parameters of O(0.1-1); the measured gap is 0 under the
    # default (AVX-512), AVX2 and SSE4_2 kernels (the same per-row arithmetic, the mean
    # over 4 shards of 8 rows).
    np.testing.assert_allclose(la, lb, rtol=1e-6)
    for u, v in zip(_params(a), _params(b)):
        np.testing.assert_allclose(u, v, atol=1e-6)


def test_scanned_steps_equal_single_steps():
    opt = optax.adam(1e-2)
    graphdef, state = create_train_state(ToyEnergyMLP(rngs=nnx.Rngs(0)), opt,
                                         jax.random.key(3))
    mesh = make_mesh(2)
    one = make_train_step(graphdef, nce_loss_fn, opt, mesh, donate=False)
    four = make_train_step(graphdef, nce_loss_fn, opt, mesh, steps_per_call=4, donate=False)
    xs = np.stack([np.roll(X, i, 0) for i in range(4)])
    ys = np.stack([np.roll(Y, i, 0) for i in range(4)])
    a = replicate(state, mesh)
    for i in range(4):
        a, _ = one(a, shard_batch((xs[i], ys[i]), mesh))
    b, metrics = four(replicate(state, mesh), shard_batch((xs, ys), mesh, stacked=True))
    assert metrics["loss"].shape == (4,) and int(b.step) == 4
    # Four Adam steps, one program per step or one scan over them: no useful float32
    # bound through the steps; the tolerance is relative to the parameters, and the
    # measured gap is 0 under the default (AVX-512), AVX2 and SSE4_2 kernels.
    for u, v in zip(_params(a), _params(b)):
        np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-6)


def test_batch_not_divisible_by_devices_is_rejected():
    opt = optax.sgd(0.1)
    graphdef, state = create_train_state(ToyEnergyMLP(rngs=nnx.Rngs(0)), opt,
                                         jax.random.key(0))
    mesh = make_mesh(4)
    step = make_train_step(graphdef, nce_loss_fn, opt, mesh)
    with pytest.raises(ValueError, match="batch size 30 is not divisible by the 4 devices"):
        step(replicate(state, mesh), (X[:30], Y[:30]))
    with pytest.raises(ValueError, match="num_devices must be in"):
        make_mesh(99)


# --------------------------------------------------------------------------- checkpoints


class _BNNet(nnx.Module):
    """A model with non-Param state (batch statistics), to round-trip `rest`."""

    def __init__(self, rngs):
        self.lin = nnx.Linear(3, 4, rngs=rngs)
        self.bn = nnx.BatchNorm(4, rngs=rngs)

    def __call__(self, x):
        return self.bn(self.lin(x))


STATE_TYPES = {
    "toy-adam": lambda: create_train_state(ToyEnergyMLP(rngs=nnx.Rngs(1)), optax.adam(1e-3),
                                           jax.random.key(1)),
    "toy-sgd-momentum": lambda: create_train_state(
        ToyEnergyMLP(rngs=nnx.Rngs(2)), optax.sgd(0.1, momentum=0.9), jax.random.key(2)),
    "batchnorm-adamw": lambda: create_train_state(
        _BNNet(nnx.Rngs(3)), optax.adamw(1e-3), jax.random.key(3)),
    "regression1d-ensemble": lambda: _ensemble_state(),
}


def _ensemble_state():
    """The state the 1D regression recipe trains: parameters stacked over 5 models."""
    from ebm_jax.train import init_train_state
    from ebm_jax.train.ensemble import init_ensemble

    graphdef, params = init_ensemble(jax.random.key(4), 5)
    _, _, rest = nnx.split(ToyEnergyMLP(rngs=nnx.Rngs(0)), nnx.Param, ...)
    return graphdef, init_train_state(params, rest, optax.adam(1e-3), jax.random.key(4))


@pytest.mark.parametrize("kind", sorted(STATE_TYPES))
def test_checkpoint_round_trip(tmp_path, kind):
    _, state = STATE_TYPES[kind]()
    mesh = make_mesh(4)
    state = replicate(state, mesh)
    # perturb every leaf so that the restore cannot pass by matching the initial values
    state = jax.tree.map(lambda a: a + 1 if a.dtype != jnp.uint32 else a ^ 5, state)
    with StageCheckpoints(tmp_path / "stage", save_every=1, asynchronous=True) as ckpt:
        ckpt.save(7, state, {"next_step": 7, "config": {"kind": kind}})
    _, fresh = STATE_TYPES[kind]()
    ckpt = StageCheckpoints(tmp_path / "stage", save_every=1)
    got, meta = ckpt.restore(abstract_like(replicate(fresh, mesh)))
    ckpt.close()
    assert meta == {"next_step": 7, "config": {"kind": kind}}
    assert jax.tree.structure(got) == jax.tree.structure(state)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(state)):
        assert a.dtype == b.dtype and a.sharding.is_equivalent_to(b.sharding, a.ndim)
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_checkpoint_of_another_shape_is_rejected(tmp_path):
    _, state = create_train_state(ToyEnergyMLP(rngs=nnx.Rngs(0)), optax.adam(1e-3),
                                  jax.random.key(0))
    with StageCheckpoints(tmp_path / "s", save_every=1) as ckpt:
        ckpt.save(1, state, {"next_step": 1})
    _, other = create_train_state(ToyEnergyMLP(hidden=12, rngs=nnx.Rngs(0)),
                                  optax.adam(1e-3), jax.random.key(0))
    with StageCheckpoints(tmp_path / "s", save_every=1) as ckpt:
        with pytest.raises(CheckpointError, match=r"shape \(10,\).*\(12,\).*another shape"):
            ckpt.restore(other)
    with pytest.raises(CheckpointError, match="another shape"):
        load_stage_params(tmp_path, "s", other.params)
    # the right shape loads by stage name
    _, fresh = create_train_state(ToyEnergyMLP(rngs=nnx.Rngs(5)), optax.adam(1e-3),
                                  jax.random.key(0))
    params = load_stage_params(tmp_path, "s", fresh.params)
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(state.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    with pytest.raises(FileNotFoundError, match="stage 'nope' has no checkpoints"):
        load_stage_params(tmp_path, "nope", fresh.params)


def _tiny_fit(stage_dir, num_steps, config=None, restart=False, start_from=None,
              batches=lambda s: (X, Y)):
    opt = optax.adam(1e-2)
    graphdef, state = create_train_state(ToyEnergyMLP(rngs=nnx.Rngs(0)), opt,
                                         jax.random.key(0))
    mesh = make_mesh(2)
    step = make_train_step(graphdef, nce_loss_fn, opt, mesh)
    return fit(stage_dir, state, step, batches, num_steps=num_steps, save_every=2,
               log_every=1, config=config or {"lr": 1e-2}, restart=restart, progress=False,
               start_from=start_from)


def test_a_stage_continued_from_its_prefix_equals_one_trained_from_step_0(tmp_path):
    """Early stopping's lengths cost one run: a 6-step stage started from the finished
    3-step stage of the same keys and batches ends bitwise equal to a 6-step stage
    trained from step 0, with the prefix's metrics rows as its first; a prefix of
    another config, one without a checkpoint, or one longer than the stage is refused."""
    rows = RNG.permutation(32)

    def batches(s):  # a batch per step, as the recipes' pair streams
        idx = rows[(4 * s) % 32:(4 * s) % 32 + 4]
        return X[idx], Y[idx]

    def cfg(n):
        return {"lr": 1e-2, "steps": n}

    _tiny_fit(tmp_path / "p3", 3, cfg(3), batches=batches)
    continued = _tiny_fit(tmp_path / "c6", 6, cfg(6), batches=batches,
                          start_from=(tmp_path / "p3", cfg(3)))
    scratch = _tiny_fit(tmp_path / "s6", 6, cfg(6), batches=batches)
    assert int(continued.step) == 6
    for a, b in zip(_params(continued), _params(scratch)):
        np.testing.assert_array_equal(a, b)
    assert [r["step"] for r in read_metrics(tmp_path / "c6")] == [1, 2, 3, 4, 5, 6]
    assert [r["loss"] for r in read_metrics(tmp_path / "c6")][:3] == \
        [r["loss"] for r in read_metrics(tmp_path / "p3")]
    # a rerun resumes its own checkpoint and ignores the prefix
    again = _tiny_fit(tmp_path / "c6", 6, cfg(6), batches=batches,
                      start_from=(tmp_path / "nowhere", cfg(3)))
    for a, b in zip(_params(again), _params(scratch)):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ConfigMismatchError, match="start_from: .*p3.*another config"):
        _tiny_fit(tmp_path / "x1", 6, cfg(6), start_from=(tmp_path / "p3", cfg(4)))
    with pytest.raises(ValueError, match="start_from: .*nowhere holds no checkpoint"):
        _tiny_fit(tmp_path / "x2", 6, cfg(6), start_from=(tmp_path / "nowhere", cfg(3)))
    with pytest.raises(ValueError, match=r"stopped at step 3, which is not in \[1, "
                                         r"num_steps=2\]"):
        _tiny_fit(tmp_path / "x3", 2, cfg(2), start_from=(tmp_path / "p3", cfg(3)))
    for name in ("x1", "x2", "x3"):  # a refused start saves nothing
        saved = tmp_path / name / "checkpoints"
        assert not saved.exists() or not [p for p in saved.iterdir() if p.name.isdigit()]


@pytest.mark.parametrize("damage", ["truncate", "delete"])
def test_corrupted_checkpoint_is_an_error_not_a_fresh_start(tmp_path, damage):
    stage = tmp_path / "stage"
    _tiny_fit(stage, 4)
    files = sorted(p for p in (stage / "checkpoints" / "4" / "state").rglob("*")
                   if p.is_file() and p.stat().st_size > 0)
    for p in files:
        if damage == "truncate":
            p.write_bytes(p.read_bytes()[: p.stat().st_size // 3])
        else:
            p.unlink()
    with pytest.raises(CheckpointError, match=r"checkpoints/4 cannot be read"):
        _tiny_fit(stage, 8)
    # nothing was overwritten or restarted: the damaged step is still the latest
    assert sorted(int(p.name) for p in (stage / "checkpoints").iterdir()
                  if p.name.isdigit()) == [2, 4]
    assert max(r["step"] for r in read_metrics(stage)) == 4


def test_other_config_is_not_resumed_and_restart_starts_over(tmp_path):
    stage = tmp_path / "stage"
    _tiny_fit(stage, 4)
    with pytest.raises(ConfigMismatchError, match=r"differs in \['lr'\].*--restart"):
        _tiny_fit(stage, 4, config={"lr": 0.5})
    state = _tiny_fit(stage, 2, config={"lr": 0.5}, restart=True)
    assert int(state.step) == 2
    rows = read_metrics(stage)
    assert [r["step"] for r in rows] == [1, 2]
    info = json.loads((stage / "run.json").read_text())
    assert info["config"] == {"lr": 0.5} and info["versions"]["jax"] == jax.__version__
    assert len(info["devices"]) == len(jax.devices())


def test_records_and_plot_metrics(tmp_path, capsys):
    stage = tmp_path / "run" / "stage-a"
    _tiny_fit(stage, 4)
    rows = read_metrics(stage)
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert {"loss", "mean_y", "steps_per_second", "time"} <= set(rows[0])
    assert cli.main(["plot-metrics", str(tmp_path / "run")]) == 0
    png = tmp_path / "run" / "metrics.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert cli.main(["plot-metrics", str(tmp_path / "nothing")]) == 2
    assert "RUN_DIR" in capsys.readouterr().err


def _job(run_dir, out, *extra):
    env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES="2")
    return subprocess.run(
        [sys.executable, str(Path(__file__).parent / "_resume_job.py"), str(run_dir),
         str(out), *extra], env=env, capture_output=True, text=True, timeout=300,
    )


@pytest.mark.heavy
@pytest.mark.parametrize("die_at", [20, 34])
def test_killed_run_resumes_bitwise(tmp_path, die_at):
    ref = _job(tmp_path / "ref", tmp_path / "ref.npz")
    assert ref.returncode == 0, ref.stderr[-2000:]
    killed = _job(tmp_path / "run", tmp_path / "run.npz", "--die-at", str(die_at))
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert not (tmp_path / "run.npz").exists()
    resumed = _job(tmp_path / "run", tmp_path / "run.npz")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert info["resumed_at"] and info["resumed_at"][0] <= die_at
    a, b = np.load(tmp_path / "ref.npz"), np.load(tmp_path / "run.npz")
    assert len(a.files) == 14
    # bit for bit: the resumed run is the same jitted program, with the same shapes and
    # devices, on the same machine as the uninterrupted one, so it is deterministic
    for k in a.files:
        np.testing.assert_array_equal(a[k], b[k])
    steps = [r["step"] for r in read_metrics(tmp_path / "run")]
    assert steps == sorted(set(steps)) and steps[-1] == 60
