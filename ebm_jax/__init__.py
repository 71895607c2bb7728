"""ebm_jax: energy-based and contrastive models for regression and tracking, in JAX."""

__version__ = "0.2.0"
