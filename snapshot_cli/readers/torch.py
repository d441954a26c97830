"""PyTorch: batches as tensors (on a device, copied ahead), and an ``IterableDataset``.

``loader.to_torch(device=None, prefetch=2)`` yields ``dict[str, torch.Tensor]``. Numeric
columns become tensors that share memory with the loader's numpy batch (no copy: the loader
reuses a batch's memory only once nothing, a tensor included, refers to it); ragged columns
become lists of tensors, strings and bytes stay Python lists. With ``device="cuda"`` each
batch is copied from pinned host memory with ``non_blocking=True`` on a side CUDA stream,
``prefetch`` batches ahead of the one being used, so the copy of batch N+1 overlaps the step
on batch N; the consumer's stream waits for the copy only when it takes the batch. Other
devices (``"mps"``, ``"xpu"``) get a plain ``.to(device)``; ``"cpu"`` or None adds nothing.

:class:`SnapshotDataset` is for code that wants a ``torch.utils.data.DataLoader``: use
``DataLoader(SnapshotDataset(url, batch_size=256), batch_size=None, num_workers=W)``. The
ranks of an initialised ``torch.distributed`` split the snapshot first (equal parts: they
step in lockstep); each worker then replays a share of its rank's batches, whole batches,
unpadded (:mod:`.plan`'s worker split), so a rank's workers read each record of its part
once. ``len(dataset)`` is the batches an epoch yields, the same for any W (``len(loader)``:
Hugging Face's ``Trainer`` and Lightning plan steps and resume with it); with
``global_batch_size`` each worker is a part of the global order (:mod:`.elastic`) yielding
a slice of every step: W times the steps.

Epochs: every iteration of the DataLoader is the next epoch (a fresh shuffle), with or
without ``persistent_workers``, and ``dataset.set_epoch(e)`` (as with
``DistributedSampler``) makes the next iteration epoch ``e``, the one after ``e + 1``, ...
Without ``persistent_workers`` each iteration starts new worker processes from the parent's
copy of the dataset, which has not seen the previous epochs, so the workers count for
themselves (:class:`~.epochs.EpochCounter`): each registers its DataLoader iteration, known by the
iterator's base seed (``get_worker_info().seed - id``), in a small file the parent's dataset
owns, under ``fcntl.flock``; the epoch is that iteration's number in registration order. All
workers of one iteration agree, under any start method (fork, spawn, forkserver), and the
orders are those of calling ``set_epoch(0)``, ``set_epoch(1)``, ... explicitly. Where the
file cannot be used (no ``fcntl``, as on Windows) a worker warns once that every iteration
repeats the order unless ``set_epoch`` is called each epoch or the workers persist (their
loaders then count). Without workers (``num_workers=0``) the dataset's own loader counts.
Two DataLoader iterations running at the same time over one dataset are two epochs.
"""

from __future__ import annotations

import contextlib
import operator
import os
import sys
import warnings
from typing import TYPE_CHECKING, Any

