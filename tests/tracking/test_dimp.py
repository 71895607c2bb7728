"""DiMP's model predictor (`ebm_jax.tracking.dimp`): the Gauss-Newton step, convergence
to the closed-form filter, the learned residual's initial values, and gradients through
the unrolled optimizer.

The exactness tests run in float64 (`jax.enable_x64`), where the only error is the
optimiser's own: their tolerances follow from the problem's conditioning, not from
float32 rounding.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ebm_jax.tracking import dimp

SETTINGS = dimp.PredictorSettings(filter_size=2, num_iter=3)


def _problem(key, n=3, hw=5, c=2, filter_size=2):
    """Small features, a filter, and residual maps with the mask all ones (the loss is
    then quadratic in the filter)."""
    k1, k2, k3, k4 = jax.random.split(key, 4)
    feats = jax.random.normal(k1, (n, hw, hw, c), jnp.float64)
    filt = 0.1 * jax.random.normal(k2, (filter_size, filter_size, c), jnp.float64)
    out = dimp.score_size((hw, hw), filter_size)
    label = jax.random.uniform(k3, (n, *out), jnp.float64)
    weight = 0.5 + jax.random.uniform(k4, (n, *out), jnp.float64)
    maps = dimp.ResidualMaps(label=label, mask=jnp.ones_like(label), weight=weight)
    return feats, filt, maps


def test_the_gauss_newton_step_is_the_exact_line_minimiser_where_the_loss_is_quadratic():
    """With every m_c = 1 the loss is quadratic in f, and alpha = |g|^2 / (|Jg|^2 +
    lambda^2 |g|^2) minimises L(f - alpha g) exactly (DiMP eq. 5-6)."""
    with jax.enable_x64(True):
        feats, filt, maps = _problem(jax.random.key(0))
        reg = jnp.asarray(0.05)
        loss = lambda f: dimp.discriminative_loss(f, feats, maps, reg)  # noqa: E731
        g = 0.5 * jax.grad(loss)(filt)  # the gradient of L / 2, as the optimizer's
        f1, iterates, losses = dimp.steepest_descent(filt, feats, maps, reg, 1.0, 1)
        alpha = float(jnp.vdot((filt - f1).ravel(), g.ravel()) / jnp.vdot(g.ravel(), g.ravel()))
        # L(f - a g) is a parabola in a: its minimiser from three exact evaluations
        l0, l1, l2 = (float(loss(filt - a * g)) for a in (0.0, 1.0, 2.0))
        a_star = (l0 - l1) / (l0 - 2 * l1 + l2) + 0.5
        assert alpha == pytest.approx(a_star, rel=1e-9)
        assert float(losses[0]) == pytest.approx(l0, rel=1e-12)
        assert float(losses[1]) <= l0 and np.allclose(iterates[0], filt)
        # and no other step length along g does better
        for a in (0.9 * alpha, 1.1 * alpha):
            assert float(loss(filt - a * g)) > float(losses[1])


def test_many_iterations_reach_the_closed_form_ridge_regression_filter():
    """Steepest descent on the quadratic loss converges to
    f* = (A^T W A + lambda^2 I)^-1 A^T W y, A the filter-to-scores map, W = v^2 / N."""
    with jax.enable_x64(True):
        feats, filt, maps = _problem(jax.random.key(1))
        reg = jnp.asarray(0.5)  # well conditioned: a few hundred steps suffice
        n = feats.shape[0]
        a = jax.jacfwd(lambda f: dimp.apply_filter(feats, f))(filt).reshape(-1, filt.size)
        w = (maps.weight ** 2 / n).ravel()
        lhs = a.T @ (w[:, None] * a) + reg * jnp.eye(filt.size)
        f_star = jnp.linalg.solve(lhs, a.T @ (w * maps.label.ravel())).reshape(filt.shape)
        final, _, losses = dimp.steepest_descent(filt, feats, maps, reg, 1.0, 400)
        # steepest descent's error shrinks by (kappa - 1) / (kappa + 1) per step at worst
        eig = jnp.linalg.eigvalsh(lhs)
        rate = float((eig[-1] - eig[0]) / (eig[-1] + eig[0]))
        bound = rate ** 400 * float(jnp.linalg.norm(filt - f_star)) * float(
            jnp.sqrt(eig[-1] / eig[0])) + 1e-12
        assert float(jnp.linalg.norm(final - f_star)) <= bound
        assert bool(jnp.all(jnp.diff(losses) <= 1e-12))  # monotone


def test_the_residual_functions_start_as_dimps_initial_loss():
    """At their initial weights the learned functions are DiMP's: at a basis peak
    (d = k delta) the label is the Gaussian minus its smallest sample, the mask
    sigmoid(3 tanh(2 - d)), the spatial weight 1 everywhere; between peaks they are
    interpolated linearly, and the last function holds its value beyond."""
    s = dimp.PredictorSettings()
    params = dimp.init_predictor_params(s)
    basis = dimp.distance_basis(jnp.asarray([0.0, 0.0]), (1, 12), s.num_bins,
                                s.bin_displacement)  # d = 0, 1, ..., 11 along a row
    maps = dimp.residual_maps(params, basis)
    d = np.arange(12.0)
    d_bins = np.arange(s.num_bins) * s.bin_displacement
    gauss = np.exp(-0.5 * (d_bins / s.init_gauss_sigma) ** 2)
    k = np.minimum(d / s.bin_displacement, s.num_bins - 1).astype(int)  # on a peak
    np.testing.assert_allclose(maps.label[0], gauss[k] - gauss.min(), atol=1e-6)
    np.testing.assert_allclose(maps.mask[0], 1 / (1 + np.exp(-3 * np.tanh(2 - d_bins[k]))),
                               atol=1e-6)
    np.testing.assert_allclose(maps.weight[0], 1.0, atol=1e-6)
    np.testing.assert_allclose(basis.sum(-1), 1.0, atol=1e-6)  # a partition of unity
    # between two peaks: the linear interpolation of the two
    mid = dimp.distance_basis(jnp.asarray([0.0, -0.25]), (1, 1), s.num_bins,
                              s.bin_displacement)[0, 0]
    np.testing.assert_allclose(mid[:2], [0.5, 0.5], atol=1e-6)
    # and the loss they give is DiMP's plain initial one: v = 1, r = m s + (1-m) relu(s) - y
    feats = jax.random.normal(jax.random.key(2), (2, 6, 6, 3))
    filt = jax.random.normal(jax.random.key(3), (4, 4, 3))
    centers = jnp.asarray([[3.0, 2.0], [2.5, 3.5]])
    full = jax.vmap(lambda c: dimp.residual_maps(params, dimp.distance_basis(
        c, (7, 7), s.num_bins, s.bin_displacement)))(centers)
    got = dimp.discriminative_loss(filt, feats, full, 0.01)
    scores = dimp.apply_filter(feats, filt)
    act = full.mask * scores + (1 - full.mask) * jnp.maximum(scores, 0)
    want = jnp.sum((act - full.label) ** 2) / 2 + 0.01 * jnp.sum(filt ** 2)
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_gradients_through_the_unrolled_optimizer_match_finite_differences():
    """d(test loss)/d(every learned scalar and the features), through the initializer and
    three Gauss-Newton iterations, against central differences in float64."""
    with jax.enable_x64(True):
        params = jax.tree.map(lambda x: jnp.asarray(x, jnp.float64),
                              dimp.init_predictor_params(SETTINGS))
        key = jax.random.key(4)
        feats = jax.random.normal(key, (3, 6, 6, 2), jnp.float64)
        boxes = jnp.asarray([[1.5, 1.5, 5.5, 4.5], [2.0, 1.0, 6.0, 5.0],
                             [1.0, 2.0, 5.0, 6.0]])  # cells
        test_feat = jax.random.normal(jax.random.key(5), (1, 6, 6, 2), jnp.float64)
        label = dimp.gaussian_label(jnp.asarray([3.0, 3.0]), (7, 7), 1.0)

        def test_loss(p, x):
            _, iterates, _ = dimp.predict_filter(p, SETTINGS, x, boxes)
            weights = dimp.iterate_weights(SETTINGS.num_iter)
            per = jax.vmap(lambda f: dimp.classification_loss(
                dimp.apply_filter(test_feat, f)[0], label))(iterates)
            return jnp.sum(weights * per)

        test_loss = jax.jit(test_loss)
        g_params, g_feats = jax.jit(jax.grad(test_loss, argnums=(0, 1)))(params, feats)
        h = 1e-6
        for name in ("log_step_length", "filter_reg"):
            up = dict(params, **{name: params[name] + h})
            down = dict(params, **{name: params[name] - h})
            fd = (test_loss(up, feats) - test_loss(down, feats)) / (2 * h)
            assert float(g_params[name]) == pytest.approx(float(fd), rel=1e-5, abs=1e-9)
        for name in ("label", "mask", "spatial"):
            e = jnp.zeros_like(params[name]).at[1].set(h)
            fd = (test_loss(dict(params, **{name: params[name] + e}), feats)
                  - test_loss(dict(params, **{name: params[name] - e}), feats)) / (2 * h)
            assert float(g_params[name][1]) == pytest.approx(float(fd), rel=1e-5, abs=1e-9)
        e = jnp.zeros_like(feats).at[1, 2, 3, 0].set(h)
        fd = (test_loss(params, feats + e) - test_loss(params, feats - e)) / (2 * h)
        assert float(g_feats[1, 2, 3, 0]) == pytest.approx(float(fd), rel=1e-5, abs=1e-9)


def test_the_predicted_filter_finds_the_target_it_was_given():
    """On features that mark the target with one channel, the predicted filter's scores
    peak at the target on a new frame, and the iterations lower the loss."""
    s = dimp.PredictorSettings(filter_size=3, num_iter=5)
    params = dimp.init_predictor_params(s)
    key = jax.random.key(6)
    feats = 0.3 * jax.random.normal(key, (3, 9, 9, 4))
    feats = feats.at[:, 4, 4, 0].add(3.0)  # the target at feature cell (4, 4)
    boxes = jnp.tile(dimp.to_cells(jnp.asarray([[28.0, 28.0, 44.0, 44.0]]), 8.0, 4.0),
                     (3, 1))  # centre at crop pixel 36 = 4 + 8 * 4: cell (4, 4)
    filt, _, losses = dimp.predict_filter(params, s, feats, boxes)
    assert float(losses[-1]) < float(losses[0])
    test = 0.3 * jax.random.normal(jax.random.key(7), (1, 9, 9, 4))
    test = test.at[0, 2, 6, 0].add(3.0)  # it moved
    scores = dimp.apply_filter(test, filt)[0]
    assert np.unravel_index(int(jnp.argmax(scores)), scores.shape) == (2, 6)


def test_the_predictor_vmaps_over_sequences_and_jits():
    s = dimp.PredictorSettings(filter_size=4, num_iter=2)
    params = dimp.init_predictor_params(s)
    feats = jax.random.normal(jax.random.key(8), (5, 3, 8, 8, 6))  # 5 sequences
    boxes = jnp.tile(jnp.asarray([[[1.0, 1.0, 5.0, 5.0]]]), (5, 3, 1))
    fn = jax.jit(jax.vmap(lambda x, b: dimp.predict_filter(params, s, x, b)))
    filt, iterates, losses = fn(feats, boxes)
    assert filt.shape == (5, 4, 4, 6) and iterates.shape == (5, 3, 4, 4, 6)
    assert losses.shape == (5, 3) and bool(jnp.all(jnp.isfinite(losses)))
    one = dimp.predict_filter(params, s, feats[2], boxes[2])[0]
    np.testing.assert_allclose(filt[2], one, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("change, says", [
    (dict(filter_size=0), "filter_size must be an integer >= 1, got 0"),
    (dict(num_iter=-1), "num_iter must be an integer >= 0, got -1"),
    (dict(num_bins=1), "num_bins must be an integer >= 2, got 1"),
    (dict(bin_displacement=0.0), "bin_displacement must be a finite number > 0, got 0.0"),
    (dict(init_filter_reg=float("nan")), "init_filter_reg must be a finite number > 0"),
])
def test_bad_settings_are_one_line_naming_the_setting(change, says):
    with pytest.raises(ValueError, match=says.replace("(", r"\(").replace(")", r"\)")):
        dimp.init_predictor_params(dimp.PredictorSettings(**change))


def test_a_filter_larger_than_the_feature_grid_is_refused():
    s = dimp.PredictorSettings(filter_size=5)
    with pytest.raises(ValueError, match="filter_size 5 must be at most the feature "
                       "grid's side 4"):
        dimp.predict_filter(dimp.init_predictor_params(s), s, jnp.zeros((2, 4, 4, 3)),
                            jnp.zeros((2, 4)))


def test_score_coordinates_follow_the_filter_size_convention():
    """An odd filter's score cell i is feature cell i; an even filter's score map is one
    cell larger, cell i at feature position i - 1/2 (pytracking's DiMP): the scores of a
    point under a uniform filter are centred at `score_center` of the point."""
    feats = jnp.zeros((1, 8, 8, 1)).at[0, 2, 5, 0].set(1.0)  # the point (x 5, y 2)
    for fs in (3, 4):
        scores = dimp.apply_filter(feats, jnp.ones((fs, fs, 1)))[0]
        assert scores.shape == dimp.score_size((8, 8), fs)
        rows, cols = np.nonzero(np.asarray(scores))
        np.testing.assert_allclose(dimp.score_center(jnp.asarray([5.0, 2.0]), fs),
                                   [rows.mean(), cols.mean()])


def test_iterate_weights_follow_dimps_split():
    np.testing.assert_allclose(dimp.iterate_weights(5), [1, 1, 1, 1, 1, 1])
    np.testing.assert_allclose(dimp.iterate_weights(3), [1, 2, 2, 1])
    np.testing.assert_allclose(dimp.iterate_weights(1), [1, 1])
    np.testing.assert_allclose(dimp.iterate_weights(0), [2])


def test_the_hinge_loss_ignores_negative_background_scores():
    label = jnp.asarray([[0.0, 0.5], [1.0, 0.01]])
    scores = jnp.asarray([[-3.0, 0.5], [0.0, 2.0]])
    # background (label <= 0.05): max(0, s) -> 0 and 2; target: s - z -> 0 and -1
    assert float(dimp.classification_loss(scores, label)) == pytest.approx((0 + 0 + 1 + 4) / 4)


@pytest.mark.parametrize("crop, stride, offset, cells, context", [
    (255, 8.0, 43.0, 22, 255 / 176),  # SiamFC's AlexNet conv5: valid convolutions
    (159, 8.0, 43.0, 10, 159 / 80),
    (288, 16.0, 7.5, 18, 1.0),  # a padded stride-16 level (DiMP's ResNet layer3)
])
def test_the_grid_and_the_crop_context_follow_the_levels_geometry(crop, stride, offset,
                                                                  cells, context):
    assert dimp.grid_cells(crop, stride, offset) == cells
    assert dimp.crop_context(crop, stride, offset) == pytest.approx(context)
    # the last cell's centre lies inside the crop, one more would not
    assert offset + (cells - 1) * stride <= crop - 1 - offset < offset + cells * stride


def test_a_crop_too_small_for_the_level_is_one_line():
    with pytest.raises(ValueError, match="crop_size 60 px gives no feature cell.*>= 87"):
        dimp.grid_cells(60, 8.0, 43.0)
