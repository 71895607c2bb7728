"""The seven losses against direct NumPy transcriptions of their equations, closed-form
partition functions and minimisers, and numerical stability."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from scipy.special import logsumexp

from ebm_jax.energy import (
    batch_loss,
    dsm_loss,
    gaussian_mixture,
    isotropic_gaussian,
    kld_is_loss,
    langevin_chains,
    make_loss,
    ml_is_loss,
    ml_mcmc_loss,
    nce_loss,
    nce_plus_loss,
    sm_loss,
)
from ebm_jax.models import ToyEnergyMLP
from tests.tolerances import EPS32, assert_within, float32_sum_atol

# A test energy with a closed-form gradient and Hessian diagonal:
#   f(x, y) = -||y - W x||^2 / (2 S^2) + A sum(sin(3 y))
W, S, A = 0.7, 0.5, 0.3


def f_jax(x, y):
    return -jnp.sum((y - W * x) ** 2) / (2 * S**2) + A * jnp.sum(jnp.sin(3 * y))


def f_np(x, y):
    return -np.sum((y - W * x) ** 2, -1) / (2 * S**2) + A * np.sum(np.sin(3 * y), -1)


def grad_np(x, y):
    return -(y - W * x) / S**2 + 3 * A * np.cos(3 * y)


def hess_diag_np(x, y):
    return -1.0 / S**2 - 9 * A * np.sin(3 * y)


def log_mix_np(y, c, sigmas):
    k = y.shape[-1]
    sq = np.sum((y - c) ** 2, -1)
    comps = [-sq / (2 * s**2) - (k / 2) * np.log(2 * np.pi * s**2) for s in sigmas]
    return logsumexp(comps, axis=0) - np.log(len(sigmas))


K = 2
X = np.array([0.4, -0.9])
Y = np.array([0.1, -0.5])
KEY = jax.random.key(42)
M = 64


def f64(a):
    return np.asarray(a, np.float64)


# Float32 error bounds for the comparisons with the NumPy transcriptions below (the losses
# run in float32, the references in float64 on the same float32 samples), carried to
# first order as in tests/tolerances.py: an expression a few roundings deep is within
# float32_sum_atol(depth, the expression with every term replaced by its absolute value).
DEPTH = 10  # roundings along one term of f or of log q (inputs, W, products, difference,
#             square, scale; 3 y, sin within an ulp or two, A times), with a margin


def _f_atol(x, y):
    """|float32 f_jax(x, y) - f_np(x, y)| per row, the inputs' rounding included."""
    return float32_sum_atol(K + DEPTH, np.sum(_quad_terms(y, W * f64(x), S)
                                              + A * (3 * np.abs(f64(y)) + 1), -1))


def _quad_terms(y, c, s):
    """The scale of (y - c)^2 / (2 s^2)'s rounding: y - c within a few roundings of
    |y| + |c|, so its square within 2 |y - c| times that, plus the square's own."""
    y, c = np.broadcast_arrays(f64(y), f64(c))
    d = np.abs(y - c)
    return (d * (np.abs(y) + np.abs(c)) + d**2) / (2 * s**2)


def _grad_atol(x, y):
    """|float32 grad_y f_jax - grad_np| per component (autodiff: the same roundings)."""
    ax, ay = np.abs(f64(x)), np.abs(f64(y))
    return float32_sum_atol(DEPTH, (ay + W * ax) / S**2 + 3 * A * (3 * ay + 1))


def _lse_atol(v, err):
    """A float32 max-shifted log-sum-exp over the first axis of n values `v`, each within
    `err`: the softmax-weighted errors (first order), plus its own rounding (the shifts,
    the exps, the n-term sum of numbers in (0, 1] that is at least 1, the log, the
    add-back)."""
    v = f64(v)
    lse = logsumexp(v, axis=0)
    p = np.exp(v - lse)  # d lse / dv, to first order
    return (np.sum(p * err, 0) + float32_sum_atol(v.shape[0] + 4, 1)
            + EPS32 * (np.sum(p * (np.max(v, 0) - v), 0) + np.abs(lse)))


