import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ebm_jax.energy import gradient_ascent, make_predictor


def quad(params, x, y):
    # f = -sum(c_k (y_k - x_k)^2): maximum at y = x
    return -jnp.sum(params * (y - x) ** 2)


def test_plain_ascent_matches_numpy_iteration():
    c = jnp.array([1.0, 4.0])
    x, y0 = jnp.array([0.5, -0.2]), jnp.array([2.0, 1.0])
    lam = np.array([0.1, 0.05])
    y, f, scale = gradient_ascent(lambda xx, yy: quad(c, xx, yy), x, y0, num_steps=7,
                                  step_length=lam)
    ref = np.asarray(y0, np.float64)
    for _ in range(7):
        ref = ref + lam * (-2 * np.asarray(c) * (ref - np.asarray(x)))
    np.testing.assert_allclose(y, ref, rtol=1e-5)
    np.testing.assert_allclose(f, -np.sum(np.asarray(c) * (ref - np.asarray(x)) ** 2), rtol=1e-5)
    assert float(scale) == 1.0


def test_refinement_never_lowers_f_and_halves_rejected_steps():
    c = jnp.array([1.0])
    x = jnp.zeros(1)
    # step 1.5 overshoots the maximum of -y^2 (y -> y - 3y = -2y): f drops, step undone
    y, f, scale = gradient_ascent(lambda xx, yy: quad(c, xx, yy), x, jnp.array([1.0]),
                                  num_steps=1, step_length=1.5, reject_decreasing=True)
    np.testing.assert_allclose(y, [1.0])
    np.testing.assert_allclose(scale, 0.5)
    # second step with lambda 0.75: y -> y - 1.5 y = -0.5: accepted
    y, f, scale = gradient_ascent(lambda xx, yy: quad(c, xx, yy), x, jnp.array([1.0]),
                                  num_steps=2, step_length=1.5, reject_decreasing=True)
    np.testing.assert_allclose(y, [-0.5])
    np.testing.assert_allclose(scale, 0.5)


def test_batched_predictor_monotone_and_traces_once():
    c = jnp.array([1.0, 0.3])
    def raw(p, x, y):
        return quad(p, x, y) + 0.3 * jnp.sum(jnp.sin(5 * y))

    # two call sites per trace: the initial value_and_grad and the scan body
    energy = chex.assert_max_traces(raw, n=2)
    predict = make_predictor(energy, num_steps=10, step_length=(0.9, 2.0),
                             reject_decreasing=True)
    xs = jax.random.normal(jax.random.key(0), (16, 2))
    ys0 = jax.random.normal(jax.random.key(1), (16, 2)) * 2
    f0 = jax.vmap(lambda x, y: raw(c, x, y))(xs, ys0)
    for _ in range(3):
        ys, fs, scales = predict(c, xs, ys0)
    assert np.all(np.asarray(fs) >= np.asarray(f0) - 1e-6)
    assert np.any(np.asarray(scales) < 1.0)  # some steps were rejected and halved
    # each example agrees with the single-example refinement
    y1, f1, _ = gradient_ascent(lambda xx, yy: raw(c, xx, yy), xs[3], ys0[3], num_steps=10,
                                step_length=(0.9, 2.0), reject_decreasing=True)
    np.testing.assert_allclose(ys[3], y1, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("step", [0.0, -1.0, (0.1, float("nan")), ()])
def test_bad_step_length(step):
    with pytest.raises(ValueError, match="step_length"):
        make_predictor(quad, num_steps=3, step_length=step)


def test_bad_num_steps_and_decay():
    with pytest.raises(ValueError, match="num_steps"):
        make_predictor(quad, num_steps=-1, step_length=0.1)
    with pytest.raises(ValueError, match="decay"):
        make_predictor(quad, num_steps=1, step_length=0.1, decay=1.0)


def test_step_length_dimension_mismatch():
    predict = make_predictor(quad, num_steps=1, step_length=(0.1, 0.2, 0.3))
    with pytest.raises(ValueError, match="step_length"):
        predict(jnp.ones(2), jnp.zeros((4, 2)), jnp.zeros((4, 2)))
