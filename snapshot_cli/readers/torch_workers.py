"""What each DataLoader worker of a :class:`~.torch.SnapshotDataset` runs: its share of the
loader's options, and where each of its passes starts (its epoch, and a state loaded in the
parent: :meth:`SnapshotDataset.load_state_dict` reaches the workers, persistent ones
included, through the epoch counter's file, :class:`~.epochs.EpochCounter`)."""

from __future__ import annotations

from typing import Any

from ..cores import cores
from ..errors import OptionError
from . import resume
from .loader import SHUFFLE_BUFFER_BYTES, Loader


def worker_share(options: dict[str, Any], workers: int, local: bool) -> dict[str, Any]:
    """The loader options of one of ``workers`` DataLoader workers: where left "auto", its
    share of a loader's memory and cores (a shuffle buffer of 256 MiB / ``workers``; from
    local disk, a read thread per ``workers`` cores). Each worker runs a loader of its own:
    with a whole loader's windows and a read thread per core each, 2 workers held 1.4 GB
    and 4 held 2.3 GB, for no more speed (torch's copy of every batch to the main process
    bounds it)."""
    out = dict(options)
    auto = lambda name: str(out.get(name, "auto")).lower() == "auto"  # noqa: E731
    # (the global order's windows are cut into every part's share already, and must not
    # depend on how many parts there are: a state resumes on another number of workers)
    kept = not out.get("shuffle", True) or out.get("global_batch_size") is not None
    if auto("shuffle_buffer") and not kept:
        out["shuffle_buffer"] = f"{max(1, (SHUFFLE_BUFFER_BYTES >> 20) // workers)}MiB"
    if auto("num_parallel_reads") and local:
        out["num_parallel_reads"] = max(1, cores() // workers)
    return out


def keeps(state: dict[str, Any], epoch: int, epochs: int | None) -> bool:
    """Whether ``set_epoch(epoch)`` keeps a loaded ``state`` no pass has taken yet, as a
    loader's does (:func:`.resume.keeps_position`): ``load_state_dict(state)`` and then
    ``set_epoch(state's epoch)`` at the top of the epoch loop resume at its batch."""
    at = (int(state["epoch"]), int(state["batch"]), state.get("pass_end"))
    return resume.keeps_position(epoch, at, epochs)


def start_pass(loader: Loader, epoch: int, state: dict[str, Any] | None, workers: int) -> None:
    """Start ``loader``'s pass of ``epoch`` (a part read by one of ``workers``; 0: a pass
    without workers) at ``state``, the loaded state this pass takes, or at its beginning.

    Raises:
        OptionError: ``state`` was saved under another split of the rank's batches.
    """
    if state is None:
        loader.set_epoch(epoch)
        return
    if problem := resume.split_mismatch(state, workers):
        raise OptionError(problem)
    if workers > 1 and not state["batch"] and not resume.is_global(state):
        loader.set_epoch(epoch)  # (an epoch's start, checked when it was loaded)
        return
    loader.load_state_dict(state)
    loader.set_epoch(epoch)  # (kept where the state is within it, or at its pass's end)