def _log_mix_atol(y, c, sigmas):
    """|float32 log q(y | c) - log_mix_np(y, c, sigmas)| per row: each component as f's
    quadratic term, then the log-sum-exp over the components."""
    comps = [log_mix_np(y, c, (s,)) for s in sigmas]
    errs = [float32_sum_atol(K + DEPTH, np.sum(_quad_terms(y, c, s), -1)
                             + (K / 2) * abs(np.log(2 * np.pi * s**2))) for s in sigmas]
    return _lse_atol(np.stack(comps), np.stack(errs))


def _score_atol(ys, sigmas):
    """Per sample: s = f - log q and its bound (both terms' and the difference's)."""
    f, lq = f_np(X, ys), log_mix_np(ys, Y, sigmas)
    return f - lq, _f_atol(X, ys) + _log_mix_atol(ys, Y, sigmas) + EPS32 * (np.abs(f)
                                                                          + np.abs(lq))


def _langevin_np(y, steps, alpha, key, grad, grad_atol, lipschitz):
    """The chains of `langevin_chains` in float64 and a running bound on a float32 run's
    distance from them: a step moves an error e to at most e (1 + alpha^2 L / 2) (L the
    score's Lipschitz constant; the Hessians here are diagonal), adds the float32 score's
    error times alpha^2 / 2 and the step's own roundings (the noise within a few ulps)."""
    e = np.zeros_like(y)
    for l in range(steps):
        eps = f64(jax.random.normal(jax.random.fold_in(key, l), y.shape))
        g = grad(y)
        e = (e * (1 + 0.5 * alpha**2 * lipschitz) + 0.5 * alpha**2 * grad_atol(y)
             + float32_sum_atol(4, np.abs(y) + 0.5 * alpha**2 * np.abs(g)
                                + alpha * np.abs(eps)))
        y = y + 0.5 * alpha**2 * g + alpha * eps
    return y, e


L_F = 1 / S**2 + 9 * A  # max |d^2 f / dy_k^2| (the Hessian of f in y is diagonal)


def test_ml_is_matches_numpy():
    sigmas = (0.2, 1.6)
    ys = f64(gaussian_mixture(sigmas).sample(KEY, jnp.asarray(Y, jnp.float32), M))
    ref = np.log(np.mean(np.exp(f_np(X, ys) - log_mix_np(ys, Y, sigmas)))) - f_np(X, Y)
    got = ml_is_loss(f_jax, X, jnp.asarray(Y, jnp.float32), KEY, sigmas=sigmas, num_samples=M)
    s, e = _score_atol(ys, sigmas)
    assert_within(got, ref, _lse_atol(s, e) + _f_atol(X, Y) + EPS32 * (abs(ref) + np.log(M)))


def test_kld_is_matches_numpy():
    sigmas, ls = (0.2, 1.6), 0.025
    ys = f64(gaussian_mixture(sigmas).sample(KEY, jnp.asarray(Y, jnp.float32), M))
    log_q = log_mix_np(ys, Y, sigmas)
    p_over_q = np.exp(log_mix_np(ys, Y, (ls,)) - log_q)
    ref = np.log(np.mean(np.exp(f_np(X, ys) - log_q))) - np.mean(f_np(X, ys) * p_over_q)
    got = kld_is_loss(f_jax, X, jnp.asarray(Y, jnp.float32), KEY, sigmas=sigmas,
                      label_sigma=ls, num_samples=M)
    s, e = _score_atol(ys, sigmas)
    # the mean of f p/q: each product within |f| |err of p/q| + p/q |err f| + a rounding
    f, e_f = f_np(X, ys), _f_atol(X, ys)
    e_ratio = p_over_q * (_log_mix_atol(ys, Y, (ls,)) + _log_mix_atol(ys, Y, sigmas)
                          + float32_sum_atol(3, 1 + np.abs(log_mix_np(ys, Y, (ls,)) - log_q)))
    e_mean = (np.mean(np.abs(f) * e_ratio + p_over_q * e_f)
              + float32_sum_atol(M + 1, np.mean(np.abs(f) * p_over_q)))
    assert_within(got, ref, _lse_atol(s, e) + e_mean + EPS32 * (abs(ref) + np.log(M)))


