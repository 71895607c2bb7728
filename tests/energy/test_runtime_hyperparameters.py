"""Hyperparameters given when a loss is called (`make_loss(..., runtime=...)`): the same
losses as the bound ones, one compiled program for every value, and bad uses refused."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ebm_jax.energy import (
    RUNTIME_HYPERPARAMETERS,
    isotropic_gaussian,
    langevin_chains,
    make_loss,
)
from ebm_jax.train.compilation import CompileMeter

KEY = jax.random.key(7)
X = jnp.array([0.4], jnp.float32)
Y = jnp.array([0.3], jnp.float32)


def energy(x, y):
    return -jnp.sum((y - 0.7 * x) ** 2) / 0.5 + 0.3 * jnp.sum(jnp.sin(3 * y))


CASES = [("ml-mcmc", dict(num_steps=3, step_size=0.05, num_samples=4), "step_size",
          (0.05, 0.0125)),
         ("ml-mcmc", dict(num_steps=3, step_size=0.05, num_samples=4), "num_steps",
          (1, 3)),
         ("dsm", dict(sigma=0.2, num_samples=8), "sigma", (0.2, 0.075))]


@pytest.mark.parametrize("method, hp, name, values", CASES)
def test_a_runtime_value_gives_the_bound_loss_and_one_program(method, hp, name, values):
    loss = make_loss(method, runtime=(name,), **hp)
    f = jax.jit(lambda v: loss(energy, X, Y, KEY, **{name: v}))
    args = [jnp.float32(v) for v in values]
    with CompileMeter() as meter:
        got = [f(a) for a in args]
    assert meter.compilations == 1  # both values, one executable
    for v, g in zip(values, got):
        bound = float(make_loss(method, **{**hp, name: v})(energy, X, Y, KEY))
        assert float(g) == pytest.approx(bound, rel=1e-5, abs=1e-6), v


def test_dsm_draws_the_same_noise_at_run_time():
    """y + sigma eps with eps the unit draw is the bound draw, bit for bit."""
    sigma = 0.075
    bound = isotropic_gaussian(sigma).sample(KEY, Y, 5)
    unit = isotropic_gaussian(1.0).sample(KEY, jnp.zeros_like(Y), 5)
    np.testing.assert_array_equal(Y + jnp.float32(sigma) * unit, bound)


def test_langevin_takes_a_traced_step():
    y0 = jnp.zeros((3, 1))
    run = jax.jit(lambda a: langevin_chains(lambda y: energy(X, y), y0, KEY, num_steps=2,
                                            step_size=a))
    want = langevin_chains(lambda y: energy(X, y), y0, KEY, num_steps=2, step_size=0.05)
    np.testing.assert_allclose(run(jnp.float32(0.05)), want, rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match="step_size must be a finite number > 0"):
        langevin_chains(lambda y: energy(X, y), y0, KEY, num_steps=2, step_size=0.0)


def test_langevin_takes_a_traced_chain_length_one_program_for_every_length():
    """L at run time (ML-MCMC-1, -16 and -256 share one program): a fori_loop of the
    same steps as the scan of a static L; the same noise (fold_in(key, l)) and the same
    update, so equal to float32 rounding (XLA may fuse the two loop bodies
    differently: a few ulps of values below 2 after at most 8 steps)."""
    y0 = jnp.zeros((3, 1))
    run = jax.jit(lambda n: langevin_chains(lambda y: energy(X, y), y0, KEY,
                                            num_steps=n, step_size=0.05))
    with CompileMeter() as meter:
        got = {n: run(jnp.float32(n)) for n in (1, 4, 8)}
    assert meter.compilations == 1
    for n, g in got.items():
        want = langevin_chains(lambda y: energy(X, y), y0, KEY, num_steps=n, step_size=0.05)
        np.testing.assert_allclose(g, want, rtol=0, atol=8 * n * 2.0 ** -23 * 2)


@pytest.mark.parametrize("method, hp, runtime", [
    ("nce", dict(sigmas=(0.1, 0.8), num_samples=4), ("sigmas",)),  # shapes depend on it
    ("ml-mcmc", dict(num_steps=2, step_size=0.05, num_samples=4), ("num_samples",)),
    ("dsm", dict(num_samples=4, sigma=0.1), ("step_size",)),
])
def test_only_plain_numbers_may_come_at_run_time(method, hp, runtime):
    with pytest.raises(ValueError, match="runtime: method"):
        make_loss(method, runtime=runtime, **hp)


def test_the_example_value_is_checked_and_the_call_must_give_the_value():
    with pytest.raises(ValueError, match="step_size must be a finite number > 0"):
        make_loss("ml-mcmc", runtime=("step_size",), num_steps=2, step_size=-1.0)
    with pytest.raises(ValueError, match=r"needs hyperparameters \['step_size'\]"):
        make_loss("ml-mcmc", runtime=("step_size",), num_steps=2)
    loss = make_loss("ml-mcmc", runtime=("step_size",), num_steps=2, step_size=0.05)
    with pytest.raises(TypeError, match=r"run-time hyperparameters \['step_size'\]"):
        loss(energy, X, Y, KEY)
    assert set(RUNTIME_HYPERPARAMETERS) == {"ml-mcmc", "dsm"}
