"""Contrastive representation learning (seed 002) as pure functions: InfoNCE, the
InstDisc memory bank and NCE loss, MoCo's queue and momentum encoder."""

from ebm_jax.contrastive.end_to_end import Siamese, end_to_end_loss, make_end_to_end_loss
from ebm_jax.contrastive.infonce import infonce_logits, infonce_loss
from ebm_jax.contrastive.instdisc import (
    ENCODER_PARAMS,
    InstDisc,
    estimate_log_z,
    init_memory_bank,
    instdisc_nce_loss,
    instdisc_softmax_loss,
    make_instdisc_loss,
    normalise,
    resolve_log_z,
    update_memory_bank,
)
from ebm_jax.contrastive.knn import knn_accuracy, knn_predict
from ebm_jax.contrastive.moco import (
    QUERY_PARAMS,
    MoCo,
    check_queue_size,
    ema_update,
    enqueue,
    init_queue,
    make_moco_loss,
)
from ebm_jax.contrastive.shuffle_bn import (
    SplitBatchNorm,
    shuffle_across_devices,
    unshuffle_across_devices,
)

__all__ = [
    "ENCODER_PARAMS",
    "InstDisc",
    "make_instdisc_loss",
    "QUERY_PARAMS",
    "MoCo",
    "make_moco_loss",
    "Siamese",
    "SplitBatchNorm",
    "end_to_end_loss",
    "make_end_to_end_loss",
    "check_queue_size",
    "ema_update",
    "enqueue",
    "estimate_log_z",
    "infonce_logits",
    "infonce_loss",
    "init_memory_bank",
    "init_queue",
    "knn_accuracy",
    "knn_predict",
    "instdisc_nce_loss",
    "instdisc_softmax_loss",
    "normalise",
    "resolve_log_z",
    "shuffle_across_devices",
    "unshuffle_across_devices",
    "update_memory_bank",
]
