"""Training infrastructure shared by every experiment: a train state, a sharded jitted
step, Orbax checkpoints per stage with exact resume, and run records."""

from ebm_jax.train.checkpoint import (
    CheckpointError,
    StageCheckpoints,
    abstract_like,
    load_stage_params,
)
from ebm_jax.train.distributed import initialize_distributed
from ebm_jax.train.loop import ConfigMismatchError, fit, reset_stage
from ebm_jax.train.records import RunRecords, is_main_process, plot_metrics, read_metrics
from ebm_jax.train.state import TrainState, create_train_state, init_train_state, merge_model
from ebm_jax.train.step import (
    DATA_AXIS,
    TrainStep,
    check_batch,
    data_sharding,
    make_mesh,
    make_train_step,
    replicate,
    replicated,
    shard_batch,
)

__all__ = [
    "DATA_AXIS",
    "CheckpointError",
    "ConfigMismatchError",
    "RunRecords",
    "StageCheckpoints",
    "TrainState",
    "TrainStep",
    "abstract_like",
    "check_batch",
    "create_train_state",
    "data_sharding",
    "fit",
    "init_train_state",
    "initialize_distributed",
    "is_main_process",
    "load_stage_params",
    "make_mesh",
    "make_train_step",
    "merge_model",
    "plot_metrics",
    "read_metrics",
    "replicate",
    "replicated",
    "reset_stage",
    "shard_batch",
]
