"""Detection box refinement with an energy-based head (the paper's sec. 4.2): the
frozen backbone features, the head's training batches, and prediction by guided NMS
and gradient ascent on f. The losses are in `ebm_jax.energy.boxes`, the experiment's
data in `ebm_jax.data.detection_sets`, the COCO metrics (and the evaluation of a
refinement) in `ebm_jax.eval.coco`."""

from ebm_jax.detection.features import (
    FeatureSource,
    backbone_batches,
    build_backbone,
    feature_bytes,
)
from ebm_jax.detection.heads import box_batches, box_index, build_head
from ebm_jax.detection.refine import refine_detections

__all__ = [
    "FeatureSource",
    "backbone_batches",
    "box_batches",
    "box_index",
    "build_backbone",
    "build_head",
    "feature_bytes",
    "refine_detections",
]
