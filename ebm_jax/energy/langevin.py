"""Langevin dynamics chains (Gustafsson et al. 2020, eq. 9) for ML-MCMC.

    y_(l+1) = y_(l) + (alpha^2 / 2) grad_y f(x, y_(l)) + alpha eps_l,   eps_l ~ N(0, I)

The chains run inside `lax.scan`; the noise of step l comes from
`jax.random.fold_in(key, l)`, so a chain is reproducible step by step. The returned
samples carry no gradient (contrastive-divergence style, as in the paper).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from ebm_jax import checks


def keep_loop_parallel(y: jax.Array) -> jax.Array:
    """y, unchanged, tied to a sort of two of its elements.

    XLA's CPU backend compiles a while loop whose own byte count looks small (the count
    misses what the body touches) into one single-threaded kernel
    (`SmallWhileLoopHoistingPass`); for these chains that kernel runs about 10x slower
    than the loop of parallel kernels XLA emits otherwise. A sort is one of the
    operations such a kernel cannot hold, so a loop body that sorts stays a loop of
    kernels. The sort is of two elements and is added times 0, which changes no finite
    y (an infinite one becomes NaN, non-finite either way); other backends pay one tiny
    sort per step.
    """
    pair = jax.lax.stop_gradient(y.reshape(-1)[:2])
    return y + 0.0 * jnp.sort(pair)[0]


def langevin_chains(
    log_density: Callable[[jax.Array], jax.Array],
    y0: jax.Array,
    key: jax.Array,
    *,
    num_steps: int,
    step_size: float,
    batched: bool = False,
    parallel_loop: bool = False,
) -> jax.Array:
    """Runs one Langevin chain from each row of y0 (shape (M, K)); returns (M, K).

    Args:
      log_density: y (K,) -> scalar, the unnormalised log density f(x, .) of one
        example; with `batched=True`, ys (M, K) -> (M,), the log density of every row,
        row m depending on ys[m] only (its gradient is then that of the sum).
      y0: starting points, one chain per row.
      key: PRNG key; step l uses `fold_in(key, l)`.
      num_steps: L >= 1; an array (a value traced inside jit, a loss's run-time
        hyperparameter: one compiled program for every L) runs the chains in a
        `fori_loop` of that many steps, the same steps as the scan of a static L.
      step_size: alpha > 0; an array (a value traced inside jit, e.g. a loss's
        run-time hyperparameter) is used as it is, checked where it was set.
      batched: whether log_density scores all rows at once (see above).
      parallel_loop: tie every step to `keep_loop_parallel`, for chains whose
        per-step kernels are large (ML-MCMC with a `BatchedEnergy`); on few chains
        XLA's single small-loop kernel is the faster choice.
    """
    traced_steps = isinstance(num_steps, jax.Array)
    if not traced_steps:
        num_steps = checks.int_at_least("num_steps", num_steps, 1)
    alpha = (step_size if isinstance(step_size, jax.Array)
             else checks.positive("step_size", step_size))
    if batched:
        grad = jax.grad(lambda ys: jnp.sum(log_density(ys)))
    else:
        grad = jax.vmap(jax.grad(log_density))

    def step(y, i):
        eps = jax.random.normal(jax.random.fold_in(key, i), y.shape, y.dtype)
        y = y + (0.5 * alpha**2) * grad(y) + alpha * eps
        return (keep_loop_parallel(y) if parallel_loop else y), None

    if traced_steps:  # L at run time (a float carrier holds it exactly up to 2^24)
        trips = jnp.round(num_steps).astype(jnp.int32)
        y = jax.lax.fori_loop(0, trips, lambda i, y: step(y, i)[0], jnp.asarray(y0))
    else:
        y, _ = jax.lax.scan(step, jnp.asarray(y0), jnp.arange(num_steps))
    return jax.lax.stop_gradient(y)
