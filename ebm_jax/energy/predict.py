"""Prediction by gradient ascent on f (Gustafsson et al. 2020, sec. 2.2).

Starting at an initial estimate y_hat, run T steps of y <- y + lambda * grad_y f(x, y)
with per-dimension step lengths lambda (K,). With `reject_decreasing=True` (the
refinement used for boxes), a step that lowers f is undone and that example's step
lengths are multiplied by `decay` (0.5 halves them), so f never decreases.

`gradient_ascent` refines one example; `make_predictor` returns the jitted batch form,
vmapped over examples, for an energy that takes its parameters first.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from ebm_jax import checks

Energy = Callable[[jax.Array, jax.Array], jax.Array]


def _check(num_steps, step_length, decay):
    num_steps = checks.int_at_least("num_steps", num_steps, 0)
    step_length = checks.positive_steps("step_length", step_length)
    if not 0 < decay < 1:
        raise ValueError(f"decay must be in (0, 1), got {decay!r}")
    return num_steps, step_length


def _ascent(energy: Energy, x, y, lam, num_steps, reject_decreasing, decay):
    """Core loop; one `value_and_grad` per step (a rejected step keeps the old point,
    value and gradient, an accepted one carries its gradient to the next step)."""
    value_and_grad = jax.value_and_grad(lambda yy: energy(x, yy))
    f0, g0 = value_and_grad(y)

    def step(carry, _):
        y, f, g, scale = carry
        y_new = y + scale * lam * g
        f_new, g_new = value_and_grad(y_new)
        if not reject_decreasing:
            return (y_new, f_new, g_new, scale), None
        accept = f_new >= f
        return (
            jnp.where(accept, y_new, y),
            jnp.where(accept, f_new, f),
            jnp.where(accept, g_new, g),
            jnp.where(accept, scale, scale * decay),
        ), None

    init = (y, f0, g0, jnp.ones((), y.dtype))
    (y, f, _, scale), _ = jax.lax.scan(step, init, None, length=num_steps)
    return y, f, scale


def gradient_ascent(
    energy: Energy,
    x,
    y_init,
    *,
    num_steps: int,
    step_length,
    reject_decreasing: bool = False,
    decay: float = 0.5,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """T steps of gradient ascent on f(x, .) from y_init (K,). `step_length` (1 or K
    entries) is checked (finite, > 0) where concrete; a traced one is the caller's to
    check.

    Returns (y, f(x, y), step_scale): step_scale is the factor the step lengths were
    multiplied by (decay ** number of rejected steps; 1 without rejection).
    """
    if isinstance(step_length, jax.core.Tracer):  # traced (e.g. candidates vmapped):
        num_steps, _ = _check(num_steps, 1.0, decay)  # positive where it was made
        step_length = jnp.atleast_1d(step_length)
    else:
        num_steps, step_length = _check(num_steps, step_length, decay)
    y = jnp.asarray(y_init)
    if y.ndim != 1:
        raise ValueError(f"y_init must have shape (K,), got {y.shape}")
    if step_length.shape[0] not in (1, y.shape[0]):
        raise ValueError(
            f"step_length must have 1 or K={y.shape[0]} entries, got {step_length.shape[0]}"
        )
    lam = jnp.broadcast_to(jnp.asarray(step_length, y.dtype), y.shape)
    return _ascent(energy, x, y, lam, num_steps, reject_decreasing, decay)


def make_predictor(
    energy: Callable,
    *,
    num_steps: int,
    step_length,
    reject_decreasing: bool = False,
    decay: float = 0.5,
) -> Callable:
    """Jitted batch prediction for `energy(params, x, y) -> scalar`.

    Returns `predict(params, xs, ys_init) -> (ys, fs, step_scales)`, vmapped over the
    examples (xs (n, ...), ys_init (n, K)); it traces once per input shape.
    """
    num_steps, step_length = _check(num_steps, step_length, decay)

    @jax.jit
    def predict(params, xs, ys_init):
        ys_init = jnp.asarray(ys_init)
        if ys_init.ndim != 2:
            raise ValueError(f"ys_init must have shape (n, K), got {ys_init.shape}")
        k = ys_init.shape[1]
        if step_length.shape[0] not in (1, k):
            raise ValueError(
                f"step_length must have 1 or K={k} entries, got {step_length.shape[0]}"
            )
        lam = jnp.broadcast_to(jnp.asarray(step_length, ys_init.dtype), (k,))

        def one(x, y):
            return _ascent(
                lambda xx, yy: energy(params, xx, yy), x, y, lam, num_steps,
                reject_decreasing, decay,
            )

        return jax.vmap(one)(xs, ys_init)

    return predict
