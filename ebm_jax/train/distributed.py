"""Multi-host start-up (TPU pod slices, several GPU hosts, Slurm).

Call `initialize_distributed(True)` first thing in every process, before any other JAX
call. With no arguments `jax.distributed.initialize()` discovers the coordinator on TPU
pods and under Slurm/Open MPI; elsewhere pass `coordinator_address`, `num_processes`
and `process_id` (or set JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID).

After it, `jax.devices()` lists every device of every process, `make_mesh()` spans them
all, each process feeds its own rows to `shard_batch` (global batch / process count),
and only process 0 writes records and results (`is_main_process`). Orbax writes each
process's shards of a checkpoint itself.
"""

from __future__ import annotations

import os

import jax


def initialize_distributed(
    enabled: bool,
    *,
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
) -> None:
    """Joins the multi-process JAX runtime when `enabled` (a no-op otherwise)."""
    if not enabled:
        return
    coordinator_address = coordinator_address or os.environ.get("JAX_COORDINATOR_ADDRESS")
    if num_processes is None and "JAX_NUM_PROCESSES" in os.environ:
        num_processes = int(os.environ["JAX_NUM_PROCESSES"])
    if process_id is None and "JAX_PROCESS_ID" in os.environ:
        process_id = int(os.environ["JAX_PROCESS_ID"])
    if num_processes is not None and num_processes < 1:
        raise ValueError(f"num_processes must be >= 1, got {num_processes}")
    if process_id is not None and num_processes is not None and not (
        0 <= process_id < num_processes
    ):
        raise ValueError(f"process_id must be in [0, {num_processes}), got {process_id}")
    jax.distributed.initialize(
        coordinator_address=coordinator_address,
        num_processes=num_processes,
        process_id=process_id,
    )
