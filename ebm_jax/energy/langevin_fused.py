"""A fused Langevin chain for the 1D experiments' energy network (Gustafsson et al. 2020,
eq. 9; the network of sec. 4.1, `ebm_jax.models.energy_mlp.ToyEnergyMLP`):

    y_(l+1) = y_(l) + (alpha^2 / 2) d/dy f(x, y_(l)) + alpha eps_l

All L steps of the chains of a block of samples run in one Pallas kernel: the energy's
gradient in y is written out (the network's forward and backward pass in y, by hand),
so each step is a few small matrix products on data that stays in the kernel, in place
of the several kernel launches per step of the reference chain
(`ebm_jax.energy.langevin.langevin_chains`, a `lax.scan`), whose launches bound ML-MCMC's
epoch on a GPU. On a CPU the kernel runs in Pallas's interpret mode (the tests check it
against the reference chain there); the reference path stays the one for other
networks and backends.

    weights = ToyEnergyMLP(...).chain_weights()        # the arrays below, as a dict
    ys = fused_langevin_chains(weights, x, y0, noise, step_size=alpha)

Shapes: x (N, x_dim) examples, y0 (N, M) starting points (y_dim = 1), noise (L, N, M)
standard normal draws (step l's of every chain; `chain_noise` draws them as the
reference chain does, so both paths give the same samples), returns (N, M). The
samples carry no gradient (as the reference chain's).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from ebm_jax import checks

# the samples of one grid cell on a GPU, at most (`fused_langevin_chains`' block)
GPU_BLOCK = 128
# the network's arrays the kernel takes (`ToyEnergyMLP.chain_weights`)
WEIGHTS = ("x1_w", "x1_b", "x2_w", "x2_b", "y1_w", "y1_b", "joint_w", "joint_b",
           "res1_w", "res1_b", "res2_w", "res2_b", "out_w", "out_b")


def chain_noise(key: jax.Array, num_steps: int, shape: tuple[int, ...],
                dtype=jnp.float32) -> jax.Array:
    """(L, *shape) standard normal draws, step l's from `fold_in(key, l)`: the reference
    chain's noise (`langevin_chains` draws step l's the same way)."""
    num_steps = checks.int_at_least("num_steps", num_steps, 1)
    return jax.vmap(lambda i: jax.random.normal(jax.random.fold_in(key, i), shape,
                                                dtype))(jnp.arange(num_steps))


def kernel_arrays(w: dict) -> dict:
    """The arrays the kernel reads, each 2D (rows of biases (1, H)), from the network's
    (`WEIGHTS`): the joint layer's y half on its own and the output layer as a row, so
    that the kernel takes no slices of its values and forms no matrix-vector products
    (Pallas's Triton lowering has neither)."""
    hidden = w["res1_w"].shape[0]
    return {"y_w": w["y1_w"][:1], "y_b": w["y1_b"][None, :],
            "joint_y": w["joint_w"][hidden:],
            "res1_w": w["res1_w"], "res1_b": w["res1_b"][None, :],
            "res2_w": w["res2_w"], "res2_b": w["res2_b"][None, :],
            "out_row": w["out_w"][:, 0][None, :]}


KERNEL_ARRAYS = ("y_w", "y_b", "joint_y", "res1_w", "res1_b", "res2_w", "res2_b", "out_row")


def _forward_backward(k: dict, a: jax.Array, y: jax.Array):
    """(h2, d f / d y (B, 1)) for targets y (B, 1) of one example whose x half of the
    joint layer is the row `a` (1, H), on `kernel_arrays` k: the y path forward, then
    backward by hand (tanh' = 1 - tanh^2); 2D arrays and matrix-matrix products only."""
    u = jnp.tanh(y * k["y_w"] + k["y_b"])  # (B, H)
    h0 = jnp.tanh(a + u @ k["joint_y"])
    t1 = jnp.tanh(h0 @ k["res1_w"] + k["res1_b"])
    h1 = t1 + h0
    t2 = jnp.tanh(h1 @ k["res2_w"] + k["res2_b"])
    h2 = t2 + h1
    g2 = jnp.broadcast_to(k["out_row"], h2.shape)  # df/dh2
    g1 = g2 + (g2 * (1.0 - t2 * t2)) @ k["res2_w"].T
    g0 = g1 + (g1 * (1.0 - t1 * t1)) @ k["res1_w"].T
    gu = (g0 * (1.0 - h0 * h0)) @ k["joint_y"].T
    dy = jnp.sum(gu * (1.0 - u * u) * k["y_w"], axis=1)[:, None]
    return h2, dy


def energy_and_grad_y(w: dict, a: jax.Array, y: jax.Array):
    """f and d f / d y (each (B,)) for a block of targets y (B,) of one example whose x
    half of the joint layer is `a` (H,) = relu(relu(x W1 + b1) W2 + b2) W_joint[:H] +
    b_joint: what the kernel computes each step (`_forward_backward`)."""
    h2, dy = _forward_backward(kernel_arrays(w), a[None, :], y[:, None])
    f = h2 @ w["out_w"][:, 0] + w["out_b"][0]
    return f, dy[:, 0]


def x_half(w: dict, x: jax.Array) -> jax.Array:
    """(N, H): the joint layer's x half plus its bias, once per example."""
    hidden = w["res1_w"].shape[0]
    hx = jax.nn.relu(jax.nn.relu(x @ w["x1_w"] + w["x1_b"]) @ w["x2_w"] + w["x2_b"])
    return hx @ w["joint_w"][:hidden] + w["joint_b"]


def pad_hidden(w: dict, size: int) -> dict:
    """The network with its hidden layers padded with zero units to `size`: the same
    function and the same gradient in y (a zero unit's tanh is 0 and its weights out
    are 0), in the power-of-two shapes GPU kernels tile by."""
    hidden = w["res1_w"].shape[0]
    if size < hidden:
        raise ValueError(f"pad size {size} is below the hidden width {hidden}")
    p = size - hidden

    def cols(a):
        return jnp.pad(a, [(0, 0)] * (a.ndim - 1) + [(0, p)])

    joint = w["joint_w"]
    return {**w, "x2_w": cols(w["x2_w"]), "x2_b": cols(w["x2_b"]),
            "x1_w": w["x1_w"], "x1_b": w["x1_b"],
            "y1_w": cols(w["y1_w"]), "y1_b": cols(w["y1_b"]),
            "joint_w": jnp.concatenate([
                jnp.pad(joint[:hidden], ((0, p), (0, p))),
                jnp.pad(joint[hidden:], ((0, p), (0, p)))]),
            "joint_b": cols(w["joint_b"]),
            "res1_w": jnp.pad(w["res1_w"], ((0, p), (0, p))), "res1_b": cols(w["res1_b"]),
            "res2_w": jnp.pad(w["res2_w"], ((0, p), (0, p))), "res2_b": cols(w["res2_b"]),
            "out_w": jnp.pad(w["out_w"], ((0, p), (0, 0))), "out_b": w["out_b"]}


def _kernel(num_steps: int, names: tuple[str, ...], *refs):
    """One grid cell: the chains of one example's block of samples, all L steps."""
    n = len(names)
    k = {name: r[...] for name, r in zip(names, refs[:n])}
    a_ref, y_ref, noise_ref, alpha_ref, out_ref = refs[n:]
    a = a_ref[0]  # (1, H)
    alpha = alpha_ref[0]
    half = 0.5 * alpha * alpha

    def step(l, y):
        _, dy = _forward_backward(k, a, y)
        return y + half * dy + alpha * noise_ref[l, 0]

    out_ref[0] = jax.lax.fori_loop(0, num_steps, step, y_ref[0])


def check_block(block: int, num_samples: int) -> int:
    """The samples per grid cell: an integer >= 1 that divides M (one line otherwise)."""
    block = checks.int_at_least("block", block, 1)
    if num_samples % block:
        raise ValueError(f"block must divide the samples per example ({num_samples}), "
                         f"got {block}")
    return block


def fused_langevin_chains(weights: dict, x: jax.Array, y0: jax.Array, noise: jax.Array, *,
                          step_size, block: int | None = None,
                          interpret: bool | None = None,
                          pad_to: int | None = None) -> jax.Array:
    """The chains of the module docstring in one Pallas kernel per (example, block of
    `block` samples). `block` must divide M; default: all M in interpret mode, else
    the next power of two >= max(16, M) up to `GPU_BLOCK`, M padded up to a multiple
    of it (Triton's tiles are powers of two of at least 16). `interpret`: Pallas's
    interpret mode (default: on a CPU backend). `step_size` alpha > 0 (an array is
    used as it is, checked where it was set). `pad_to`: the hidden width the kernel
    runs at (`pad_hidden`; default: unpadded in interpret mode, else the next power of
    two >= 16)."""
    from jax.experimental import pallas as pl

    missing = [k for k in WEIGHTS if k not in weights]
    if missing:
        raise ValueError(f"weights lack {missing} (give ToyEnergyMLP.chain_weights())")
    if weights["y1_w"].shape[0] != 1:
        raise ValueError(f"the fused chain is for y_dim = 1, got y_dim "
                         f"{weights['y1_w'].shape[0]}; use langevin_chains")
    if y0.ndim != 2 or x.ndim != 2 or x.shape[0] != y0.shape[0]:
        raise ValueError(f"x must be (N, x_dim) and y0 (N, M), got {x.shape} and "
                         f"{y0.shape}")
    if noise.ndim != 3 or noise.shape[1:] != y0.shape or noise.shape[0] < 1:
        raise ValueError(f"noise must be (L >= 1, {y0.shape[0]}, {y0.shape[1]}), got "
                         f"{noise.shape}")
    alpha = (step_size if isinstance(step_size, jax.Array)
             else checks.positive("step_size", step_size))
    n, m = y0.shape
    if interpret is None:
        interpret = jax.default_backend() == "cpu"
    if block is None and not interpret:
        # a power of two >= 16 (Triton's tiles); the chains padded up to a multiple of
        # it start at 0 with no noise and are dropped
        block = min(GPU_BLOCK, max(16, 1 << (m - 1).bit_length()))
        padded = -(-m // block) * block
    else:
        block = check_block(m if block is None else block, m)
        if not interpret and block & (block - 1):
            raise ValueError(f"block must be a power of two on a GPU (Triton's tiles), "
                             f"got {block}; leave it unset to pad the chains to one")
        padded = m
    num_steps = noise.shape[0]
    # the samples carry no gradient: nothing is differentiated through the kernel
    w = {k: jax.lax.stop_gradient(jnp.asarray(weights[k], jnp.float32)) for k in WEIGHTS}
    x, y0 = jax.lax.stop_gradient(x), jax.lax.stop_gradient(y0)
    noise = jax.lax.stop_gradient(jnp.asarray(noise, jnp.float32))
    alpha = jax.lax.stop_gradient(alpha)
    hidden = w["res1_w"].shape[0]
    if pad_to is None and not interpret:
        pad_to = max(16, 1 << (hidden - 1).bit_length())
    if pad_to is not None:
        w = pad_hidden(w, checks.int_at_least("pad_to", pad_to, 1))
    a = x_half(w, jnp.asarray(x, jnp.float32))[:, None, :]  # (N, 1, H)
    k = kernel_arrays(w)
    y = jnp.asarray(y0, jnp.float32)
    if padded > m:
        y = jnp.pad(y, ((0, 0), (0, padded - m)))
        noise = jnp.pad(noise, ((0, 0), (0, 0), (0, padded - m)))
    whole = [pl.BlockSpec(k[name].shape, _origin) for name in KERNEL_ARRAYS]
    out = pl.pallas_call(
        functools.partial(_kernel, num_steps, KERNEL_ARRAYS),
        out_shape=jax.ShapeDtypeStruct((n, padded, 1), jnp.float32),
        grid=(n, padded // block),
        in_specs=whole + [
            pl.BlockSpec((1, 1, a.shape[2]), lambda i, j: (i, 0, 0)),
            pl.BlockSpec((1, block, 1), lambda i, j: (i, j, 0)),
            pl.BlockSpec((num_steps, 1, block, 1), lambda i, j: (0, i, j, 0)),
            pl.BlockSpec((1,), lambda i, j: (0,)),
        ],
        out_specs=pl.BlockSpec((1, block, 1), lambda i, j: (i, j, 0)),
        interpret=interpret,
    )(*[k[name] for name in KERNEL_ARRAYS], a, y[:, :, None], noise[..., None],
      jnp.reshape(jnp.asarray(alpha, jnp.float32), (1,)))
    out = out[:, :m, 0]
    return jax.lax.stop_gradient(out)


def _origin(*_):
    return (0, 0)  # every kernel array is 2D and read whole


__all__ = ["GPU_BLOCK", "KERNEL_ARRAYS", "WEIGHTS", "chain_noise", "check_block",
           "energy_and_grad_y", "fused_langevin_chains", "kernel_arrays", "pad_hidden",
           "x_half"]
