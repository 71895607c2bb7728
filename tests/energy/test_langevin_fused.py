"""The fused Langevin chain (`ebm_jax.energy.langevin_fused`), in Pallas's interpret
mode on the CPU: the same samples as the reference chain (`langevin_chains`) given the
same noise, for L = 1, 16 and 256; the hand-written gradient in y equals autodiff's;
padding the hidden width changes nothing; ML-MCMC's loss and its gradients in the
network's parameters are the reference path's; bad settings are one line."""

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ebm_jax.energy.langevin import langevin_chains
from ebm_jax.energy.langevin_fused import (chain_noise, energy_and_grad_y,
                                           fused_langevin_chains, pad_hidden, x_half)
from ebm_jax.energy.losses import ml_mcmc_loss
from ebm_jax.models.energy_mlp import ToyEnergyMLP

# float32: each step adds (alpha^2 / 2) grad + alpha eps to y of order 1, both paths in
# float32 with the sums of 10-wide layers in another order; L steps accumulate about
# sqrt(L) roundings of a few ulp (1.2e-7) each, amplified by at most the chain's
# contraction 1 + alpha^2 |f''| / 2 per step (below 1.01 here): 1e-5 bounds L = 256
ATOL = {1: 1e-6, 16: 4e-6, 256: 1e-5}


@pytest.fixture(scope="module")
def net():
    return ToyEnergyMLP(rngs=nnx.Rngs(0))


def _reference(net, x, y0, key, num_steps, step_size):
    return jnp.stack([langevin_chains(lambda y: net(x[i], y), y0[i][:, None], key,
                                      num_steps=num_steps, step_size=step_size)[:, 0]
                      for i in range(x.shape[0])])


def test_the_hand_written_gradient_in_y_is_autodiffs(net):
    w = net.chain_weights()
    x = jax.random.normal(jax.random.key(1), (2, 1))
    ys = jnp.linspace(-3.0, 3.0, 16)
    a = x_half(w, x)
    for i in range(2):
        f, dy = energy_and_grad_y(w, a[i], ys)
        ref_f = jax.vmap(lambda y: net(x[i], y[None]))(ys)
        ref_dy = jax.vmap(jax.grad(lambda y: net(x[i], y[None])))(ys)
        np.testing.assert_allclose(f, ref_f, atol=1e-6)  # |f| ~ 1: a few ulp
        np.testing.assert_allclose(dy, ref_dy, atol=1e-6)


@pytest.mark.parametrize("num_steps", [1, 16, 256])
def test_the_fused_chain_is_the_reference_chain(net, num_steps):
    x = jax.random.normal(jax.random.key(1), (3, 1))
    y0 = jax.random.normal(jax.random.key(2), (3, 8))
    key = jax.random.key(3)
    ref = _reference(net, x, y0, key, num_steps, 0.1)
    # each example's chains draw the reference's noise: (M, 1) per step from fold_in
    noise = jnp.broadcast_to(chain_noise(key, num_steps, (8, 1))[:, None, :, 0],
                             (num_steps, 3, 8))
    out = fused_langevin_chains(net.chain_weights(), x, y0, noise, step_size=0.1, block=4)
    np.testing.assert_allclose(out, ref, atol=ATOL[num_steps])
    assert float(jnp.max(jnp.abs(out - y0))) > 0.01  # the chains moved


def test_padding_the_hidden_width_changes_nothing(net):
    w = net.chain_weights()
    x = jax.random.normal(jax.random.key(4), (2, 1))
    y0 = jax.random.normal(jax.random.key(5), (2, 4))
    noise = chain_noise(jax.random.key(6), 16, (2, 4))
    plain = fused_langevin_chains(w, x, y0, noise, step_size=0.2)
    padded = fused_langevin_chains(w, x, y0, noise, step_size=0.2, pad_to=16)
    np.testing.assert_allclose(padded, plain, atol=1e-6)
    wide = pad_hidden(w, 16)
    assert wide["res1_w"].shape == (16, 16) and wide["joint_w"].shape == (32, 16)


