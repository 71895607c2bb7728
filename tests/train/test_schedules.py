"""The learning-rate schedules of the experiments."""

import numpy as np

from ebm_jax.train.schedules import warmup_cosine, warmup_step_decay


def test_head_schedule_warms_up_and_steps():
    lr = warmup_step_decay(0.3, 60, 6)
    np.testing.assert_allclose(float(lr(0)), 0.1, rtol=1e-6)
    np.testing.assert_allclose(float(lr(3)), 0.2, rtol=1e-6)
    np.testing.assert_allclose(float(lr(6)), 0.3, rtol=1e-6)
    np.testing.assert_allclose(float(lr(39)), 0.3, rtol=1e-6)
    np.testing.assert_allclose(float(lr(41)), 0.03, rtol=1e-5)
    np.testing.assert_allclose(float(lr(51)), 0.003, rtol=1e-5)


def test_the_papers_head_schedule():
    """The paper's sec. 4.2: 60k iterations, lr 1e-3, x0.1 at 40k and 50k."""
    lr = warmup_step_decay(1e-3, 60000, 500)
    np.testing.assert_allclose([float(lr(s)) for s in (0, 500, 39999, 40000, 50000)],
                               [1e-3 / 3, 1e-3, 1e-3, 1e-4, 1e-5], rtol=1e-5)


def test_short_schedules_stay_ordered():
    lr = warmup_step_decay(0.3, 2, 1)  # the tiny variants: 2 steps
    assert np.isfinite(float(lr(0))) and np.isfinite(float(lr(1)))
    cos = warmup_cosine(1e-2, 100)
    np.testing.assert_allclose(float(cos(0)), 1e-3, rtol=1e-6)
    np.testing.assert_allclose(float(cos(5)), 1e-2, rtol=1e-6)
    assert float(cos(100)) < 1e-4
