"""What each DataLoader worker of a :class:`~.torch.SnapshotDataset` runs: its share of the
loader's options, the ``map`` sent to it by value, and where each of its passes starts (its
epoch, and a state loaded in the parent: :meth:`SnapshotDataset.load_state_dict` reaches the
workers, persistent ones included, through the epoch counter's file,
:class:`~.epochs.EpochCounter`)."""

from __future__ import annotations

from typing import Any

from ..cores import cores
from ..errors import OptionError
from . import resume
from .loader import SHUFFLE_BUFFER_BYTES, Loader

DATASET_SUPERSEDED = (
    "this DataLoader's pass over the SnapshotDataset was superseded: another DataLoader "
    "without workers iterated the same dataset in this process, or set_epoch() or "
    "load_state_dict() was called, since it started. Without workers a dataset serves one "
    "iteration at a time: give the other DataLoader a SnapshotDataset of its own (or use "
    "num_workers > 0: each worker reads a copy of its own)"
)


class _ByValue:
    """A function pickled with cloudpickle, to be loaded where it is unpickled."""

    def __init__(self, payload: bytes) -> None:
        self.payload = payload

    def load(self) -> Any:
        from ..by_value import loads

        return loads(self.payload)


def shipped_map(options: dict[str, Any]) -> dict[str, Any]:
    """The loader ``options`` with their ``map`` pickled by value, for spawn and forkserver
    workers: a lambda or a notebook's function (forkserver is Python 3.14's default: plain
    pickle would refuse them).

    Raises:
        TypeError: the map holds what cannot be sent (a lock, an open file, a client).
    """
    fn = options.get("map")
    if fn is None:
        return options
    from ..by_value import dumps

    try:
        # (with its file names and a notebook cell's lines: a worker's traceback shows the
        # map's line that failed, where it showed "<dynamic-code>" and no line)
        return {**options, "map": _ByValue(dumps(fn, sources=True))}
    except Exception as err:  # what it holds: a lock, an open file, a client
        name = getattr(fn, "__qualname__", repr(fn))
        raise TypeError(
            f"SnapshotDataset's map {name} cannot be sent to the DataLoader's worker "
            f"processes ({type(err).__name__}: {err}): make what it holds inside it "
            "(functools.cache makes it once per worker), or use num_workers=0"
        ) from err


def loaded_map(options: dict[str, Any]) -> dict[str, Any]:
    """:func:`shipped_map`'s options with their map loaded (in the worker)."""
    shipped = options.get("map")
    return {**options, "map": shipped.load()} if isinstance(shipped, _ByValue) else options


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
