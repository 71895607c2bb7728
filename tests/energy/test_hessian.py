import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ebm_jax.energy import exact_hessian_trace, grad_and_hessian_trace, hutchinson_hessian_trace
from ebm_jax.models import ToyEnergyMLP
from tests.tolerances import assert_within, float32_sum_atol


@pytest.mark.parametrize("k", [1, 2, 4])
def test_exact_trace_of_quadratic_equals_analytic(k):
    rng = np.random.default_rng(k)
    a = rng.normal(size=(k, k)).astype(np.float32)
    sym = a + a.T  # Hessian of 0.5 y^T A y + b.y is (A + A^T) / 2 ... here use y^T S y / 2
    b = rng.normal(size=k).astype(np.float32)

    def f(y):
        return 0.5 * y @ sym @ y + b @ y + 3.0

    y = jnp.asarray(rng.normal(size=k), jnp.float32)
    grad, tr = grad_and_hessian_trace(f, y)
    s64, y64, b64 = (np.asarray(a, np.float64) for a in (sym, y, b))
    # float32 autodiff against the float64 values: the gradient (sym y + sym^T y) / 2 + b
    # is a sum of 2 k + 1 products per component, the trace one of k Hessian diagonals,
    # each a sum of 2 k products with a one-hot vector (tests/tolerances.py)
    tr_atol = float32_sum_atol(2 * k + 1, np.sum(np.abs(s64)))
    assert_within(tr, np.trace(s64), tr_atol)
    assert_within(grad, s64 @ y64 + b64,
                  float32_sum_atol(2 * k + 1, np.abs(s64) @ np.abs(y64) + np.abs(b64)))


@pytest.mark.parametrize("k", [1, 2, 4])
def test_exact_trace_of_mlp_equals_full_hessian_trace(k):
    model = ToyEnergyMLP(rngs=nnx.Rngs(k), x_dim=3, y_dim=k)
    x = jnp.array([0.3, -1.0, 0.5])
    y = jnp.linspace(-0.7, 0.9, k)
    f = lambda yy: model(x, yy)
    ref = jnp.trace(jax.hessian(f)(y))
    # Two programs (forward-over-reverse columns against the full Hessian): second
    # derivatives through the network, for which no useful float32 bound exists (see
    # tests/tolerances.py). The tolerance is relative to the trace; the measured gap is
    # 0 under the default (AVX-512) and AVX2 kernels and 1.9e-9 under SSE4_2 (k = 4),
    # 1/690 of the tolerance.
    chex.assert_trees_all_close(exact_hessian_trace(f, y), ref, rtol=1e-5, atol=1e-6)


def test_hutchinson_is_unbiased_but_not_exact():
    sym = jnp.diag(jnp.array([1.0, -2.0, 3.0, 0.5]))
    f = lambda y: 0.5 * y @ sym @ y
    y = jnp.ones(4)
    est = hutchinson_hessian_trace(f, y, jax.random.key(0), num_probes=4000)
    # Rademacher probes on a diagonal H: each z^T H z is 1 - 2 + 3 + 0.5 = 2.5 whatever
    # the signs, and every partial sum of the 4000 probes (multiples of 0.5 below 2^24)
    # is exact in float32, in any order; only the division by 4000 may round
    assert_within(est, 2.5, float32_sum_atol(1, 2.5))
    with pytest.raises(ValueError, match="num_probes"):
        hutchinson_hessian_trace(f, y, jax.random.key(0), num_probes=0)


def test_rejects_batched_y():
    with pytest.raises(ValueError, match=r"shape \(K,\)"):
        exact_hessian_trace(lambda y: jnp.sum(y**2), jnp.ones((2, 3)))
