"""The seven EBM training losses of Gustafsson et al. 2020 ("How to Train Your EBM for
Regression") as pure functions of an energy.

Every loss takes

    energy(x, y) -> scalar    f_theta for one example; y has shape (K,); or a
                              `BatchedEnergy`, which also evaluates many targets of
                              one example at once (`energy.many(x, ys)`)
    x, y                      one example (y of shape (K,))
    key                       a PRNG key (ignored by SM, which samples nothing)
    hyperparameters           keyword-only, static Python numbers (those of
                              `RUNTIME_HYPERPARAMETERS` may also be arrays, traced)

and returns the scalar loss of that example. `batch_loss` vmaps a loss over a batch with
one key per example and averages (optionally with per-example weights). Gradients are
`jax.grad` of a closure over the parameters. Nothing here knows about Flax, optimisers
or devices.

Key use is documented per loss so that tests (and users) can reproduce the samples.
Everything is computed in log space with log-sum-exp; no loss exponentiates a raw score,
so all are finite in float32 for any number of samples M >= 1.

The M samples of one example are scored by `energies` and their y-gradients taken by
`scores`: with a plain energy, `vmap` over the samples; with a `BatchedEnergy`, one call
of its `many` (the 1D network's `ToyEnergyMLP.many` computes the M targets unit by unit
as elementwise loops, 2-3x faster on XLA's CPU backend than the vmapped network). Both
give the same losses and gradients to float32 rounding (tests/energy/test_losses.py).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
from jax.scipy.special import logsumexp

from ebm_jax import checks
from ebm_jax.energy.hessian import grad_and_hessian_trace
from ebm_jax.energy.langevin import langevin_chains
from ebm_jax.energy.proposals import BETA_SCALES, gaussian_mixture, isotropic_gaussian

Energy = Callable[[jax.Array, jax.Array], jax.Array]


@dataclasses.dataclass(frozen=True)
class BatchedEnergy:
    """An energy with a batched form over the targets of one example.

    Attributes:
      one: (x, y (K,)) -> f(x, y), a scalar.
      many: (x, ys (..., K)) -> (...): f(x, y) for every row of ys, row by row the same
        function as `one` (up to float32 rounding); row m may depend on ys[m] only.
      min_rows: `many` is used for at least this many targets per example; below it,
        `one` vmapped. The written-out 1D network runs one small kernel per unit, whose
        fixed cost outweighs the gain on few rows: ML-MCMC with 5 models, batch 32 and
        8 chains trains 13x slower through `many`, and the two break even at 32-64.
      chain_weights: () -> the arrays of the fused Langevin chain
        (`ebm_jax.energy.langevin_fused`; the 1D network's `chain_weights()`), or None
        where the network has none: `ml_mcmc_loss(..., fused=True)` needs them.

    Calling it calls `one`, so it can stand wherever an energy function does.
    """

    one: Callable[[jax.Array, jax.Array], jax.Array]
    many: Callable[[jax.Array, jax.Array], jax.Array]
    min_rows: int = 64
    chain_weights: Callable[[], dict] | None = None

    def __post_init__(self):
        checks.int_at_least("min_rows", self.min_rows, 1)

    def __call__(self, x, y):
        return self.one(x, y)


def uses_many(energy: Energy, num_rows: int) -> bool:
    """Whether `energies` and `scores` score `num_rows` targets of one example with
    `energy.many` (a `BatchedEnergy` and at least its `min_rows` targets)."""
    return isinstance(energy, BatchedEnergy) and num_rows >= energy.min_rows


def energies(energy: Energy, x, ys: jax.Array) -> jax.Array:
    """f(x, y_m) for each row of ys (M, K) -> (M,): `energy.many(x, ys)` where
    `uses_many`, else the energy vmapped over the rows."""
    if uses_many(energy, ys.shape[0]):
        return energy.many(x, ys)
    return jax.vmap(lambda y_m: energy(x, y_m))(ys)


def scores(energy: Energy, x, ys: jax.Array) -> jax.Array:
    """grad_y f(x, y_m) for each row of ys (M, K) -> (M, K). Where `uses_many`, the
    gradient of sum_m f(x, y_m) in ys, which is the same because row m depends on
    ys[m] only; else `jax.grad` of the energy vmapped over the rows."""
    if uses_many(energy, ys.shape[0]):
        return jax.grad(lambda yy: jnp.sum(energy.many(x, yy)))(ys)
    return jax.vmap(jax.grad(lambda y_m: energy(x, y_m)))(ys)


def _check_y(y) -> jax.Array:
    y = jnp.asarray(y)
    if y.ndim != 1:
        raise ValueError(f"y must be one target of shape (K,), got shape {y.shape}; "
                         "use batch_loss for batches")
    return y


def log_partition_is(log_weights: jax.Array) -> jax.Array:
    """log (1/M sum_m exp(log_weights_m)): the importance-sampling estimate of log Z
    when log_weights_m = f(x, y_m) - log q(y_m)."""
    return logsumexp(log_weights) - math.log(log_weights.shape[0])


def ml_is_loss(energy: Energy, x, y, key, *, sigmas: Sequence[float], num_samples: int):
    """ML-IS, eq. 5: log(1/M sum_m exp f(x, y^m) / q(y^m | y)) - f(x, y).

    Samples: `gaussian_mixture(sigmas).sample(key, y, num_samples)`.
    """
    y = _check_y(y)
    m = checks.int_at_least("num_samples", num_samples, 1)
    q = gaussian_mixture(sigmas)
    samples = q.sample(key, y, m)
    log_w = energies(energy, x, samples) - q.log_prob(samples, y)
    return log_partition_is(log_w) - energy(x, y)


def kld_is_loss(
    energy: Energy,
    x,
    y,
    key,
    *,
    sigmas: Sequence[float],
    label_sigma: float,
    num_samples: int,
):
    """KLD-IS, eq. 7, with the label density p(y' | y) = N(y'; y, label_sigma^2 I):

        log(1/M sum_m exp f(x, y^m) / q(y^m|y)) - 1/M sum_m f(x, y^m) p(y^m|y) / q(y^m|y)

    Samples: `gaussian_mixture(sigmas).sample(key, y, num_samples)`.
    """
    y = _check_y(y)
    m = checks.int_at_least("num_samples", num_samples, 1)
    checks.positive("label_sigma", label_sigma)
    q = gaussian_mixture(sigmas)
    p = isotropic_gaussian(label_sigma)
    samples = q.sample(key, y, m)
    f = energies(energy, x, samples)
    log_q = q.log_prob(samples, y)
    ratio = jnp.exp(p.log_prob(samples, y) - log_q)  # density ratio, not a score
    return log_partition_is(f - log_q) - jnp.mean(f * ratio)


def ml_mcmc_loss(
    energy: Energy,
    x,
    y,
    key,
    *,
    num_steps: int,
    step_size: float,
    num_samples: int = 1,
    fused: bool = False,
):
    """ML-MCMC, eq. 10: 1/M sum_m f(x, y^m) - f(x, y), where each y^m is the end of a
    Langevin chain (eq. 9) of `num_steps` steps started at y; the samples carry no
    gradient. Chains: `langevin_chains(f(x, .), tile(y), key, ...)`; with `fused`, the
    same chains (the same noise) in one Pallas kernel
    (`ebm_jax.energy.langevin_fused`), for an energy that gives its arrays
    (`chain_weights()`, the 1D network) with y_dim = 1 and a static `num_steps`.
    """
    y = _check_y(y)
    m = checks.int_at_least("num_samples", num_samples, 1)
    y0 = jnp.broadcast_to(y, (m,) + y.shape)
    if fused:
        samples = _fused_samples(energy, x, y0, key, num_steps, step_size)
    else:
        samples = langevin_chains(
            lambda ys: energies(energy, x, ys), y0, key, num_steps=num_steps,
            step_size=step_size, batched=True, parallel_loop=uses_many(energy, m),
        )
    return jnp.mean(energies(energy, x, samples)) - energy(x, y)


def _fused_samples(energy, x, y0, key, num_steps, step_size) -> jax.Array:
    """`ml_mcmc_loss`'s chains through the fused kernel; one ValueError where it does
    not apply."""
    from ebm_jax.energy.langevin_fused import chain_noise, fused_langevin_chains

    weights = getattr(energy, "chain_weights", None)
    if weights is None:
        raise ValueError("fused chains need an energy with chain_weights() (the 1D "
                         f"network); {type(energy).__name__} has none")
    if y0.shape[-1] != 1:
        raise ValueError(f"fused chains are for y_dim = 1, got y of shape {y0.shape[1:]}")
    if isinstance(num_steps, jax.Array):
        raise ValueError("fused chains need a static num_steps (an int), not a traced one")
    noise = chain_noise(key, num_steps, y0.shape, y0.dtype)[..., 0][:, None, :]
    out = fused_langevin_chains(weights(), jnp.reshape(x, (1, -1)), y0[:, 0][None], noise,
                                step_size=step_size)
    return out[0][:, None]


def _ranking_nce(energy: Energy, x, y, y0, noise_samples, p_n) -> jax.Array:
    ys = jnp.concatenate([y0[None], noise_samples], axis=0)  # (M + 1, K), index 0 = data
    logits = energies(energy, x, ys) - p_n.log_prob(ys, y)
    return logsumexp(logits) - logits[0]


def nce_loss(energy: Energy, x, y, key, *, sigmas: Sequence[float], num_samples: int):
    """NCE (ranking form), eq. 12, with y^(0) = y and M noise samples from p_N(.|y):

        -log softmax_m[f(x, y^m) - log p_N(y^m | y)] at m = 0

    Samples: `gaussian_mixture(sigmas).sample(key, y, num_samples)`.
    """
    y = _check_y(y)
    m = checks.int_at_least("num_samples", num_samples, 1)
    p_n = gaussian_mixture(sigmas)
    return _ranking_nce(energy, x, y, y, p_n.sample(key, y, m), p_n)


def nce_plus_loss(
    energy: Energy,
    x,
    y,
    key,
    *,
    sigmas: Sequence[float],
    beta: float,
    num_samples: int,
    beta_scale: str = "std",
):
    """NCE+, eq. 16: NCE with the data sample y^(0) = y + v, v ~ p_beta (eq. 15).

    beta = 0 is standard NCE. `beta_scale` says how beta narrows p_N into p_beta:
    "std" (the default) draws v with standard deviations beta * sigma_k, which is what
    the authors' published code does and what reproduces the paper's NCE+ results
    (1D: beta = 0.025 gives std (0.0025, 0.02) for sigmas (0.1, 0.8)); "variance" is
    eq. 15 as printed, variances beta * sigma_k^2 (std (0.016, 0.126) for the same
    setting, which perturbs the label far more and hurts D_KL on dataset 2).

    Keys: `k_noise, k_beta = split(key)`; noise samples from
    `gaussian_mixture(sigmas).sample(k_noise, y, M)`, v from
    `gaussian_mixture(sigmas).scaled(beta, beta_scale).sample(k_beta, zeros, 1)[0]`.
    """
    y = _check_y(y)
    m = checks.int_at_least("num_samples", num_samples, 1)
    beta = checks.non_negative("beta", beta)
    _check_beta_scale(beta_scale)
    p_n = gaussian_mixture(sigmas)
    k_noise, k_beta = jax.random.split(key)
    if beta > 0:
        v = p_n.scaled(beta, beta_scale).sample(k_beta, jnp.zeros_like(y), 1)[0]
    else:
        v = jnp.zeros_like(y)
    return _ranking_nce(energy, x, y, y + v, p_n.sample(k_noise, y, m), p_n)


def sm_loss(energy: Energy, x, y, key=None):
    """Score matching, eq. 13: tr(d^2 f / dy^2)(x, y) + 1/2 ||grad_y f(x, y)||^2, with the
    exact Hessian trace (any K). The key is unused."""
    y = _check_y(y)
    grad, trace = grad_and_hessian_trace(lambda yy: energy(x, yy), y)
    return trace + 0.5 * jnp.sum(jnp.square(grad))


def dsm_loss(energy: Energy, x, y, key, *, sigma: float, num_samples: int):
    """Denoising score matching, eq. 14, noise N(y~; y, sigma^2 I):

        1/M sum_m || grad_y f(x, y~^m) + (y~^m - y) / sigma^2 ||^2

    Samples: `isotropic_gaussian(sigma).sample(key, y, num_samples)`.
    """
    y = _check_y(y)
    m = checks.int_at_least("num_samples", num_samples, 1)
    if isinstance(sigma, jax.Array):  # a run-time value: the same draws, scaled after
        noisy = y + sigma * isotropic_gaussian(1.0).sample(key, jnp.zeros_like(y), m)
    else:
        sigma = checks.positive("sigma", sigma)
        noisy = isotropic_gaussian(sigma).sample(key, y, m)
    # the score is differentiated again in the parameters; XLA's CPU backend runs that
    # second derivative faster through the vmapped energy than through the batched one
    one = energy.one if isinstance(energy, BatchedEnergy) else energy
    grads = scores(one, x, noisy)
    residual = grads + (noisy - y) / sigma**2
    return jnp.mean(jnp.sum(jnp.square(residual), axis=-1))


LOSSES: dict[str, Callable] = {
    "ml-is": ml_is_loss,
    "kld-is": kld_is_loss,
    "ml-mcmc": ml_mcmc_loss,
    "nce": nce_loss,
    "nce+": nce_plus_loss,
    "sm": sm_loss,
    "dsm": dsm_loss,
}


# hyperparameters a loss uses as plain numbers (no branch, no shape depends on them):
# they may be given when the loss is called, as arrays (see `make_loss`)
RUNTIME_HYPERPARAMETERS = {"ml-mcmc": ("step_size", "num_steps"), "dsm": ("sigma",)}


def make_loss(method: str, *, runtime: Sequence[str] = (), **hyperparameters) -> Callable:
    """Binds a loss by name: `make_loss("nce", sigmas=(0.1, 0.8), num_samples=1024)`
    returns `loss(energy, x, y, key) -> scalar`.

    Hyperparameters are checked here, before anything is traced, so that bad values
    fail fast with the argument named. `runtime` names hyperparameters (of
    `RUNTIME_HYPERPARAMETERS[method]`) that the loss takes when called instead,
    `loss(energy, x, y, key, step_size=a)` with `a` an array (traced inside jit), so
    that one compiled program serves every value (Table 1's per-dataset Langevin step
    and DSM noise); their values given here are checked as examples and not bound.
    """
    if method not in LOSSES:
        raise ValueError(f"method must be one of {sorted(LOSSES)}, got {method!r}")
    fn = LOSSES[method]
    _check_hyperparameters(method, hyperparameters)
    runtime = tuple(runtime)
    allowed = RUNTIME_HYPERPARAMETERS.get(method, ())
    if not set(runtime) <= set(allowed) & set(hyperparameters):
        raise ValueError(f"runtime: method {method!r} takes {list(allowed)} at run time "
                         f"(each also given as an example value), got {list(runtime)}")
    if hyperparameters.get("fused") and "num_steps" in runtime:
        raise ValueError("runtime: the fused chain compiles its num_steps; give it bound, "
                         "not at run time")
    bound = {k: v for k, v in hyperparameters.items() if k not in runtime}

    def loss(energy: Energy, x, y, key, **values):
        if set(values) != set(runtime):
            raise TypeError(f"loss {method!r} takes the run-time hyperparameters "
                            f"{list(runtime)}, got {sorted(values)}")
        return fn(energy, x, y, key, **bound, **values)

    loss.__name__ = f"{fn.__name__}[{method}]"
    return loss


def _check_beta_scale(beta_scale) -> None:
    if beta_scale not in BETA_SCALES:
        raise ValueError(f"beta_scale must be one of {BETA_SCALES}, got {beta_scale!r}")


_REQUIRED = {
    "ml-is": {"sigmas", "num_samples"},
    "kld-is": {"sigmas", "label_sigma", "num_samples"},
    "ml-mcmc": {"num_steps", "step_size", "num_samples", "fused"},
    "nce": {"sigmas", "num_samples"},
    "nce+": {"sigmas", "beta", "num_samples", "beta_scale"},
    "sm": set(),
    "dsm": {"sigma", "num_samples"},
}


def _check_hyperparameters(method: str, hp: dict) -> None:
    required = _REQUIRED[method]
    optional = {"ml-mcmc": {"num_samples", "fused"}, "nce+": {"beta_scale"}}.get(
        method, set())
    missing = required - optional - set(hp)
    unknown = set(hp) - required
    if missing:
        raise ValueError(f"method {method!r} needs hyperparameters {sorted(missing)}")
    if unknown:
        raise ValueError(
            f"method {method!r} takes hyperparameters {sorted(required)}, "
            f"got unknown {sorted(unknown)}"
        )
    if "num_samples" in hp:
        checks.int_at_least("num_samples (M)", hp["num_samples"], 1)
    if "num_steps" in hp:
        checks.int_at_least("num_steps (L)", hp["num_steps"], 1)
    if "step_size" in hp:
        checks.positive("step_size", hp["step_size"])
    if "sigmas" in hp:
        gaussian_mixture(hp["sigmas"])
    for name in ("sigma", "label_sigma"):
        if name in hp:
            checks.positive(name, hp[name])
    if "beta" in hp:
        checks.non_negative("beta", hp["beta"])
    if "beta_scale" in hp:
        _check_beta_scale(hp["beta_scale"])
    if "fused" in hp and not isinstance(hp["fused"], bool):
        raise ValueError(f"fused must be True or False, got {hp['fused']!r}")


def batch_loss(
    loss: Callable,
    energy: Energy,
    xs,
    ys,
    key,
    weights=None,
) -> jax.Array:
    """Mean of a bound per-example loss over a batch (xs (n, ...), ys (n, K)).

    Example i uses `jax.random.split(key, n)[i]`. With `weights` (n,), the weighted mean
    sum_i w_i l_i / sum_i w_i (padding rows get weight 0).
    """
    n = checks.same_batch("x", xs, "y", ys)
    keys = jax.random.split(key, n)
    per_example = jax.vmap(lambda x, y, k: loss(energy, x, y, k))(xs, ys, keys)
    if weights is None:
        return jnp.mean(per_example)
    weights = jnp.asarray(weights, per_example.dtype)
    return jnp.sum(weights * per_example) / jnp.maximum(jnp.sum(weights), 1e-12)