def _nce_ref(y0, ys, sigmas):
    all_y = np.concatenate([y0[None], ys])
    s = f_np(X, all_y) - log_mix_np(all_y, Y, sigmas)
    return -np.log(np.exp(s[0]) / np.sum(np.exp(s)))


def _nce_atol(y0, ys, sigmas):
    """Bound for the NCE loss lse(s) - s[0] over y0 and the M noise samples."""
    s, e = _score_atol(np.concatenate([f64(y0)[None], ys]), sigmas)
    return _lse_atol(s, e) + e[0] + EPS32 * abs(_nce_ref(y0, ys, sigmas))


def test_nce_matches_numpy():
    sigmas = (0.1, 0.8)
    ys = f64(gaussian_mixture(sigmas).sample(KEY, jnp.asarray(Y, jnp.float32), M))
    got = nce_loss(f_jax, X, jnp.asarray(Y, jnp.float32), KEY, sigmas=sigmas, num_samples=M)
    assert_within(got, _nce_ref(Y, ys, sigmas), _nce_atol(Y, ys, sigmas))


@pytest.mark.parametrize("beta_scale", ["std", "variance"])
def test_nce_plus_matches_numpy_and_reduces_to_nce(beta_scale):
    sigmas, beta = (0.1, 0.8), 0.1
    y32 = jnp.asarray(Y, jnp.float32)
    k_noise, k_beta = jax.random.split(KEY)
    ys = f64(gaussian_mixture(sigmas).sample(k_noise, y32, M))
    # v drawn by hand: component from the first half of the key, N(0, 1) from the second
    k_comp, k_eps = jax.random.split(k_beta)
    comp = int(jax.random.randint(k_comp, (1,), 0, 2)[0])
    eps = f64(jax.random.normal(k_eps, (1, K), jnp.float32)[0])
    scale = beta if beta_scale == "std" else np.sqrt(beta)
    v = scale * sigmas[comp] * eps
    assert np.all(v != 0)
    got = nce_plus_loss(
        f_jax, X, y32, KEY, sigmas=sigmas, beta=beta, num_samples=M, beta_scale=beta_scale
    )
    # y^(0) = y + v in float32 is a few roundings of |y| + |v|: inside the bound's DEPTH
    assert_within(got, _nce_ref(Y + v, ys, sigmas), _nce_atol(Y + v, ys, sigmas))
    # beta = 0: y^(0) = y_i, standard NCE on the same noise samples
    got0 = nce_plus_loss(f_jax, X, y32, KEY, sigmas=sigmas, beta=0.0, num_samples=M)
    assert_within(got0, _nce_ref(Y, ys, sigmas), _nce_atol(Y, ys, sigmas))


def test_sm_matches_numpy():
    h, g = hess_diag_np(X, Y), grad_np(X, Y)
    ref = np.sum(h) + 0.5 * np.sum(g**2)
    # the Hessian's diagonal as the score (9 A |sin| for 3 A |cos|), g^2 within 2 |g| e_g
    e_h = float32_sum_atol(DEPTH, 1 / S**2 + 9 * A * (3 * np.abs(Y) + 1))
    tol = (np.sum(e_h + np.abs(g) * _grad_atol(X, Y))
           + float32_sum_atol(2 * K + 2, np.sum(np.abs(h) + 0.5 * g**2)))
    assert_within(sm_loss(f_jax, X, jnp.asarray(Y, jnp.float32)), ref, tol)


def test_dsm_matches_numpy():
    sigma = 0.2
    noisy = f64(isotropic_gaussian(sigma).sample(KEY, jnp.asarray(Y, jnp.float32), M))
    r = grad_np(X, noisy) + (noisy - Y) / sigma**2
    ref = np.mean(np.sum(r**2, -1))
    got = dsm_loss(f_jax, X, jnp.asarray(Y, jnp.float32), KEY, sigma=sigma, num_samples=M)
    # the residual within the score's bound and (noisy - y) / sigma^2's roundings of
    # |noisy| + |y|; its square within 2 |r| e_r; then the mean of M K squares
    e_r = _grad_atol(X, noisy) + float32_sum_atol(4, (np.abs(noisy) + np.abs(Y)) / sigma**2
                                                  + np.abs(grad_np(X, noisy)))
    tol = np.mean(np.sum(2 * np.abs(r) * e_r, -1)) + float32_sum_atol(M * K + 2, ref)
    assert_within(got, ref, tol)


