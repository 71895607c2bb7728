"""Detection box refinement with an energy-based head (the paper's sec. 4.2): the
frozen backbone features, the head's training batches, the experiment's data, and
prediction by guided NMS and gradient ascent on f. The losses are in
`ebm_jax.energy.boxes`, the COCO metrics in `ebm_jax.eval.coco`."""

from ebm_jax.detection.data import (
    DetectionData,
    content_hash,
    open_coco,
    open_generated,
    read_detections,
    set_fingerprint,
)
from ebm_jax.detection.features import (
    FeatureSource,
    backbone_batches,
    build_backbone,
    feature_bytes,
)
from ebm_jax.detection.heads import box_batches, box_index, build_head
from ebm_jax.detection.refine import evaluate_refinement, refine_detections

__all__ = [
    "DetectionData",
    "FeatureSource",
    "backbone_batches",
    "box_batches",
    "box_index",
    "build_backbone",
    "build_head",
    "content_hash",
    "evaluate_refinement",
    "feature_bytes",
    "open_coco",
    "open_generated",
    "read_detections",
    "refine_detections",
    "set_fingerprint",
]
