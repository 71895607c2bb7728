"""Visual tracking: SiamFC's crops, training loss and tracker as pure JAX functions
(Bertinetto et al. 2016); a tracker is a pair `init(params, frame, box) -> State`,
jitted `update(params, state, frame) -> (State, box)`."""

from ebm_jax.tracking.crops import (
    box_to_center,
    center_to_box,
    crop_square,
    crop_square_np,
    exemplar_side,
)
from ebm_jax.tracking.siamfc import (
    SiamFCSettings,
    Tracker,
    TrackerState,
    balanced_bce,
    make_labels,
    make_siamfc_loss,
    make_tracker,
    model_embed,
    track_sequence,
    training_crops,
)

__all__ = [
    "SiamFCSettings",
    "Tracker",
    "TrackerState",
    "balanced_bce",
    "box_to_center",
    "center_to_box",
    "crop_square",
    "crop_square_np",
    "exemplar_side",
    "make_labels",
    "make_siamfc_loss",
    "make_tracker",
    "model_embed",
    "track_sequence",
    "training_crops",
]
