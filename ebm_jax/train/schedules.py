"""Learning-rate schedules of the experiments (optax schedules)."""

from __future__ import annotations

import optax


def warmup_step_decay(learning_rate: float, num_steps: int,
                      warmup_steps: int) -> optax.Schedule:
    """The detection head's schedule (the paper's sec. 4.2: SGD for 60k iterations,
    x0.1 at 40k and 50k): a linear warm-up from lr/3 over `warmup_steps`, then the
    learning rate x0.1 at 2/3 and again at 5/6 of `num_steps`."""
    n, lr = int(num_steps), float(learning_rate)
    warm = min(int(warmup_steps), max(n - 1, 1))
    # join_schedules hands the second schedule the steps since the warm-up ended
    steps = optax.piecewise_constant_schedule(
        lr, {max(int(n * 2 / 3), warm + 1) - warm: 0.1,
             max(int(n * 5 / 6), warm + 2) - warm: 0.1})
    ramp = optax.linear_schedule(lr / 3, lr, warm)
    return optax.join_schedules([ramp, steps], [warm])


def warmup_cosine(learning_rate: float, num_steps: int) -> optax.Schedule:
    """A linear warm-up from lr/10 over the first 5% of the steps, then cosine decay
    (the detection backbone's schedule)."""
    lr = float(learning_rate)
    return optax.warmup_cosine_decay_schedule(lr / 10, lr, max(1, int(num_steps) // 20),
                                              int(num_steps))