def test_langevin_and_ml_mcmc_match_numpy():
    alpha, steps, chains = 0.05, 5, 8
    y, e_y = _langevin_np(np.tile(Y, (chains, 1)), steps, alpha, KEY, lambda v: grad_np(X, v),
                          lambda v: _grad_atol(X, v), L_F)
    y32 = jnp.asarray(Y, jnp.float32)
    got = langevin_chains(lambda yy: f_jax(X, yy), jnp.tile(y32, (chains, 1)), KEY,
                          num_steps=steps, step_size=alpha)
    assert_within(got, y, e_y)
    loss = ml_mcmc_loss(f_jax, X, y32, KEY, num_steps=steps, step_size=alpha,
                        num_samples=chains)
    # f at the samples within |grad f| e_y + f's own bound; the mean and the difference
    e_loss = (np.mean(np.sum(np.abs(grad_np(X, y)) * e_y, -1) + _f_atol(X, y)) + _f_atol(X, Y)
              + float32_sum_atol(chains + 1, np.mean(np.abs(f_np(X, y))) + abs(f_np(X, Y))))
    assert_within(loss, np.mean(f_np(X, y)) - f_np(X, Y), e_loss)


def test_ml_mcmc_samples_carry_no_gradient():
    # d/dw of the loss must equal the gradient of eq. (10) with the samples held fixed.
    y32 = jnp.asarray(Y, jnp.float32)

    def energy(w, x, y):
        return -jnp.sum((y - w * x) ** 2)

    def loss(w):
        return ml_mcmc_loss(lambda x, y: energy(w, x, y), X, y32, KEY, num_steps=3,
                            step_size=0.1, num_samples=4)

    samples = langevin_chains(lambda yy: energy(0.7, X, yy), jnp.tile(y32, (4, 1)), KEY,
                              num_steps=3, step_size=0.1)

    def fixed(w):
        return jnp.mean(jax.vmap(lambda s: energy(w, X, s))(samples)) - energy(w, X, y32)

    # Two programs: each side's samples within e_s of the float64 chains (a score
    # -2 (y - w x), Lipschitz 2), and d/dw = mean 2 x.(s - w x) - 2 x.(y - w x) moves by
    # 2 |x|.e_s per sample; plus both sides' roundings of those sums.
    x = np.abs(f64(X))
    s, e_s = _langevin_np(np.tile(Y, (4, 1)), 3, 0.1, KEY, lambda v: -2 * (v - 0.7 * f64(X)),
                          lambda v: float32_sum_atol(DEPTH, 2 * (np.abs(v) + 0.7 * x)), 2.0)
    terms = np.mean(np.sum(2 * x * (np.abs(s) + 0.7 * x), -1)) + np.sum(2 * x * (np.abs(Y)
                                                                             + 0.7 * x))
    tol = 2 * np.mean(np.sum(2 * x * e_s, -1)) + 2 * float32_sum_atol(DEPTH + 4 * K, terms)
    assert_within(jax.grad(loss)(0.7), jax.grad(fixed)(0.7), tol)


# --------------------------------------------------------------------------- log Z


MU, SD = 0.4, 0.3
LOG_Z = math.log(math.sqrt(2 * math.pi) * SD)


def gauss_energy(x, y):
    return -jnp.sum((y - MU) ** 2) / (2 * SD**2)


def _log_z_error(estimator, m, reps=64):
    keys = jax.random.split(jax.random.key(7), reps)
    est = jax.vmap(lambda k: estimator(k, m))(keys)
    return float(jnp.sqrt(jnp.mean((est - LOG_Z) ** 2)))


