"""ebm_jax.contrastive.socl (SoCL: Qiangqiang Wu and Antoni B. Chan, "Learning Tracking
Representations from Single Point Annotations", sec. 3.2, eqs. 1-10) against plain NumPy
transcriptions of the equations (loops, float64), hand cases of the mass mask, negative
counts, gradients, jit and argument errors."""

import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ebm_jax.contrastive.infonce import infonce_loss
from ebm_jax.contrastive.socl import (
    LST_PURPOSE,
    MIXUP_PURPOSE,
    SoCLSettings,
    gst,
    lst,
    mixup,
    purpose_id,
    sns,
    socl_draws,
    socl_loss,
    socl_loss_with_draws,
    soft_contrastive_loss,
    top_mass_mask,
)

RNG = np.random.default_rng(0)
TOL = dict(rtol=2e-4, atol=2e-5)


def top_maps(*shape, sharpness=2.0):
    x = np.exp(sharpness * RNG.normal(size=shape))
    return x / x.sum(axis=-1, keepdims=True)


def f32(*arrays):
    return [jnp.asarray(a, jnp.float32) for a in arrays]


# ------------------------------------------------------------- NumPy transcriptions


def np_unit(x):
    return x / np.linalg.norm(x)


def np_gst(f, h):                                   # eq. 1 for one frame: f (L, C), h (L,)
    return sum(h[l] * f[l] for l in range(len(h)))


def np_mask(h, theta):                              # eqs. 5-7 for one row
    order = sorted(range(len(h)), key=lambda l: (-h[l], l))
    total, cum, q_star = sum(h), 0.0, len(h)
    for q, l in enumerate(order, start=1):
        cum += h[l]
        if cum >= (theta - 1e-6) * total:
            q_star = q
            break
    mask = np.zeros(len(h), bool)
    mask[order[:q_star]] = True
    return mask


def np_sns(f, h, z, theta_b):                       # eqs. 2-6 for one frame
    g = np.array([f[l] @ z for l in range(len(h))])
    mask = np_mask(h, theta_b)
    if mask.all():
        w = np.full(len(h), 1.0 / len(h))
    else:
        e = np.array([0.0 if mask[l] else np.exp(g[l] - g[~mask].max()) for l in range(len(h))])
        w = e / e.sum()
    return np_gst(f, w)


def np_lst(f, h, theta_p):                          # eqs. 7-8 for one frame
    kept = np.where(np_mask(h, theta_p), h, 0.0)
    return np_gst(f, kept / kept.sum())


def np_mixup(z, cands, lam):
    order = sorted(range(len(cands)), key=lambda k: (-(z @ cands[k]), k))
    return lam * cands[order[0]] + (1 - lam) * cands[order[1]]


def np_eq9(q, p, negs, tau, include_positive=False):
    denom = sum(np.exp(q @ n / tau) for n in negs)
    if include_positive:
        denom += np.exp(q @ p / tau)
    return -np.log(np.exp(q @ p / tau) / denom)


def np_socl(fi, fj, hi, hj, lam, theta_p, s):
    n = fi.shape[0]
    u = np_unit if s.normalize else (lambda x: x)
    z = {("i", v): u(np_gst(fi[v], hi[v])) for v in range(n)}
    z.update({("j", v): u(np_gst(fj[v], hj[v])) for v in range(n)})
    frames = {"i": (fi, hi), "j": (fj, hj)}
    sns_all = [u(np_sns(frames[fr][0][v], frames[fr][1][v], z[(q, v)], s.theta_b))
               for q in "ij" for fr in "ij" for v in range(n)] if s.use_sns else []
    mix = []
    if s.use_sns and s.use_mix:
        def candidates(v):  # the batch's 4N SNS, or the 4 of video v (mix_scope)
            return sns_all if s.mix_scope == "batch" else [sns_all[k * n + v]
                                                           for k in range(4)]
        mix = [u(np_mixup(z[(q, v)], candidates(v), lam[k]))
               for k, (q, v) in enumerate((q, v) for q in "ij" for v in range(n))]
    lsts = {("i", v): u(np_lst(fi[v], hi[v], theta_p[v])) for v in range(n)}
    lsts.update({("j", v): u(np_lst(fj[v], hj[v], theta_p[n + v])) for v in range(n)})
    losses = []
    queries = (("i", "j"), ("j", "i")) if s.symmetric else (("i", "j"),)  # eq. 10 as printed
    for q, other in queries:
        for v in range(n):
            negs = [z[(fr, w)] for fr in "ij" for w in range(n) if w != v] + sns_all + mix
            assert len(negs) == 2 * (n - 1) + len(sns_all) + len(mix)
            loss = np_eq9(z[(q, v)], z[(other, v)], negs, s.tau, s.include_positive)
            if s.use_lst:
                loss += np_eq9(z[(q, v)], lsts[(other, v)], negs, s.tau, s.include_positive)
                loss += np_eq9(z[(q, v)], lsts[(q, v)], negs, s.tau, s.include_positive)
            losses.append(loss)
    return np.mean(losses)


