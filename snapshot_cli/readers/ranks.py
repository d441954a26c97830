"""Where ``rank="auto"`` / ``world_size="auto"`` come from (read only when asked)."""

from __future__ import annotations

import os
import sys

_ENV = [
    ("RANK", "WORLD_SIZE"),  # torchrun, accelerate, deepspeed
    ("SLURM_PROCID", "SLURM_NTASKS"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("PMI_RANK", "PMI_SIZE"),
]


def detect() -> tuple[int, int, str]:
    """``(rank, world_size, source)`` from an initialised torch.distributed, a multi-process
    JAX job, else env vars."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size(), "torch.distributed"
    jax = sys.modules.get("jax")
    if jax is not None:
        try:
            if jax.process_count() > 1:
                return jax.process_index(), jax.process_count(), "jax"
        except Exception:  # jax imported but not usable here: fall through
            pass
    for rank_var, size_var in _ENV:
        if rank_var in os.environ and size_var in os.environ:
            try:
                return int(os.environ[rank_var]), int(os.environ[size_var]), rank_var
            except ValueError:
                continue
    return 0, 1, "default"
