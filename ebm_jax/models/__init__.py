"""Flax NNX models. Models never import losses."""

from ebm_jax.models.detection_head import DetectionEnergyHead, refine_boxes
from ebm_jax.models.energy_mlp import ToyEnergyMLP, count_parameters
from ebm_jax.models.norm import SplitBatchNorm
from ebm_jax.models.resnet import ResNetEncoder

__all__ = ["DetectionEnergyHead", "ResNetEncoder", "SplitBatchNorm", "ToyEnergyMLP",
           "count_parameters", "refine_boxes"]
