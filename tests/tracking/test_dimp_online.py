"""DiMP's online target model (`ebm_jax.tracking.dimp_online`): the sample memory, the
sub-cell localisation with its not-found and distractor checks, and the model update,
which follows a target whose appearance drifts where a fixed first-frame model locks
onto a look-alike of the target's first appearance."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ebm_jax.tracking import dimp
from ebm_jax.tracking import dimp_online as online


def test_the_memory_keeps_weights_summing_to_one_and_replaces_the_least_weighted():
    feats = jnp.ones((2, 3, 3, 1))
    boxes = jnp.zeros((2, 4))
    mem = online.init_memory(feats, boxes, capacity=4)
    np.testing.assert_allclose(mem.weights, [0.5, 0.5, 0, 0])
    mem = online.add_sample(mem, 2 * jnp.ones((3, 3, 1)), jnp.ones(4), 0.2)
    np.testing.assert_allclose(mem.weights, [0.4, 0.4, 0.2, 0], rtol=1e-6)
    mem = online.add_sample(mem, 3 * jnp.ones((3, 3, 1)), jnp.ones(4), 0.2)
    np.testing.assert_allclose(mem.weights, [0.32, 0.32, 0.16, 0.2], rtol=1e-6)
    assert bool(mem.filled.all())
    # full: the least weight outside the protected first slot is slot 2 (0.16)
    mem = online.add_sample(mem, 4 * jnp.ones((3, 3, 1)), 4 * jnp.ones(4), 0.2)
    # the others scaled by 0.8, the replaced sample's weight gone, the sum back to 1
    np.testing.assert_allclose(mem.weights, np.asarray([0.256, 0.256, 0.2, 0.16]) / 0.872,
                               rtol=1e-5)
    assert float(mem.features[2, 0, 0, 0]) == 4.0 and float(mem.boxes[2, 0]) == 4.0
    np.testing.assert_allclose(float(jnp.sum(mem.weights)), 1.0, rtol=1e-6)
    with pytest.raises(ValueError, match="capacity must be at least the 2 initial"):
        online.init_memory(feats, boxes, capacity=1)


def test_localize_finds_a_sub_cell_peak_and_flags_weak_and_double_peaks():
    yy, xx = jnp.mgrid[0:12, 0:14]

    def bump(y, x, a=1.0):
        return a * jnp.exp(-((yy - y) ** 2 + (xx - x) ** 2) / 2.0)

    loc = online.localize(bump(4.3, 8.7))
    # a parabola through three samples of a Gaussian: within 0.1 cell of its centre
    np.testing.assert_allclose(loc.center_yx, [4.3, 8.7], atol=0.1)
    assert bool(loc.found) and not bool(loc.hard_negative)
    assert not bool(online.localize(bump(4.0, 8.0, 0.2)).found)
    double = online.localize(bump(3.0, 3.0) + bump(8.0, 10.0, 0.9))
    assert bool(double.found) and bool(double.hard_negative)
    assert tuple(np.round(np.asarray(double.center_yx))) == (3.0, 3.0)


def _frames(key, n, drift_until=20, distractor_from=25, hw=12, c=8):
    """Feature maps of a target block whose appearance turns from a0 to a1 over the
    first `drift_until` frames, moving one cell a frame along a loop, and from
    `distractor_from` on a still look-alike with the target's first appearance a0."""
    k0, k1, kn = jax.random.split(key, 3)
    a0 = jax.random.normal(k0, (c,))
    a1 = jax.random.normal(k1, (c,))
    a0, a1 = a0 / jnp.linalg.norm(a0) * 2.5, a1 / jnp.linalg.norm(a1) * 2.5
    noise = 0.4 * jax.random.normal(kn, (n, hw, hw, c))
    path = [(3 + (t % 6), 3 + ((t // 2) % 5)) for t in range(n)]  # (y, x), in [3, 8]
    frames, centers = [], []
    for t in range(n):
        mix = min(t / drift_until, 1.0)
        a = (1 - mix) * a0 + mix * a1
        y, x = path[t]
        f = noise[t].at[y:y + 2, x:x + 2].add(a)
        if t >= distractor_from:
            f = f.at[y - 3 if y >= 6 else y + 3:(y - 3 if y >= 6 else y + 3) + 2,
                     1:3].add(a0)
        frames.append(f)
        centers.append((x + 0.5, y + 0.5))  # xy in cells: the block's centre
    return jnp.stack(frames), jnp.asarray(centers)


def _track(params, settings, osettings, frames, centers, update: bool):
    fs = settings.filter_size
    box0 = jnp.concatenate([centers[0] - 1.5, centers[0] + 1.5])[None]
    memory = online.init_memory(frames[:1], box0, osettings.capacity)
    filt, _, _ = dimp.predict_filter(params, settings, memory.features[:1], box0,
                                     num_iter=osettings.init_iter)
    score = jax.jit(lambda f, x: dimp.apply_filter(x[None], f)[0])
    refine = jax.jit(lambda f, m, k: online.refine_filter(params, settings, f, m, k),
                     static_argnums=2)
    add = jax.jit(online.add_sample, static_argnums=4)
    errors = []
    for t in range(1, frames.shape[0]):
        loc = online.localize(score(filt, frames[t]), osettings)
        est_xy = loc.center_yx[::-1] - ((fs + 1) % 2) / 2.0  # back to cells
        errors.append(float(jnp.linalg.norm(est_xy - centers[t])))
        if update and bool(loc.found):
            box = jnp.concatenate([est_xy - 1.5, est_xy + 1.5])
            hard = bool(loc.hard_negative)
            lr = osettings.hard_negative_learning_rate if hard else osettings.learning_rate
            memory = add(memory, frames[t], box, lr, osettings.keep_initial)
            if hard or t % osettings.update_every == 0:
                n = osettings.hard_negative_iter if hard else osettings.update_iter
                filt = refine(filt, memory, n)
    return np.asarray(errors)


def test_the_online_update_follows_a_drifting_target_past_a_look_alike():
    settings = dimp.PredictorSettings(filter_size=3)
    params = dimp.init_predictor_params(settings)
    osettings = online.OnlineSettings(learning_rate=0.15, hard_negative_learning_rate=0.3,
                                      update_every=2, update_iter=3)
    frames, centers = _frames(jax.random.key(0), 40)
    fixed = _track(params, settings, osettings, frames, centers, update=False)
    tracked = _track(params, settings, osettings, frames, centers, update=True)
    late = slice(26, None)  # once the look-alike is there
    assert np.median(fixed[late]) > 2.0  # the first-frame model takes the look-alike
    assert np.max(tracked[late]) < 1.0  # the updated model stays on the target


@pytest.mark.parametrize("change, says", [
    (dict(capacity=0), "capacity must be an integer >= 1, got 0"),
    (dict(update_iter=-1), "update_iter must be an integer >= 0, got -1"),
    (dict(learning_rate=1.0), r"learning_rate must be in \(0, 1\), got 1.0"),
    (dict(not_found_threshold=0.0), r"not_found_threshold must be in \(0, 1\)"),
    (dict(keep_initial=50), "keep_initial must be below capacity 50"),
    (dict(neighborhood=0.0), "neighborhood must be > 0 cells"),
])
def test_bad_online_settings_are_one_line(change, says):
    with pytest.raises(ValueError, match=says):
        online.OnlineSettings(**change).check()