def test_ml_mcmc_loss_and_its_parameter_gradients_are_the_reference_paths(net):
    graph, params = nnx.split(net)
    x = jnp.asarray([0.3])
    y = jnp.asarray([1.2])
    key = jax.random.key(7)

    def loss(p, fused):
        return ml_mcmc_loss(nnx.merge(graph, p), x, y, key, num_steps=16, step_size=0.1,
                            num_samples=8, fused=fused)

    ref, g_ref = jax.value_and_grad(loss)(params, False)
    out, g_out = jax.value_and_grad(loss)(params, True)
    np.testing.assert_allclose(out, ref, atol=1e-5)
    for a, b in zip(jax.tree.leaves(g_out), jax.tree.leaves(g_ref)):
        np.testing.assert_allclose(a, b, atol=1e-5)


@pytest.mark.parametrize("change, says", [
    (dict(step_size=0.0), "step_size"),
    (dict(block=3), "block must divide the samples per example (8), got 3"),
    (dict(noise=jnp.zeros((0, 2, 8))), "noise must be"),
    (dict(y0=jnp.zeros((2, 8, 1))), "x must be (N, x_dim) and y0 (N, M)"),
])
def test_bad_settings_are_one_line(net, change, says):
    args = dict(x=jnp.zeros((2, 1)), y0=jnp.zeros((2, 8)), noise=jnp.zeros((4, 2, 8)),
                step_size=0.1)
    args.update(change)
    with pytest.raises(ValueError, match=says.replace("(", r"\(").replace(")", r"\)")):
        fused_langevin_chains(net.chain_weights(), **args)


def test_a_block_a_gpu_cannot_tile_is_one_line(net):
    """Outside interpret mode (a GPU) a block must be a power of two, said before any
    compiling; unset, the chains are padded to one."""
    with pytest.raises(ValueError, match="block must be a power of two on a GPU"):
        fused_langevin_chains(net.chain_weights(), jnp.zeros((1, 1)), jnp.zeros((1, 12)),
                              jnp.zeros((2, 1, 12)), step_size=0.1, block=6,
                              interpret=False)


def test_an_energy_without_its_arrays_is_refused_for_the_fused_path():
    with pytest.raises(ValueError, match="chain_weights"):
        ml_mcmc_loss(lambda x, y: jnp.sum(y), jnp.zeros(1), jnp.zeros(1),
                     jax.random.key(0), num_steps=2, step_size=0.1, fused=True)


def test_the_kernel_lowers_to_triton_for_a_gpu(net, monkeypatch):
    """What a GPU compiles, checked on the CPU: Pallas's Triton lowering takes the kernel
    (2D values, no slices of values, no matrix-vector products), vmapped over examples
    and models and under ML-MCMC's parameter gradient, at the paper's M = 1024 and at an
    M below one tile (padded). The lowering asks the GPU for its compute capability;
    an H100's (9.0) stands in for it."""
    registration = pytest.importorskip("jax._src.pallas.triton.pallas_call_registration")
    info = getattr(registration, "gpu_info_lib", None)
    if info is None or not hasattr(info, "get_gpu_info"):
        pytest.skip("this JAX's Triton lowering reads the GPU another way")
    monkeypatch.setattr(info, "get_gpu_info",
                        lambda: types.SimpleNamespace(compute_capability="9.0"))
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")  # no interpret mode
    graph, params = nnx.split(net)

    def grads(ps, xs, ys, key, num_samples):
        def batch(p):
            model = nnx.merge(graph, p)
            return jnp.mean(jax.vmap(lambda x, y: ml_mcmc_loss(
                model, x, y, key, num_steps=4, step_size=0.1, num_samples=num_samples,
                fused=True))(xs, ys))
        return jax.vmap(jax.grad(batch))(ps)

    models = jax.tree.map(lambda a: jnp.stack([a, a]), params)
    for num_samples in (1024, 8):
        text = jax.jit(grads, static_argnums=4).trace(
            models, jnp.zeros((4, 1)), jnp.zeros((4, 1)), jax.random.key(0), num_samples
        ).lower(lowering_platforms=("cuda",)).as_text()
        assert text.count("__gpu$xla.gpu.triton") == 1  # the chains: one kernel
