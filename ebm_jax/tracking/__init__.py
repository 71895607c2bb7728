"""Visual tracking: SiamFC's crops, training loss and tracker as pure JAX functions
(Bertinetto et al. 2016), and a correlation filter tracker on deep features (`dcf`); a
tracker is a pair `init(params, frame, box) -> State`, jitted `update(params, state,
frame) -> (State, box)`. SoCL (Wu & Chan, "Learning
Tracking Representations from Single Point Annotations"): target objectness prior maps
from a frame and its point (`top_maps`) and SoCL-Siam's training loss (`socl_siam`)."""

from ebm_jax.ops.crops import (
    box_to_center,
    center_to_box,
    crop_square,
    crop_square_np,
    exemplar_side,
)
from ebm_jax.tracking.dcf import DCFSettings, DCFState, DCFTracker, make_dcf_tracker
from ebm_jax.tracking.siamfc import (
    SiamFCSettings,
    Tracker,
    TrackerState,
    make_tracker,
    model_embed,
    track_sequence,
)
from ebm_jax.tracking.siamfc_training import (
    PORT_TRAINING,
    balanced_bce,
    make_labels,
    make_siamfc_loss,
    training_crops,
)
from ebm_jax.tracking.socl_siam import make_socl_siam_loss
from ebm_jax.tracking.top_maps import (
    TopMapSettings,
    grid_softmax,
    pseudo_box,
    recall_at,
    score_map,
    top_boxes,
    top_map,
)

__all__ = [
    "DCFSettings",
    "DCFState",
    "DCFTracker",
    "PORT_TRAINING",
    "SiamFCSettings",
    "TopMapSettings",
    "Tracker",
    "TrackerState",
    "balanced_bce",
    "box_to_center",
    "center_to_box",
    "crop_square",
    "crop_square_np",
    "exemplar_side",
    "grid_softmax",
    "make_dcf_tracker",
    "make_labels",
    "make_siamfc_loss",
    "make_socl_siam_loss",
    "make_tracker",
    "model_embed",
    "pseudo_box",
    "recall_at",
    "score_map",
    "top_boxes",
    "top_map",
    "track_sequence",
    "training_crops",
]
