"""PyTorch: batches as tensors (on a device, copied ahead), and an ``IterableDataset``.

``loader.to_torch(device=None, prefetch=2)`` yields ``dict[str, torch.Tensor]``. Numeric
columns become tensors that share memory with the loader's numpy batch (no copy: the loader
hands out arrays it does not reuse); ragged columns become lists of tensors, strings and bytes
stay Python lists. With ``device="cuda"`` each batch is copied from pinned host memory with
``non_blocking=True`` on a side CUDA stream, ``prefetch`` batches ahead of the one being
used, so the copy of batch N+1 overlaps the step on batch N; the consumer's stream waits for
the copy only when it takes the batch. Other devices (``"mps"``, ``"xpu"``) get a plain
``.to(device)``; ``"cpu"`` or None adds nothing.

:class:`SnapshotDataset` is for code that wants a ``torch.utils.data.DataLoader``: use
``DataLoader(SnapshotDataset(url, batch_size=256), batch_size=None, num_workers=W)``. Each
worker process replays its own disjoint part (rank x workers + worker id), and the ranks of
an initialised ``torch.distributed`` split the snapshot first. Call ``dataset.set_epoch(e)``
before each epoch (as with ``DistributedSampler``) for a fresh shuffle, or keep the workers
with ``persistent_workers=True`` (their loaders then count epochs themselves; ``set_epoch``
cannot reach persistent workers). It has no ``len``: with W workers each yields the batches
of its own part, the last one possibly partial.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import OptionError
from . import ranks
from .adapter import Adapter

if TYPE_CHECKING:
    from .loader import Batch, Loader


def _torch() -> Any:
    try:
        import torch
    except ImportError as err:
        raise ImportError(
            "the PyTorch adapter needs torch: pip install 'arrowsnap[torch]' "
            "(or a torch build for your accelerator)"
        ) from err
    return torch


def to_tensors(batch: Batch) -> dict[str, Any]:
    """numpy batch → tensors without copying numeric columns (see the module docstring)."""
    torch = _torch()
    out: dict[str, Any] = {}

    def tensor(a: np.ndarray) -> Any:
        # read-only arrays (Arrow's zero-copy views of ragged values) are copied: a tensor
        # is always writable, and writing into Arrow's buffers would be undefined
        return torch.from_numpy(a if a.flags.writeable else a.copy())

    for name, value in batch.items():
        if value.dtype != object:
            out[name] = tensor(value)
        elif len(value) and isinstance(value[0], np.ndarray):
            out[name] = [tensor(v) for v in value]
        else:
            out[name] = value.tolist()
    return out


class TorchBatches(Adapter[dict[str, Any]]):
    """``loader.to_torch(...)``: iterate for ``dict[str, torch.Tensor]`` batches."""

    def __init__(self, loader: Loader, device: Any = None, prefetch: int = 2) -> None:
        torch = _torch()
        self.device = None if device is None else torch.device(device)
        self._cuda = self.device is not None and self.device.type == "cuda"
        if self._cuda and not torch.cuda.is_available():
            raise OptionError(f"device={device!r} but torch sees no CUDA device")
        on_host = self.device is None or self.device.type == "cpu"
        super().__init__(loader, depth=0 if on_host else prefetch)
        self._stream = torch.cuda.Stream(self.device) if self._cuda else None

    def _start(self, batch: Batch) -> Any:
        tensors = to_tensors(batch)
        if self.device is None or self.device.type == "cpu":
            return tensors, None
        torch = _torch()
        if not self._cuda:
            return {k: _move(v, lambda t: t.to(self.device)) for k, v in tensors.items()}, None
        with torch.cuda.stream(self._stream):
            moved = {
                k: _move(v, lambda t: t.pin_memory().to(self.device, non_blocking=True))
                for k, v in tensors.items()
            }
            done = torch.cuda.Event()
            done.record(self._stream)
        return moved, done

    def _finish(self, started: Any) -> dict[str, Any]:
        tensors, done = started
        if done is not None:
            torch = _torch()
            current = torch.cuda.current_stream(self.device)
            current.wait_event(done)
            for value in tensors.values():  # memory made on the side stream, used on this one
                _move(value, lambda t: t.record_stream(current))
        return tensors  # type: ignore[no-any-return]


def _move(value: Any, fn: Any) -> Any:
    torch = _torch()
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, list) and value and isinstance(value[0], torch.Tensor):
        return [fn(v) for v in value]
    return value


def _make_dataset_class() -> type:
    torch = _torch()

    class SnapshotDataset(torch.utils.data.IterableDataset):  # type: ignore[name-defined,misc]
        """A snapshot as a ``torch.utils.data.IterableDataset`` of whole batches.

        ``SnapshotDataset(url, storage_options=None, device=None, **loader_options)``; the
        loader options are those of :meth:`Snapshot.loader` (``batch_size=256``,
        ``shuffle``, ``seed``, ...) except ``rank``/``world_size``, which come from
        ``torch.distributed`` (or pass them explicitly) and are split further across
        DataLoader workers. Use ``DataLoader(dataset, batch_size=None)``.
        """

        def __init__(
            self,
            url: str,
            storage_options: dict[str, Any] | None = None,
            **loader_options: Any,
        ) -> None:
            super().__init__()
            from .snapshot import open as open_snapshot

            self.url, self.storage_options = str(url), storage_options
            self.loader_options = dict(loader_options)
            self.snapshot = open_snapshot(self.url, storage_options)
            self.epoch = 0
            self._loader: Loader | None = None
            self._loader_epoch = -1
            self.batch_size = int(self.loader_options.pop("batch_size", 256))
            self.rank, self.world_size = self._ranks()
            self.snapshot.loader(self.batch_size, **self._options(0, 1))  # validate options

        def _ranks(self) -> tuple[int, int]:
            rank = self.loader_options.pop("rank", "auto")
            world = self.loader_options.pop("world_size", "auto")
            if rank == "auto" or world == "auto":
                auto_rank, auto_world, _ = ranks.detect()
                rank = auto_rank if rank == "auto" else rank
                world = auto_world if world == "auto" else world
            return int(rank), int(world)

        def _options(self, part: int, parts: int) -> dict[str, Any]:
            return {**self.loader_options, "rank": part, "world_size": parts}

        def set_epoch(self, epoch: int) -> None:
            """The epoch the next iteration replays (its shuffle order)."""
            self.epoch = epoch

        def _worker_loader(self) -> Loader:
            info = torch.utils.data.get_worker_info()
            workers, worker = (1, 0) if info is None else (info.num_workers, info.id)
            if self._loader is None:
                part, parts = self.rank * workers + worker, self.world_size * workers
                self._loader = self.snapshot.loader(self.batch_size, **self._options(part, parts))
            if self.epoch != self._loader_epoch:
                # an explicit set_epoch since the last pass; otherwise epochs keep counting
                self._loader.set_epoch(self.epoch)
                self._loader_epoch = self.epoch
            return self._loader

        def __iter__(self) -> Any:
            loader = self._worker_loader()
            for batch in loader:
                yield to_tensors(batch)

    return SnapshotDataset


def __getattr__(name: str) -> Any:
    # SnapshotDataset subclasses torch's IterableDataset, so it is made on first use:
    # importing this module does not import torch.
    if name == "SnapshotDataset":
        cls = _make_dataset_class()
        globals()[name] = cls
        return cls
    raise AttributeError(name)