def test_ml_is_log_partition_estimate_converges():
    y = jnp.array([MU + 0.2])

    def estimate(key, m):  # eq. (3): loss + f(y_i) is the IS estimate of log Z
        return ml_is_loss(gauss_energy, None, y, key, sigmas=(0.2, 1.6), num_samples=m) + \
            gauss_energy(None, y)

    errs = [_log_z_error(estimate, m) for m in (4, 64, 1024)]
    assert errs[0] > errs[1] > errs[2]
    assert errs[2] < 0.03


def test_nce_log_partition_estimate_converges():
    y = jnp.array([MU + 0.2])
    p_n = gaussian_mixture((0.1, 0.8))

    def estimate(key, m):
        # nce = logsumexp(s) - s_0, so nce + s_0 - log(M + 1) estimates log Z
        s0 = gauss_energy(None, y) - p_n.log_prob(y, y)
        nce = nce_loss(gauss_energy, None, y, key, sigmas=p_n.sigmas, num_samples=m)
        return nce + s0 - jnp.log(m + 1.0)

    errs = [_log_z_error(estimate, m) for m in (4, 64, 1024)]
    assert errs[0] > errs[1] > errs[2]
    assert errs[2] < 0.05


# --------------------------------------------------------------------------- minimisers


def _fit_gaussian(loss, ys, steps=600):
    def energy(theta, x, y):
        mu, log_s = theta
        return -jnp.sum((y - mu) ** 2) / (2 * jnp.exp(2 * log_s))

    opt = optax.adam(0.05)
    theta = jnp.array([0.0, 0.0])
    state = opt.init(theta)
    xs = jnp.zeros((ys.shape[0], 1))
    key = jax.random.key(3)  # fixed: a deterministic objective

    @jax.jit
    def step(theta, state):
        g = jax.grad(lambda t: batch_loss(loss, lambda x, y: energy(t, x, y), xs, ys, key))(theta)
        upd, state = opt.update(g, state)
        return optax.apply_updates(theta, upd), state

    for _ in range(steps):
        theta, state = step(theta, state)
    return float(theta[0]), float(jnp.exp(2 * theta[1]))


def test_sm_recovers_mean_and_variance():
    ys = 1.5 + 0.7 * jax.random.normal(jax.random.key(0), (4000, 1))
    mu, var = _fit_gaussian(make_loss("sm"), ys)
    np.testing.assert_allclose(mu, float(ys.mean()), atol=1e-2)
    np.testing.assert_allclose(var, float(ys.var()), rtol=1e-2)


def test_dsm_recovers_noise_convolved_variance():
    ys = 1.5 + 0.7 * jax.random.normal(jax.random.key(0), (2000, 1))
    sigma = 0.3
    mu, var = _fit_gaussian(make_loss("dsm", sigma=sigma, num_samples=16), ys)
    np.testing.assert_allclose(mu, 1.5, atol=0.04)
    # DSM fits the data density convolved with its noise: var + sigma^2
    np.testing.assert_allclose(var, 0.49 + sigma**2, rtol=0.05)
    assert abs(var - 0.49) > 0.06


# --------------------------------------------------------------------------- stability


ALL = {
    "ml-is": dict(sigmas=(0.2, 1.6)),
    "kld-is": dict(sigmas=(0.2, 1.6), label_sigma=0.025),
    "ml-mcmc": dict(num_steps=4, step_size=0.05),
    "nce": dict(sigmas=(0.1, 0.8)),
    "nce+": dict(sigmas=(0.1, 0.8), beta=0.025),
    "sm": dict(),
    "dsm": dict(sigma=0.2),
}


def _mlp_energy(scale):
    graphdef, params = nnx.split(ToyEnergyMLP(rngs=nnx.Rngs(0)))

    def energy(p, x, y):
        return scale * nnx.merge(graphdef, p)(x, y)

    return energy, params