from .. import storage
from ..errors import OptionError
from ..keywords import keywords_of, refuse_unknown
from ..units import integer
from . import ranks, resume
from .epochs import new_counter, warn_cannot_count
from .loader import SUPERSEDED, Loader
from .options import LoaderOptions, no_split
from .torch_batches import TorchBatches as TorchBatches  # (loader.to_torch()'s, re-exported)
from .torch_tensors import DatasetBatch, refuse_collate, to_tensors
from .torch_tensors import import_torch as _torch
from .torch_workers import (
    DATASET_SUPERSEDED,
    keeps,
    loaded_map,
    shipped_map,
    start_pass,
    worker_share,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    from .snapshot import Snapshot


def _make_dataset_class() -> type:
    torch = _torch()
    from torch.utils.data._utils.collate import default_collate_fn_map  # torch's extension point

    default_collate_fn_map[DatasetBatch] = refuse_collate

    class SnapshotDataset(torch.utils.data.IterableDataset):  # type: ignore[name-defined]
        """A snapshot as a ``torch.utils.data.IterableDataset`` of whole batches.

        ``SnapshotDataset(url, batch_size=None, *, storage_options=None, **loader_options)``
        (``url`` a path or URL, or a ``Snapshot`` from ``snap.open``: the version it opened); the
        loader options are those of :meth:`Snapshot.loader` (``batch_size``: 256 if neither
        it nor ``global_batch_size`` is given,
        ``shuffle``, ``seed``, ...) except ``rank``/``world_size``, which come from
        ``torch.distributed`` (or pass them explicitly), each rank's batches shared out among
        its DataLoader workers. Use ``DataLoader(dataset, batch_size=None)``. Each iteration
        is a new epoch; see the module docstring for how workers count them.
        """

        def __init__(
            self,
            url: str | os.PathLike[str] | Snapshot,
            batch_size: int | None = None,  # (second, as in Snapshot.loader: a positional 64
            *,  # went to storage_options, "'int' object is not a mapping")
            storage_options: dict[str, Any] | None = None,
            **loader_options: Any,
        ) -> None:
            super().__init__()
            from .snapshot import Snapshot
            from .snapshot import open as open_snapshot

            # (a misspelt option was "Snapshot.loader() got an unexpected keyword", a call
            # the user did not make)
            takes = keywords_of(Snapshot.loader) | {"url", "storage_options"}
            refuse_unknown("SnapshotDataset", loader_options, takes)
            self.snapshot = open_snapshot(url, storage_options)  # a path, or an open Snapshot
            self.url, self.storage_options = self.snapshot.url, storage_options
            self.loader_options = dict(loader_options)
            self.epoch = 0
            self._pending = True  # self.epoch is still to be applied to a pass
            self._explicit = False  # set_epoch was called
            self._loader: Loader | None = None
            self._loader_key: tuple[int, int, int] | None = None  # (pid, worker, workers)
            size = batch_size
            if size is None and self.loader_options.get("global_batch_size") is None:
                size = 256
            self.batch_size: int | None = size
            self._resume: dict[str, Any] | None = None  # load_state_dict: where to start
            self._split: int | None = None  # num_workers of the last pass seen (no counter)
            options = self.loader_options
            self._given = (options.pop("rank", "auto"), options.pop("world_size", "auto"))
            # checked now as far as it can be (a launcher's environment not set up yet
            # is checked when iterated)
            with contextlib.suppress(ranks.HalfSet):
                self._ranks()
            with warnings.catch_warnings():  # (options checked as one rank's: not a rank's
                warnings.filterwarnings("ignore", "snap: this process is rank", RuntimeWarning)
                self.snapshot.loader(self.batch_size, **self._options(0, 1))  # loader: no word)
            self._epochs, self._cannot_count = new_counter()

        def _ranks(self) -> tuple[int, int]:
            """(rank, world_size) now: "auto" is read when the dataset is iterated (or sent
            to workers), so a dataset made before the launcher set up torch.distributed
            (Lightning's DDP, a module-level dataset) takes the job's ranks."""
            return ranks.resolve(*self._given)

        @property
        def rank(self) -> int:
            return self._ranks()[0]

        @property
        def world_size(self) -> int:
            return self._ranks()[1]

        def _options(self, part: int, parts: int, workers: int = 1) -> dict[str, Any]:
            """The options of part ``part`` of ``parts``, read by one of ``workers``."""
            options = {**self.loader_options, "rank": part, "world_size": parts}
            local = workers > 1 and storage.is_local(self.snapshot.fs)
            return options if workers == 1 else worker_share(options, workers, local)

        def _global(self) -> bool:
            """Whether the dataset reads in the global order (``global_batch_size``)."""
            return self.loader_options.get("global_batch_size") is not None

        def __getstate__(self) -> dict[str, Any]:
            # spawn/forkserver workers get a pickled copy; a loader (threads, locks) does
            # not pickle, and a worker makes its own for its part anyway
            state = dict(self.__dict__)
            state["_loader"], state["_loader_key"] = None, None
            state["_pickled_in"] = os.getpid()  # (the DataLoader's process: see _iterating)
            dist = sys.modules.get("torch.distributed")
            if "auto" in self._given and dist is not None and dist.is_initialized():
                state["_given"] = self._ranks()  # (a spawned worker has no process group)
            state["loader_options"] = shipped_map(state["loader_options"])
            return state

        def __setstate__(self, state: dict[str, Any]) -> None:
            state["loader_options"] = loaded_map(state["loader_options"])
            self.__dict__.update(state)
            self._unpickled_in = os.getpid()

        def _iterating(self) -> int | None:
            """In a DataLoader worker: the process iterating the DataLoader, whose set_epoch
            and load_state_dict count (None: the worker's parent, a fork's). A spawn or
            forkserver worker got this copy pickled by that process; a forkserver worker's
            parent is the forkserver, and its set_epoch and load_state_dict were ignored
            (a resumed epoch started over, repeating records; found by a probe)."""
            if getattr(self, "_unpickled_in", None) == os.getpid():
                return getattr(self, "_pickled_in", None)
            return None

        def set_epoch(self, epoch: int) -> None:
            """Make the next iteration epoch ``epoch`` (later ones count on from it).

            It reaches DataLoader workers too, persistent ones included, through the
            epoch counter's file.
            """
            try:
                value = operator.index(epoch)  # numpy and torch integers too, not floats
            except TypeError:
                value = -1
            if value < 0 or isinstance(epoch, bool):
                raise OptionError(f"epoch must be an integer >= 0, got {epoch!r}")
            if self._resume is not None and (  # a state loaded and not yet taken: kept
                self._resume_taken()  # where it is within this epoch (the epoch loop's
                or not keeps(self._resume, value, self._part_loader(0, 1).epochs)
            ):  # set_epoch at its top, after load_state_dict)
                self._resume = None
            self._restart(value)

        def _resume_taken(self) -> bool:
            """Whether a pass in DataLoader workers has begun since the state was loaded."""
            with self._counter_lost():
                return self._epochs is not None and self._epochs.began_since_restart()
            return False

        def _restart(self, value: int) -> None:
            self.epoch, self._pending, self._explicit = value, True, True
            if self._epochs is not None:
                try:  # (the state to start at goes to the workers, persistent ones too)
                    self._epochs.restart(value, resume=self._resume)
                except OSError as err:  # the directory went away (a tmp cleaner)
                    self._epochs, self._cannot_count = None, f"epoch counter lost: {err}"

        def _part_loader(self, worker: int, workers: int) -> Loader:
            """The loader of this rank's DataLoader worker ``worker`` of ``workers`` (0 of
            1: the rank's own, without workers)."""
            key = (os.getpid(), worker, workers)
            if self._loader is None or self._loader_key != key:
                # new here: a forked worker may hold a copy of the parent's loader, made for
                # another part, whose threads are not in this process
                self._loader = self._new_loader(worker, workers)
                self._loader_key, self._pending = key, True
            return self._loader

        def _new_loader(self, worker: int, workers: int) -> Loader:
            """Worker ``worker`` of this rank's ``workers``' loader: a share of the rank's
            batches (per-rank order), or part ``rank * workers + worker`` of ``world_size *
            workers`` of the global order, its errors said in workers."""
            rank, world = self._ranks()
            if not self._global():
                return self._make_loader(self._options(rank, world, workers), (worker, workers))
            g = integer(self.loader_options.get("global_batch_size"))
            if type(g) is int and g > 0 and (problem := no_split(g, world, workers)):
                raise OptionError(problem)
            parts = world * workers
            options = self._options(rank * workers + worker, parts, workers)
            try:
                return self._make_loader(options, (0, 1))
            except OptionError as err:
                if workers == 1:
                    raise
                ranks = "1 rank" if world == 1 else f"{world} ranks"
                raise OptionError(
                    f"{err} (the {parts} 'ranks' are {ranks} x {workers} "
                    "DataLoader workers: fewer workers help too)"
                ) from None

        def _make_loader(self, options: dict[str, Any], split: tuple[int, int]) -> Loader:
            """``Snapshot.loader(batch_size, **options)`` (which ``__init__`` had check them),
            read by worker ``split[0]`` of the rank's ``split[1]`` (a split it has no keyword
            for: SnapshotDataset's own)."""
            given = {k: v for k, v in options.items() if k != "trace"}
            made = LoaderOptions(**given, worker_split=split)
            return Loader(self.snapshot, self.batch_size, made, options.get("trace"))

        def _worker_loader(self) -> Loader:
            info = torch.utils.data.get_worker_info()
            workers, worker = (1, 0) if info is None else (info.num_workers, info.id)
            loader = self._part_loader(worker, workers)
            if info is None:  # a pass without workers: what a state saved now is under
                self._split = 0
                with self._counter_lost():
                    if self._epochs is not None:
                        self._epochs.note_split(0)
            if info is not None and self._epochs is not None:
                try:
                    seed, n = info.seed - info.id, info.num_workers
                    epoch, state = self._epochs.register(
                        seed, info.id, self.epoch, self._iterating(), n, loader.epochs or 1
                    )
                except (OSError, ValueError) as err:  # the file went away or was damaged
                    self._epochs, self._cannot_count = None, f"epoch counter lost: {err}"
                else:  # (a state loaded in the parent, for the first pass since: not this
                    start_pass(loader, epoch, state, n)  # copy's, made when it started)
                    self._pending = False
                    return loader
            if info is not None and worker == 0 and not self._explicit:
                warn_cannot_count(self.epoch, self._cannot_count)
            if self._pending:
                # an explicit set_epoch, or a new loader; otherwise its epochs keep counting
                start_pass(loader, self.epoch, self._resume, 0 if info is None else workers)
                self._pending = False
                if info is None and self._resume is not None:
                    self._resume = None  # (taken: a later set_epoch starts its epoch)
                    self._restart(self.epoch)
                    self._pending = False
            elif (at := loader.state_dict())["batch"]:  # an iteration broken off mid-epoch:
                loader.set_epoch(at["epoch"] + 1)  # the next is the next epoch, as in workers
            return loader

        def state_dict(self, epoch: int | None = None, step: int | None = None) -> dict[str, Any]:
            """The state of the position ``step`` (batches from each worker since the start of
            ``epoch``, counting those before a resume) for :meth:`load_state_dict`.

            With ``global_batch_size`` it loads into a job of any world size and any
            ``num_workers`` whose product divides the global batch: DataLoader workers are
            parts of the topology (rank ``r``'s worker ``w`` of ``n`` reads part ``r n + w``
            of ``W n``), a step is one global batch, and torch's DataLoader takes one item
            from each worker in turn, so ``num_workers`` items make a rank's slice of a step
            (``step = items // num_workers``). Without it (the per-rank order) a state loads
            only into the same topology, without workers, where it was saved without them:
            a state records the ``num_workers`` of the dataset's latest DataLoader iteration
            (``workers``), and a per-rank one within an epoch (``step > 0``) under workers is
            refused (each worker reads a part of its own: the step names no place in them).
            """
            if epoch is None or step is None:  # (a TypeError naming a local class, it was)
                raise OptionError(
                    "SnapshotDataset.state_dict(epoch=e, step=t) needs the place your loop "
                    "reached: e its epoch, t the batches it took in it (a DataLoader's workers "
                    "read ahead of the loop: the dataset cannot tell); loader.state_dict() and "
                    "to_torch()'s take none"
                )
            epoch, step = resume.position(epoch, step)
            loader = self._part_loader(0, 1)
            if step == loader.batches_per_epoch():  # (the epoch done: its end is the next's
                epoch, step = epoch + 1, 0  # start, which any DataLoader resumes at)
            state = loader.state_dict()
            state.update(epoch=epoch, batch=step, pass_end=None)
            workers = self._last_split()
            if problem := resume.unsaveable(state, loader.batches_per_epoch(), workers):
                raise OptionError(problem)
            state["workers"] = workers or 0
            return state

        def _last_split(self) -> int | None:
            """The ``num_workers`` of the latest DataLoader pass over this dataset (None:
            none seen); the workers' own record it in the epoch counter's file."""
            with self._counter_lost():
                if self._epochs is not None and (split := self._epochs.last_split()) is not None:
                    return split
            return self._split

        @contextlib.contextmanager
        def _counter_lost(self) -> Iterator[None]:
            try:
                yield
            except (OSError, ValueError) as err:  # the file went away or was damaged
                self._epochs, self._cannot_count = None, f"epoch counter lost: {err}"

        def load_state_dict(self, state: dict[str, Any]) -> None:
            """Make the next iteration start at ``state`` (from :meth:`state_dict`); later
            iterations are the epochs after it. Checked against this dataset's loader now,
            and against the DataLoader's ``num_workers`` when iterated."""
            state = resume.plain(state)  # (first: one that resumes in no DataLoader)
            if problem := resume.malformed(state) or resume.split_mismatch(state, 0):
                raise OptionError(problem)
            self._part_loader(0, 1).load_state_dict(state)
            self._resume = dict(state)
            self._restart(int(state["epoch"]))

        def __len__(self) -> int:
            """Batches an epoch yields: see the module docstring."""
            caller = sys._getframe(1).f_locals.get("self")  # (DataLoader.__len__'s, if so)
            workers = caller.num_workers if isinstance(caller, torch.utils.data.DataLoader) else 0
            total, n = 0, max(1, workers)
            for w in range(n):  # (made as iterating makes them: the same errors)
                with self._new_loader(w, n) as ld:
                    total += len(ld)
            return total

        def __iter__(self) -> Any:
            loader = self._worker_loader()
            try:
                for batch in loader:
                    yield DatasetBatch(to_tensors(batch))
            except RuntimeError as err:  # (said of "the loader", which the user never made)
                if str(err) != SUPERSEDED:
                    raise
                raise RuntimeError(DATASET_SUPERSEDED) from None

    # pickled by reference (spawn workers): snapshot_cli.readers.torch.SnapshotDataset
    SnapshotDataset.__qualname__ = "SnapshotDataset"
    return SnapshotDataset


def __getattr__(name: str) -> Any:
    # SnapshotDataset subclasses torch's IterableDataset, so it is made on first use:
    # importing this module does not import torch.
    if name == "SnapshotDataset":
        cls = _make_dataset_class()
        globals()[name] = cls
        return cls
    raise AttributeError(name)
