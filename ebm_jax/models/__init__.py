"""Flax NNX models. Models never import losses."""

from ebm_jax.models.energy_mlp import ToyEnergyMLP, count_parameters

__all__ = ["ToyEnergyMLP", "count_parameters"]