@pytest.mark.parametrize("method", sorted(ALL))
@pytest.mark.parametrize("m", [1, 4096])
@pytest.mark.parametrize("scale", [1.0, 300.0])
def test_loss_and_grad_finite_float32(method, m, scale):
    if method == "sm" and m > 1:
        pytest.skip("SM draws no samples")
    hp = dict(ALL[method])
    if method != "sm":
        hp["num_samples"] = m
    loss = make_loss(method, **hp)
    energy, params = _mlp_energy(scale)  # scale 300: scores far beyond exp's float32 range
    xs = jnp.linspace(-3, 3, 4, dtype=jnp.float32)[:, None]
    ys = jnp.linspace(-1, 1, 4, dtype=jnp.float32)[:, None]

    def objective(p):
        return batch_loss(loss, lambda x, y: energy(p, x, y), xs, ys, jax.random.key(1))

    value, grads = jax.jit(jax.value_and_grad(objective))(params)
    assert value.dtype == jnp.float32
    assert np.isfinite(float(value)), (method, m, float(value))
    assert all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grads))


def test_batch_loss_weights_ignore_padding():
    loss = make_loss("nce", sigmas=(0.1, 0.8), num_samples=8)
    xs = jnp.array([[0.1], [0.5], [9.0]])
    ys = jnp.array([[0.2], [-0.3], [5.0]])
    key = jax.random.key(0)
    full = jax.vmap(lambda x, y, k: loss(f_jax, x, y, k))(xs, ys, jax.random.split(key, 3))
    weighted = batch_loss(loss, f_jax, xs, ys, key, weights=jnp.array([1.0, 1.0, 0.0]))
    np.testing.assert_allclose(weighted, jnp.mean(full[:2]), rtol=1e-6)


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "method, hp, match",
    [
        ("ml-is", dict(sigmas=(0.0, 1.0), num_samples=4), "sigmas"),
        ("ml-is", dict(sigmas=(0.2, 1.6), num_samples=0), "num_samples"),
        ("kld-is", dict(sigmas=(0.2,), label_sigma=-1.0, num_samples=4), "label_sigma"),
        ("nce+", dict(sigmas=(0.1,), beta=-0.1, num_samples=4), "beta"),
        ("nce+", dict(sigmas=(0.1,), beta=0.1, num_samples=4, beta_scale="var"), "beta_scale"),
        ("ml-mcmc", dict(num_steps=0, step_size=0.05, num_samples=4), "num_steps"),
        ("ml-mcmc", dict(num_steps=2, step_size=0.0, num_samples=4), "step_size"),
        ("dsm", dict(sigma=0.0, num_samples=4), "sigma"),
        ("dsm", dict(sigma=0.1, num_samples=2.5), "num_samples"),
        ("nce", dict(sigmas=(0.1,)), "num_samples"),
        ("sm", dict(sigma=0.1), "unknown"),
        ("ml-ism", dict(), "method must be one of"),
    ],
)
def test_bad_hyperparameters_named(method, hp, match):
    with pytest.raises(ValueError, match=match):
        make_loss(method, **hp)


def test_batch_size_mismatch():
    loss = make_loss("sm")
    with pytest.raises(ValueError, match="same batch size"):
        batch_loss(loss, f_jax, jnp.zeros((3, 2)), jnp.zeros((4, 2)), KEY)


def test_batched_y_to_per_example_loss_is_rejected():
    with pytest.raises(ValueError, match=r"shape \(K,\)"):
        nce_loss(f_jax, X, jnp.zeros((3, 2)), KEY, sigmas=(0.1,), num_samples=2)