# ------------------------------------------------------------- each equation


def test_gst_matches_numpy_and_accepts_maps():
    f, h = RNG.normal(size=(3, 4, 5, 6)), top_maps(3, 20)
    want = [np_gst(f[b].reshape(20, 6), h[b]) for b in range(3)]
    np.testing.assert_allclose(gst(*f32(f, h)), want, **TOL)
    np.testing.assert_allclose(gst(*f32(f, h.reshape(3, 4, 5))), want, **TOL)
    np.testing.assert_allclose(gst(*f32(f.reshape(3, 20, 6), h)), want, **TOL)


def test_top_mass_mask_matches_numpy_scalar_and_per_row_theta():
    h = top_maps(5, 30)
    for theta in (0.3, 0.8, 1.0):
        want = [np_mask(h[b], theta) for b in range(5)]
        np.testing.assert_array_equal(top_mass_mask(*f32(h), theta), want)
    thetas = np.array([0.05, 0.4, 0.6, 0.9, 1.0])
    want = [np_mask(h[b], thetas[b]) for b in range(5)]
    np.testing.assert_array_equal(top_mass_mask(*f32(h, thetas)), want)


def test_top_mass_mask_hand_cases():
    def mask(rows, theta):
        return np.asarray(top_mass_mask(jnp.asarray(rows, jnp.float32), theta)).tolist()

    t, f = True, False
    # ties are broken by location index (stable sort)
    assert mask([[0.25, 0.25, 0.25, 0.25]], 0.5) == [[t, t, f, f]]
    assert mask([[0.125, 0.375, 0.375, 0.125]], 0.5) == [[f, t, t, f]]
    assert mask([[0.125, 0.375, 0.375, 0.125]], 0.8) == [[t, t, t, f]]
    # one-hot: q* = 1 for every theta
    for theta in (1e-9, 0.5, 0.8, 1.0):
        assert mask([[0.0, 0.0, 1.0, 0.0]], theta) == [[f, f, t, f]]
    # theta = 1: every location with positive mass, none without
    assert mask([[0.5, 0.0, 0.25, 0.25, 0.0]], 1.0) == [[t, f, t, t, f]]
    assert np.all(mask(top_maps(2, 64), 1.0))        # a softmax map: all of it
    # theta tiny: the single highest location (the lowest index among equals)
    assert mask([[0.1, 0.4, 0.4, 0.1]], 1e-9) == [[f, t, f, f]]
    # per-row theta, and (B, H, W) maps
    assert mask([[0.5, 0.25, 0.25, 0.0]] * 2, jnp.array([0.5, 1.0])) == [[t, f, f, f],
                                                                        [t, t, t, f]]
    assert top_mass_mask(jnp.full((2, 3, 4), 1 / 12), 0.5).shape == (2, 12)


def test_sns_matches_numpy():
    f, h, z = RNG.normal(size=(4, 25, 6)), top_maps(4, 25), RNG.normal(size=(4, 6))
    for theta_b in (0.5, 0.8, np.array([0.3, 0.8, 0.95, 1.0])):
        th = np.broadcast_to(theta_b, (4,))
        want = [np_sns(f[b], h[b], z[b], th[b]) for b in range(4)]
        np.testing.assert_allclose(sns(*f32(f, h, z), theta_b), want, **TOL)


def test_sns_falls_back_to_uniform_weights_when_every_location_is_masked():
    f, h, z = RNG.normal(size=(2, 16, 3)), top_maps(2, 16), RNG.normal(size=(2, 3))
    got = sns(*f32(f, h, z), 1.0)                    # a softmax map is all masked at 1
    np.testing.assert_allclose(got, f.mean(axis=1), **TOL)
    grads = jax.grad(lambda f, z: jnp.sum(sns(f, jnp.asarray(h, jnp.float32), z, 1.0)),
                     argnums=(0, 1))(*f32(f, z))
    assert all(np.isfinite(g).all() for g in grads)


def test_lst_matches_numpy_and_is_the_gst_at_theta_1():
    f, h = RNG.normal(size=(4, 30, 5)), top_maps(4, 30)
    theta_p = np.array([0.6, 0.7, 0.85, 0.99])
    want = [np_lst(f[b], h[b], theta_p[b]) for b in range(4)]
    np.testing.assert_allclose(lst(*f32(f, h, theta_p)), want, **TOL)
    np.testing.assert_allclose(lst(*f32(f, h), 1.0), gst(*f32(f, h)), **TOL)


