"""Exact trace of the Hessian of a scalar function, as score matching (eq. 13) needs.

The trace is sum_k e_k^T H e_k with H e_k a Hessian-vector product computed
forward-over-reverse (`jax.jvp` of `jax.grad`), vmapped over the K basis directions:
exact for any target dimension K at the cost of K Hessian-vector products. The
Hutchinson estimator is offered separately, for large K; it never replaces the exact
trace.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from ebm_jax import checks

ScalarFn = Callable[[jax.Array], jax.Array]


def grad_and_hessian_trace(fn: ScalarFn, y: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(grad fn(y), tr Hessian fn(y)) for y of shape (K,), both exact.

    `jax.linearize` evaluates the gradient once and returns its linearisation, so the
    K Hessian-vector products share one forward pass.
    """
    y = jnp.asarray(y)
    if y.ndim != 1:
        raise ValueError(f"y must have shape (K,), got {y.shape}")
    grad, hvp = jax.linearize(jax.grad(fn), y)
    basis = jnp.eye(y.shape[0], dtype=y.dtype)
    diag = jax.vmap(lambda v: jnp.vdot(v, hvp(v)))(basis)
    return grad, jnp.sum(diag)


def exact_hessian_trace(fn: ScalarFn, y: jax.Array) -> jax.Array:
    """tr(d^2 fn / dy^2) at y (shape (K,)), exact (forward-over-reverse, vmapped)."""
    return grad_and_hessian_trace(fn, y)[1]


def hutchinson_hessian_trace(
    fn: ScalarFn, y: jax.Array, key: jax.Array, num_probes: int = 1
) -> jax.Array:
    """Unbiased estimate E_v[v^T H v] of the trace with Rademacher probes v."""
    num_probes = checks.int_at_least("num_probes", num_probes, 1)
    y = jnp.asarray(y)
    probes = jax.random.rademacher(key, (num_probes,) + y.shape, dtype=y.dtype)
    grad = jax.grad(fn)

    def quad(v):
        return jnp.vdot(v, jax.jvp(grad, (y,), (v,))[1])

    return jnp.mean(jax.vmap(quad)(probes))