@pytest.mark.heavy
@pytest.mark.parametrize("method,y_dim", [(m, 1) for m in sorted(ALL)] + [("nce", 2)])
def test_batched_energy_gives_the_plain_losses_and_gradients(method, y_dim):
    """The fast path (a `BatchedEnergy`: `ToyEnergyMLP.many` scoring the M samples of an
    example at once) against the plain one (the network vmapped over the samples): the
    same loss and parameter gradients to float32 rounding."""
    from ebm_jax.energy import BatchedEnergy

    hp = dict(ALL[method])
    if method != "sm":
        hp["num_samples"] = 64
    loss = make_loss(method, **hp)
    graphdef, params = nnx.split(ToyEnergyMLP(rngs=nnx.Rngs(1), y_dim=y_dim), nnx.Param)
    xs = jnp.linspace(-2, 2, 4, dtype=jnp.float32)[:, None]
    ys = jnp.stack([jnp.linspace(-1, 1, 4, dtype=jnp.float32)] * y_dim, -1)

    def objective(p, batched):
        model = nnx.merge(graphdef, p)
        energy = BatchedEnergy(model, model.many) if batched else model
        return batch_loss(loss, energy, xs, ys, jax.random.key(2))

    plain, g_plain = jax.jit(jax.value_and_grad(lambda p: objective(p, False)))(params)
    fast, g_fast = jax.jit(jax.value_and_grad(lambda p: objective(p, True)))(params)
    # Two programs over the same network. No useful float32 bound: the samples of DSM and
    # ML-MCMC move along the network's scores, SM and DSM use its derivatives, and the
    # parameter gradients are its backward pass (tests/tolerances.py bounds the forward
    # pass only). The tolerances are relative to the loss and to the largest gradient;
    # measured over the 8 cases under the default (AVX-512), AVX2 and SSE4_2 kernels:
    # the losses' gap at most 1/100 of its tolerance, the gradients' (up to 2.2e-7) 1/7.7.
    np.testing.assert_allclose(fast, plain, rtol=1e-5, atol=1e-6)
    scale = max(float(jnp.max(jnp.abs(g))) for g in jax.tree.leaves(g_plain))
    for a, b in zip(jax.tree.leaves(g_fast), jax.tree.leaves(g_plain)):
        # float32 rounding of O(1) energies floors the absolute error near 1e-7
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=max(1e-5 * scale, 1e-6))


def test_batched_langevin_equals_per_chain_langevin():
    chains = 16
    y0 = jnp.tile(jnp.asarray(Y, jnp.float32), (chains, 1))
    per_chain = langevin_chains(lambda yy: f_jax(X, yy), y0, KEY, num_steps=6,
                                step_size=0.05)
    batched = langevin_chains(lambda ys: jax.vmap(lambda yy: f_jax(X, yy))(ys), y0, KEY,
                              num_steps=6, step_size=0.05, batched=True)
    # two programs (the score vmapped or not): each run within e_y of the float64 chains
    _, e_y = _langevin_np(np.tile(Y, (chains, 1)), 6, 0.05, KEY, lambda v: grad_np(X, v),
                          lambda v: _grad_atol(X, v), L_F)
    assert_within(batched, per_chain, 2 * e_y)


def test_langevin_loop_is_not_compiled_as_one_small_kernel():
    """XLA's CPU backend would compile the chains' loop into one single-threaded kernel
    (10x slower at the paper's size) without `keep_loop_parallel`'s sort."""
    if jax.default_backend() != "cpu":
        pytest.skip("a CPU-backend compilation choice")
    model = ToyEnergyMLP(rngs=nnx.Rngs(0))
    x = jnp.zeros((8, 1))
    y0 = jnp.zeros((8, 64, 1))

    def run(x, y0):
        return jax.vmap(lambda xx, yy: langevin_chains(
            lambda ys: model.many(xx, ys), yy, KEY, num_steps=5, step_size=0.1,
            batched=True, parallel_loop=True))(x, y0)

    hlo = jax.jit(run).lower(x, y0).compile().as_text()
    small_calls = [line for line in hlo.splitlines() if 'xla_cpu_small_call="true"' in line]
    assert not [line for line in small_calls if "f32[8,64,1]" in line.split(" call(")[0]]


def test_batched_energy_below_min_rows_uses_the_per_target_energy():
    from ebm_jax.energy import BatchedEnergy, energies, scores, uses_many

    def many(x, ys):
        raise AssertionError("many must not be called below min_rows")

    energy = BatchedEnergy(f_jax, many, min_rows=9)
    ys = jnp.tile(jnp.asarray(Y, jnp.float32), (8, 1))
    assert not uses_many(energy, 8) and uses_many(energy, 9)
    assert_within(energies(energy, X, ys), f_np(X, f64(ys)), _f_atol(X, ys))
    assert_within(scores(energy, X, ys), grad_np(X, f64(ys)), _grad_atol(X, ys))
    with pytest.raises(ValueError, match="min_rows"):
        BatchedEnergy(f_jax, many, min_rows=0)
