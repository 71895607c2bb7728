"""Contrastive representation learning losses as pure functions: InfoNCE (MoCo, He et
al. 2020, eq. 1), the InstDisc memory bank and NCE loss (Wu et al. 2018, sec. 3), MoCo's
queue and momentum update, shuffled batch norm, the end-to-end mechanism, the
supervised baseline's loss, and SoCL's soft contrastive learning (Wu & Chan, sec. 3.2:
GST, SNS, LST, mix-up, loss 10). The models they train live in `ebm_jax.models.contrastive`;
linear probe and kNN in `ebm_jax.eval`. Nothing here imports models or training code.
"""

from ebm_jax.contrastive.end_to_end import end_to_end_loss, make_end_to_end_loss
from ebm_jax.contrastive.infonce import infonce_logits, infonce_loss
from ebm_jax.contrastive.instdisc import (
    estimate_log_z,
    init_memory_bank,
    instdisc_nce_loss,
    instdisc_softmax_loss,
    make_instdisc_loss,
    normalise,
    resolve_log_z,
    update_memory_bank,
)
from ebm_jax.contrastive.moco import (
    check_queue_size,
    ema_update,
    enqueue,
    gather_replicated,
    init_queue,
    make_moco_loss,
)
from ebm_jax.contrastive.shuffle_bn import (
    shuffle_across_devices,
    shuffled_forward,
    unshuffle_across_devices,
)
from ebm_jax.contrastive.socl import (
    SoCLSettings,
    gst,
    lst,
    mixup,
    sns,
    soft_contrastive_loss,
    socl_loss,
    top_mass_mask,
)
from ebm_jax.contrastive.supervised import make_supervised_loss

__all__ = [
    "SoCLSettings",
    "check_queue_size",
    "ema_update",
    "end_to_end_loss",
    "enqueue",
    "estimate_log_z",
    "gather_replicated",
    "gst",
    "infonce_logits",
    "infonce_loss",
    "init_memory_bank",
    "init_queue",
    "instdisc_nce_loss",
    "instdisc_softmax_loss",
    "lst",
    "make_end_to_end_loss",
    "make_instdisc_loss",
    "make_moco_loss",
    "make_supervised_loss",
    "mixup",
    "normalise",
    "resolve_log_z",
    "shuffle_across_devices",
    "shuffled_forward",
    "sns",
    "socl_loss",
    "soft_contrastive_loss",
    "top_mass_mask",
    "unshuffle_across_devices",
    "update_memory_bank",
]
