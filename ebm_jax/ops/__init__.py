"""Differentiable operators: precise RoI pooling and box utilities of the detection
energy head (Gustafsson et al. 2020, "How to Train Your EBM for Regression", sec. 4.2),
the cross-correlation of Siamese trackers (Bertinetto et al. 2016, sec. 2.2); box
geometry (IoU, greedy and guided NMS, relative space) in `boxes`, SiamFC's square crops
in `crops` (imported from there: it needs OpenCV), the per-pixel box score map and the
grid softmax of TOP maps in `score_maps`; the jittable image augmentations of MoCo and
InstDisc in `augment`."""

from ebm_jax.ops.boxes import (
    box_iou,
    paired_box_iou,
    box_iou_np,
    decode_relative,
    encode_relative,
    greedy_nms,
    guided_nms,
    intersection_union,
    xywh_to_xyxy,
    xyxy_to_xywh,
)
from ebm_jax.ops.prroi_pool import (
    bin_weights,
    check_boxes,
    fpn_levels,
    prroi_pool,
    prroi_pool_fpn,
    prroi_pool_integral,
)
from ebm_jax.ops.xcorr import xcorr, xcorr_broadcast

__all__ = [
    "bin_weights",
    "box_iou",
    "paired_box_iou",
    "box_iou_np",
    "check_boxes",
    "decode_relative",
    "encode_relative",
    "fpn_levels",
    "greedy_nms",
    "guided_nms",
    "intersection_union",
    "prroi_pool",
    "prroi_pool_fpn",
    "prroi_pool_integral",
    "xywh_to_xyxy",
    "xcorr",
    "xcorr_broadcast",
    "xyxy_to_xywh",
]