def test_mixup_matches_numpy():
    z, cands, lam = RNG.normal(size=(5, 4)), RNG.normal(size=(9, 4)), RNG.uniform(0.5, 1, 5)
    want = [np_mixup(z[b], cands, lam[b]) for b in range(5)]
    np.testing.assert_allclose(mixup(*f32(z, cands, lam)), want, **TOL)
    want = [np_mixup(z[b], cands, 0.7) for b in range(5)]
    np.testing.assert_allclose(mixup(*f32(z, cands), 0.7), want, **TOL)


@pytest.mark.parametrize("include_positive", [False, True])
def test_soft_contrastive_loss_matches_numpy(include_positive):
    q, p, negs = RNG.normal(size=(4, 6)), RNG.normal(size=(4, 6)), RNG.normal(size=(7, 6))
    mask = RNG.uniform(size=(4, 7)) < 0.6
    mask[:, 0] = True
    want = [np_eq9(q[b], p[b], negs[mask[b]], 0.5, include_positive) for b in range(4)]
    got = soft_contrastive_loss(*f32(q, p, negs), mask, 0.5, include_positive)
    np.testing.assert_allclose(got, want, **TOL)
    per_query = np.broadcast_to(negs, (4, 7, 6))     # (B, K, C) negatives
    got = soft_contrastive_loss(*f32(q, p, per_query), mask, 0.5, include_positive)
    np.testing.assert_allclose(got, want, **TOL)
    # stable where exp overflows in float32
    assert np.isfinite(soft_contrastive_loss(*f32(q, p, negs), mask, 1e-3)).all()


def test_include_positive_is_infonce():
    q, p, negs = f32(RNG.normal(size=(4, 6)), RNG.normal(size=(4, 6)), RNG.normal(size=(7, 6)))
    got = soft_contrastive_loss(q, p, negs, jnp.ones((4, 7), bool), 0.2, include_positive=True)
    np.testing.assert_allclose(jnp.mean(got), infonce_loss(q, p, negs, 0.2), **TOL)


# ------------------------------------------------------------- the whole loss

SWITCHES = [
    SoCLSettings(),
    SoCLSettings(use_lst=False),
    SoCLSettings(use_mix=False),
    SoCLSettings(use_sns=False),
    SoCLSettings(normalize=False, tau=20.0, include_positive=True, theta_b=0.6),
    SoCLSettings(symmetric=False),
    SoCLSettings(mix_scope="pair"),
    SoCLSettings(symmetric=False, mix_scope="pair", include_positive=True, b_p=0.3),
]


def socl_inputs(n=3, hw=(4, 4), c=6):
    fi, fj = RNG.normal(size=(2, n, *hw, c))
    hi, hj = top_maps(2, n, hw[0] * hw[1])
    return fi, fj, hi, hj


@pytest.mark.parametrize("settings", SWITCHES)
def test_socl_loss_matches_numpy(settings):
    fi, fj, hi, hj = socl_inputs()
    key = jax.random.key(7)
    lam, theta_p = socl_draws(key, 3, settings)
    want = np_socl(fi.reshape(3, 16, 6), fj.reshape(3, 16, 6), hi, hj,
                   np.asarray(lam, np.float64), np.asarray(theta_p, np.float64), settings)
    loss, _ = socl_loss(*f32(fi, fj), *f32(hi, hj), key, settings)
    np.testing.assert_allclose(loss, want, **TOL)
    again, _ = socl_loss_with_draws(*f32(fi, fj, hi, hj), lam, theta_p, settings)
    np.testing.assert_array_equal(loss, again)


def test_draws_use_named_purposes_and_their_ranges():
    from ebm_jax.train.stages import stable_hash

    assert purpose_id(MIXUP_PURPOSE) == stable_hash(MIXUP_PURPOSE)
    assert purpose_id(LST_PURPOSE) == stable_hash(LST_PURPOSE)
    key = jax.random.key(3)
    lam, theta_p = socl_draws(key, 50, SoCLSettings(b_p=0.6, mix_range=(0.5, 1.0)))
    np.testing.assert_array_equal(lam, jax.random.uniform(
        jax.random.fold_in(key, stable_hash(MIXUP_PURPOSE)), (100,), minval=0.5, maxval=1.0))
    assert lam.shape == theta_p.shape == (100,)
    assert np.all((lam >= 0.5) & (lam < 1)) and np.all((theta_p >= 0.6) & (theta_p < 1))
    other, _ = socl_draws(jax.random.key(4), 50)
    assert not np.allclose(lam, other)


@pytest.mark.parametrize("settings, count", [
    (SoCLSettings(), 8 * 4 - 2),
    (SoCLSettings(use_mix=False), 6 * 4 - 2),
    (SoCLSettings(use_sns=False), 2 * 4 - 2),
    (SoCLSettings(use_sns=False, use_mix=False), 2 * 4 - 2),
])
def test_negative_counts(settings, count):
    fi, fj, hi, hj = f32(*socl_inputs(n=4))
    _, metrics = socl_loss(fi, fj, hi, hj, jax.random.key(0), settings)
    assert float(metrics["num_negatives"]) == count


