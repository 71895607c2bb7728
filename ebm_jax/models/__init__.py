"""Flax NNX models. Models never import losses."""

from ebm_jax.models.alexnet import SiamFCAlexNet, alexnet_flops
from ebm_jax.models.contrastive import (
    ENCODER_PARAMS,
    QUERY_PARAMS,
    InstDisc,
    MoCo,
    Siamese,
    Supervised,
    make_contrastive_model,
)
from ebm_jax.models.detection_head import DetectionEnergyHead, refine_boxes
from ebm_jax.models.energy_mlp import ToyEnergyMLP, count_parameters
from ebm_jax.models.norm import SplitBatchNorm
from ebm_jax.models.resnet import ResNetEncoder

__all__ = ["ENCODER_PARAMS", "QUERY_PARAMS", "DetectionEnergyHead", "InstDisc", "MoCo",
           "ResNetEncoder", "Siamese", "SiamFCAlexNet", "SplitBatchNorm", "Supervised", "ToyEnergyMLP",
           "alexnet_flops", "count_parameters", "make_contrastive_model", "refine_boxes"]
