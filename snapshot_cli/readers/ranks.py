"""Where ``rank="auto"`` / ``world_size="auto"`` come from (read only when asked)."""

from __future__ import annotations

import operator
import os
import sys
import warnings
from typing import Any

from ..errors import OptionError, outside_snap

_ENV = [
    ("RANK", "WORLD_SIZE"),  # torchrun, accelerate, deepspeed
    # srun sets the step's size for each task it starts; a batch script (sbatch --ntasks=4
    # running python itself) has SLURM_PROCID=0 and SLURM_NTASKS=4 but is one process: taking
    # those would read a quarter of the snapshot without a word
    ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("PMI_RANK", "PMI_SIZE"),
]


class HalfSet(OptionError):
    """A launcher's variable without its pair: a mistake, or a launcher not done yet (the
    children of Lightning's DDP have WORLD_SIZE before torch.distributed is set up)."""


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
            return (*from_environment(rank_var, size_var), rank_var)
        half = [v for v in (rank_var, size_var) if v in os.environ]
        if half and rank_var == "RANK":  # launchers set both; one alone is a mistake
            (given,) = half
            missing = size_var if given == rank_var else rank_var
            raise HalfSet(
                f"'auto' found {given}={os.environ[given]!r} in the environment but no "
                f"{missing}: set both (torchrun, accelerate and deepspeed do), or give rank= "
                "and world_size="
            )
    return 0, 1, "default"


def from_environment(rank_var: str, size_var: str) -> tuple[int, int]:
    """The pair of environment variables as ``(rank, world_size)``; an OptionError naming
    them if they are not integers with 0 <= rank < world_size (a job whose ranks all
    read the whole snapshot, or none of it, would not say so)."""
    texts = os.environ[rank_var], os.environ[size_var]
    said = f"'auto' reads {rank_var}={texts[0]!r} and {size_var}={texts[1]!r} from the environment"
    try:
        rank, size = int(texts[0]), int(texts[1])
    except ValueError:
        raise OptionError(
            f"{said}, which are not both integers: fix them, or give rank= and world_size="
        ) from None
    if not 0 <= rank < size:
        raise OptionError(
            f"{said}: the rank must be in [0, {size}); fix them, or give rank= and world_size="
        )
    return rank, size


def auto_pair(rank: Any, world_size: Any) -> tuple[Any, Any]:
    """``rank``/``world_size`` with "auto" read (:func:`detect`), not yet checked. "auto"
    for either means the job's ranks, so the other left at its default (rank 0, world_size
    1) is read too: it was kept, and ``world_size="auto"`` alone had every rank read rank
    0's part, ``rank="auto"`` alone rank 0 read all and the others fail. The other given
    otherwise must be what was read, else an OptionError naming both."""
    if not (_is(rank, "auto") or _is(world_size, "auto")):
        return rank, world_size
    found_rank, found_size, source = detect()
    pairs = dict(_ENV)
    where = (
        "no launcher found: one process"
        if source == "default"
        else f"from {source} and {pairs[source]}"
        if source in pairs
        else f"from {source}"
    )
    out = []
    for name, given, found, default in (
        ("rank", rank, found_rank, 0),
        ("world_size", world_size, found_size, 1),
    ):
        if not (_is(given, "auto") or _is(given, default) or _is(given, found)):
            raise OptionError(
                f"rank={rank!r}, world_size={world_size!r}: 'auto' read rank {found_rank} of "
                f"{found_size} ({where}), and {name}={given!r} is not {found}; give both "
                "'auto', or both as integers"
            )
        out.append(found)
    return out[0], out[1]


def _is(value: Any, other: Any) -> bool:
    """``value == other`` for a str or an integer (numpy's too), never a bool's True as 1."""
    if isinstance(value, bool) or isinstance(value, str) != isinstance(other, str):
        return False
    if isinstance(value, str):
        return value == other
    try:
        return operator.index(value) == other
    except TypeError:
        return False


def resolve(rank: Any, world_size: Any) -> tuple[int, int]:
    """``rank``/``world_size`` as given (integers, or "auto": :func:`auto_pair` now),
    checked: ``(rank, world_size)`` with ``0 <= rank < world_size``, else an OptionError."""
    rank, world_size = auto_pair(rank, world_size)
    checked = []
    for name, value, least in (("rank", rank, 0), ("world_size", world_size, 1)):
        try:
            checked.append(-1 if isinstance(value, bool) else operator.index(value))
        except TypeError:
            checked.append(-1)
        if checked[-1] < least:
            raise OptionError(f"{name} must be an integer >= {least} or 'auto', got {value!r}")
    if not checked[0] < checked[1]:
        raise OptionError(f"rank must be in [0, world_size={checked[1]}), got {checked[0]}")
    return checked[0], checked[1]


def warn_if_every_rank_reads_all(rank: Any, world_size: Any) -> None:
    """A RuntimeWarning where the loader reads the whole snapshot (``rank=0, world_size=1``,
    the defaults) in a process that is one rank of several: of an initialised
    ``torch.distributed``, or of a launcher's variables. Every rank then trains on every
    record, in the same order, without a word (torch's DistributedSampler reads the job's
    ranks itself). JAX's are not looked at: asking may start its backend."""
    if not (_is(rank, 0) and _is(world_size, 1)):
        return
    found = _job_rank()
    if found is None:
        return
    found_rank, found_size, source = found
    warnings.warn(
        f"snap: this process is rank {found_rank} of {found_size} ({source}), but the "
        "loader reads the whole snapshot (rank=0, world_size=1, the defaults): every rank "
        "reads every record, in the same order. Give rank='auto', world_size='auto' to "
        "split it among the ranks (or filter this warning if each rank should read it all)",
        RuntimeWarning,
        stacklevel=outside_snap(),
    )


def _job_rank() -> tuple[int, int, str] | None:
    """``(rank, world_size, source)`` of a job of several processes, or None."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        if dist.get_world_size() > 1:
            return dist.get_rank(), dist.get_world_size(), "torch.distributed"
        return None
    for rank_var, size_var in _ENV:
        try:
            rank, size = int(os.environ[rank_var]), int(os.environ[size_var])
        except (KeyError, ValueError):
            continue
        if 0 <= rank < size and size > 1:
            return rank, size, f"{rank_var} and {size_var}"
    return None