@pytest.mark.parametrize("symmetric", [False, True])  # eq. 10 as printed (default), or both
def test_metrics_by_hand(symmetric):
    fi, fj, hi, hj = socl_inputs()
    s = SoCLSettings(use_sns=False, use_lst=False, symmetric=symmetric)
    _, m = socl_loss(*f32(fi, fj, hi, hj), jax.random.key(0), s)
    zi = [np_unit(np_gst(fi[v].reshape(16, 6), hi[v])) for v in range(3)]
    zj = [np_unit(np_gst(fj[v].reshape(16, 6), hj[v])) for v in range(3)]
    pos, hard = [], []
    for q, p in ((zi, zj), (zj, zi))[:2 if symmetric else 1]:
        for v in range(3):
            pos.append(q[v] @ p[v])
            hard.append(max(q[v] @ z[w] for z in (zi, zj) for w in range(3) if w != v))
    np.testing.assert_allclose(m["positive_similarity"], np.mean(pos), **TOL)
    np.testing.assert_allclose(m["hardest_negative_similarity"], np.mean(hard), **TOL)
    np.testing.assert_allclose(m["accuracy"], np.mean(np.array(pos) > np.array(hard)))


@pytest.mark.parametrize("theta_b", [0.8, 1.0])
def test_gradients_are_finite(theta_b):
    fi, fj, hi, hj = f32(*socl_inputs())
    s = SoCLSettings(theta_b=theta_b)
    grads = jax.grad(lambda a, b: socl_loss(a, b, hi, hj, jax.random.key(1), s)[0],
                     argnums=(0, 1))(fi, fj)
    for g in grads:
        assert np.isfinite(g).all() and np.abs(g).sum() > 0


def test_jit_matches_eager():
    fi, fj, hi, hj = f32(*socl_inputs())
    key = jax.random.key(2)
    eager = socl_loss(fi, fj, hi, hj, key)
    jitted = jax.jit(socl_loss, static_argnames="settings")(fi, fj, hi, hj, key)
    np.testing.assert_allclose(jitted[0], eager[0], **TOL)
    for name in eager[1]:
        np.testing.assert_allclose(jitted[1][name], eager[1][name], **TOL)
    jitted_mask = jax.jit(top_mass_mask)(hi, jnp.float32(0.8))
    np.testing.assert_array_equal(jitted_mask, top_mass_mask(hi, 0.8))


# ------------------------------------------------------------- bad input


@pytest.mark.parametrize("field, value", [
    ("tau", 0.0), ("tau", -1.0), ("theta_b", 0.0), ("theta_b", 1.5), ("b_p", 0.0),
    ("b_p", 1.2), ("mix_range", (0.3, 0.9)), ("mix_range", (0.9, 0.6)),
    ("mix_range", (0.5, 1.1)), ("mix_scope", "video"),
])
def test_settings_errors_name_the_field(field, value):
    with pytest.raises(ValueError, match=f"SoCLSettings.{field}"):
        SoCLSettings(**{field: value})
    assert dataclasses.replace(SoCLSettings(), theta_b=1.0).theta_b == 1.0


def test_errors_name_the_argument():
    fi, fj, hi, hj = f32(*socl_inputs())
    z = jnp.zeros((3, 6))
    cases = [
        ("theta", lambda: top_mass_mask(hi, 0.0)),
        ("theta", lambda: top_mass_mask(hi, 1.01)),
        ("theta", lambda: top_mass_mask(hi, jnp.array([0.5, 0.5]))),
        ("theta_b", lambda: sns(fi, hi, z, 2.0)),
        ("theta_p", lambda: lst(fi, hi, -0.1)),
        ("h", lambda: gst(fi, -hi)),
        ("h", lambda: gst(fi, 2 * hi)),
        ("h", lambda: gst(fi, hi[:, :5])),
        ("h_j", lambda: socl_loss(fi, fj, hi, 0.5 * hj, jax.random.key(0))),
        ("features_i", lambda: socl_loss(fi[:1], fj[:1], hi[:1], hj[:1], jax.random.key(0))),
        ("features_i", lambda: socl_loss(fi, fj[:2], hi, hj, jax.random.key(0))),
        ("tau", lambda: soft_contrastive_loss(z, z, z, jnp.ones((3, 3), bool), 0.0)),
        ("neg_mask", lambda: soft_contrastive_loss(z, z, z, jnp.zeros((3, 3), bool), 0.5)),
        ("candidates", lambda: mixup(z, z[:1], 0.7)),
    ]
    for name, call in cases:
        with pytest.raises(ValueError, match=rf"\b{re.escape(name)}\b"):
            call()
