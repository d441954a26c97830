"""What the framework adapters share: delegation to the loader, and copies started ahead.

An adapter wraps a :class:`~.loader.Loader`: iterating it iterates the loader and converts
each numpy batch (to torch tensors, jax arrays, ...). :class:`Adapter` keeps the loader's
``state_dict``/``load_state_dict``, ``stats``, ``set_epoch``, ``len`` and ``close`` working
through the wrapper. With ``depth`` > 0 the conversion of batch N+1.. N+depth is started
before batch N is handed out (:func:`ahead`), so an asynchronous host-to-device copy overlaps
the training step; ``state_dict()`` still points at the first batch the consumer has not
seen, not at the loader's position, so a resume skips and repeats nothing.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ..keywords import LOADER_INSTEAD, checked_keywords, no_attribute
from ..units import integer

if TYPE_CHECKING:
    from .jax import JaxBatches
    from .loader import Batch, Loader
    from .torch_batches import TorchBatches

T = TypeVar("T")
U = TypeVar("U")


def ahead(
    source: Iterable[T],
    start: Callable[[T], U],
    depth: int,
    mark: Callable[[], Any] | None = None,
) -> Iterator[tuple[U, Any]]:
    """Yield ``start(item)`` for each item, in order, having started the next ``depth`` items.

    ``mark()`` is called just after each item is taken from ``source``; its result travels
    with the item (the adapters record the loader's state there). What ``start`` raises for
    an item, or ``source`` as it makes one, is raised in that item's turn, after the items
    before it, and no item after it is started: a batch the consumer could have had is not
    lost to an error of a later one.
    """
    pending: deque[tuple[U, Any]] = deque()
    failed: Exception | None = None
    items = iter(source)
    while True:
        try:  # (the loader's own error, a map's: raised after the items before it too; it
            item = next(items)  # came at once, up to depth batches early, a probe)
        except StopIteration:
            break
        except Exception as err:  # noqa: BLE001 - raised below, in its turn
            failed = err
            break
        try:
            started = start(item)
        except Exception as err:  # noqa: BLE001 - raised below, in its turn
            failed = err
            break
        pending.append((started, mark() if mark is not None else None))
        if len(pending) > depth:
            yield pending.popleft()
    while pending:
        yield pending.popleft()
    if failed is not None:
        raise failed


NOT_PICKLABLE = (
    "a snap {what} cannot be pickled or copied (it holds read threads and buffers): send the "
    "snapshot's URL and the loader's options instead and call snap.open(url).loader(...) in "
    "the process that reads, or call it again here for a second loader (loader.state_dict() "
    "carries its position); for a torch DataLoader with workers use "
    "snapshot_cli.readers.torch.SnapshotDataset"
)


NOT_INDEXED = (
    "a {what} is iterated, not indexed: for batch in loader. A torch DataLoader takes a "
    "Dataset: snapshot_cli.readers.torch.SnapshotDataset(url, batch_size=...) with "
    "DataLoader(dataset, batch_size=None, num_workers=N); or iterate loader.to_torch() itself"
)


class LoaderFacing:
    """What every wrapper of a loader answers straight from it (its length and stats)."""

    loader: Loader

    def __reduce__(self) -> Any:
        raise TypeError(NOT_PICKLABLE.format(what=type(self).__name__))

    def __getitem__(self, index: object) -> Any:  # what a torch DataLoader given it asks
        raise TypeError(NOT_INDEXED.format(what=type(self).__name__))

    def stats(self) -> dict[str, Any]:
        return self.loader.stats()

    def __len__(self) -> int:
        return len(self.loader)


class Consumer:
    """Where the consumer of an adapter's batches is (None: where the loader is), kept by
    the loader the adapter iterates, with no reference back to the adapter: the adapter of
    ``for b in loader.to_jax(): break`` is gone once the loop is, its consumer's place not."""

    state: dict[str, Any] | None = None

    def at(self, position: dict[str, Any]) -> dict[str, Any] | None:
        """Where the consumer is, the loader being at ``position``."""
        return self.state


class Adapter(LoaderFacing, Generic[U]):
    """Iterates ``loader`` converting each batch with :meth:`_start` / :meth:`_finish`."""

    def __init__(self, loader: Loader, depth: int = 0) -> None:
        self.loader, self.depth = loader, self.checked_prefetch(depth)
        self._consumer = Consumer()  # (set while iterating and after a pass broken off)
        self._loaded_epoch: int | None = None  # a state's epoch, loaded since a pass began

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.loader!r}, prefetch={self.depth})"

    @staticmethod
    def checked_prefetch(depth: object) -> int:
        """``prefetch`` if it is an integer >= 0; else an OptionError."""
        depth = integer(depth)
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
            from ..errors import OptionError

            raise OptionError(f"prefetch must be an integer >= 0, got {depth!r}")
        return depth

    # conversion: override -------------------------------------------------------------

    def _start(self, batch: Batch) -> Any:
        """Begin converting ``batch`` (an asynchronous copy may start here)."""
        return batch

    def _finish(self, started: Any) -> U:
        """Complete the conversion just before the batch is handed out."""
        return started

    # iteration -------------------------------------------------------------------------

    def __iter__(self) -> Iterator[U]:
        # A pass (this adapter's, another's over the loader) stopped early with batches in
        # flight: the loader is ahead of the consumer. Start again where the consumer is.
        self._loaded_epoch = None
        loader = self.loader
        loader.go_back_to_consumer()
        # Where the consumer is until its first batch (an interrupt before that batch is
        # handed out, with batches already taken from the loader, must not skip them).
        consumer = self._consumer
        consumer.state = loader._position()
        batches = loader._one_pass()  # (iter(loader) would make the loop its consumer)
        loader.followed_by(consumer)
        for started, state_after in ahead(batches, self._start, self.depth, loader._position):
            out = self._finish(started)
            consumer.state = state_after
            yield out
        consumer.state = None  # the pass ended: the loader and the consumer agree

    # the loader's interface, through the wrapper --------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Where the consumer is: the first batch it has not received from this adapter.

        While batches are in flight the loader is ahead of the consumer, so this is the
        loader's state recorded when the batch last handed out was taken from it (the
        loader's own ``state_dict()`` says the same: :meth:`FrameworkAdapters.consumer`).
        """
        return self.loader.state_dict()

    # (moving the loader drops where the consumer of a pass broken off was: the next pass
    # starts where it was moved to, not back there)
    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loader.load_state_dict(state)  # (the loader forgets the consumer's place)
        self._loaded_epoch = state["epoch"]

    def set_epoch(self, epoch: int) -> None:
        self.loader.set_epoch(epoch)
        self._loaded_epoch = None

    batch_sampler = None  # (a DataLoader's, beside its sampler: Lightning reads both)

    @property
    def sampler(self) -> EpochStart:
        """What a trainer that calls ``dataloader.sampler.set_epoch(e)`` as each of its epochs
        starts (Lightning, for its training and validation loaders) moves the adapter with:
        see :class:`EpochStart`."""
        return EpochStart(self)

    def close(self) -> None:
        self.loader.close()

    def __enter__(self) -> Adapter[U]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class EpochStart:
    """``set_epoch(e)``: the trainer's epoch ``e`` starts. The next pass starts at epoch
    ``e``'s first batch (as a torch DataLoader's would: a validation pass after Lightning's
    sanity check of 2 batches is the whole epoch, a training epoch cut by
    ``limit_train_batches`` the start of its own, a run resumed from a checkpoint at an
    epoch's end the next epoch), unless a state of epoch ``e`` was loaded since the last
    pass began: a run resumed mid-epoch goes on from there."""

    def __init__(self, adapter: Adapter[Any]) -> None:
        self.adapter = adapter

    def set_epoch(self, epoch: int) -> None:
        if self.adapter._loaded_epoch != epoch:
            self.adapter.set_epoch(epoch)
        else:  # the loader keeps the loaded position, or starts epoch e after a state taken
            self.adapter.loader.set_epoch(epoch)  # at its end (resume.keeps_position)


class FrameworkAdapters:
    """The loader's ``to_torch`` / ``to_jax`` / ``to_tf``: each imports its framework only
    when called (a mixin of :class:`~.loader.Loader`), and where their consumer is.

    An adapter takes batches ahead of its consumer (``prefetch``, TensorFlow's chunks), so
    a pass broken off leaves the loader ahead of the consumer. The adapter that last
    iterated the loader says where its consumer is (:meth:`followed_by`), and the loader's
    ``state_dict()`` and next pass, by any adapter or the loader itself, start there: a new
    adapter (a notebook cell run again) skipped the batches the last one took ahead."""

    _consumer: Consumer | None = None

    if TYPE_CHECKING:
        _loaded: bool

        def _position(self) -> dict[str, Any]: ...
        def load_state_dict(self, state: dict[str, Any]) -> None: ...
        def _one_pass(self) -> Iterator[Batch]: ...

    def __iter__(self) -> Iterator[Batch]:
        """One pass (:meth:`~.loader.Loader._one_pass`), whose consumer is the loop over the
        loader itself: it starts where an adapter's consumer stopped, and is then where the
        loader is (an adapter takes its pass with ``_one_pass``, not ``iter()``)."""
        self.go_back_to_consumer()
        self._consumer = None
        return self._one_pass()

    def consumer(self) -> dict[str, Any] | None:
        """Where the consumer of the adapter that last iterated this loader is, while an
        adapter's pass runs or after one broken off; None when no adapter's is."""
        at = None if self._consumer is None else self._consumer.at(self._position())
        return dict(at) if at is not None else None

    def followed_by(self, consumer: Consumer) -> None:
        """From now on ``consumer`` says where the consumer is."""
        self._consumer = consumer

    def go_back_to_consumer(self) -> None:
        """Back to where the consumer is, if behind the loader (before a pass): the same
        loop again, not a resume, so after a pass's last batch the next pass follows."""
        at = self.consumer()
        if at is not None and at != self._position():
            self.load_state_dict(at)  # (which forgets the consumer: the loader is there)
            self._loaded = False

    def __reduce__(self) -> Any:  # (pickle, copy, multiprocessing, Ray: all ask here first)
        raise TypeError(NOT_PICKLABLE.format(what=type(self).__name__))

    def __getattr__(self, name: str) -> Any:  # only for names it does not have
        if name.startswith("_"):  # (copy, __del__ of a half-made loader, hasattr() probes)
            raise AttributeError(name, name=name, obj=self)
        raise no_attribute(self, name, LOADER_INSTEAD)

    def __getitem__(self, index: object) -> Any:  # what a torch DataLoader given it asks
        raise TypeError(NOT_INDEXED.format(what=type(self).__name__))

    @checked_keywords
    def to_torch(self, device: Any = None, prefetch: int = 2) -> TorchBatches:
        """``dict[str, torch.Tensor]`` batches, copied to ``device`` ahead.

        Args:
            device: a torch device (``"cuda"``, ``"cuda:1"``, ``"mps"``, a ``torch.device``);
                None or ``"cpu"``: tensors sharing the numpy batches' memory, no copy.
            prefetch: batches copied to ``device`` ahead of the one in use (a CUDA copy on a
                side stream overlaps the step); an integer >= 0, unused on the CPU.

        What each column becomes: readers/torch.py's docstring; the copies: torch_batches.py.
        """
        from .torch_batches import TorchBatches

        return TorchBatches(self, device=device, prefetch=prefetch)  # type: ignore[arg-type]

    @checked_keywords
    def to_jax(self, sharding: Any = None, prefetch: int = 2) -> JaxBatches:
        """``dict[str, jax.Array]`` batches placed ahead of use; see readers/jax.py.

        Args:
            sharding: None (the default device), a ``jax.Device``, or a
                ``jax.sharding.Sharding`` (``NamedSharding(mesh, PartitionSpec("batch"))``)
                splitting every column along the batch axis; a batch that cannot split is an
                OptionError when the adapter is made.
            prefetch: batches handed to ``jax.device_put`` ahead of the one in use (an
                integer >= 0): their transfer overlaps the step.
        """
        from .jax import JaxBatches

        return JaxBatches(self, sharding=sharding, prefetch=prefetch)  # type: ignore[arg-type]

    @checked_keywords
    def to_tf(self, features: str | list[str] | None = None, label: str | None = None) -> Any:
        """A ``tf.data.Dataset`` of ``x`` or ``(x, label)`` batches; see readers/tf.py.

        ``x`` is the tensor of ``features`` (a column name) or a dict (a list of names, or
        None: every column but the label). Each pass yields ``len(self)`` batches, and the
        dataset keeps ``state_dict``/``load_state_dict``/``set_epoch``/``stats``/``close``.
        """
        from .tf import to_dataset

        return to_dataset(self, features=features, label=label)  # type: ignore[arg-type]
