"""TensorFlow: the loader as a ``tf.data.Dataset`` that keeps the loader's interface.

``loader.to_tf(features=None, label=None)`` returns a ``tf.data.Dataset`` of the loader's
batches, so Keras code that used ``dataset.snapshot(path)`` switches with one line::

    ds = snap.open("gs://b/snaps/train").loader(256).to_tf(features="image", label="label")
    model.fit(ds, epochs=10)  # every fit epoch is a new pass: a fresh shuffle

**Elements.** With ``label="y"`` each element is ``(x, y)``, what ``model.fit`` expects;
with ``label=None`` it is ``x`` alone. ``x`` is one tensor when ``features`` names one
column (a str), a ``{column: tensor}`` dict when it is a list, or, when it is None, a dict of
every column the loader reads except the label. A column that the snapshot lacks or the
loader does not read (``loader(columns=[...])``), or a label that is also a feature, raises
:class:`~snapshot_cli.errors.OptionError` here, naming it and listing the loader's columns.
The ``output_signature`` comes from the snapshot's schema: fixed-shape columns are
``TensorSpec((None, *shape), dtype)`` (the batch dimension is None: the last batch may be
partial unless ``drop_last=True``), ragged columns ``RaggedTensorSpec`` built from row
lengths (no Python loop over values), strings and bytes ``tf.string``. A loader with a
``map`` yields what the map returns: the columns and spec are then those of its first batch
(the loader is put back where it was; :mod:`.tf_elements`), and a later batch with another
dtype or row shape is a TypeError naming the column, raised inside TensorFlow's call.

**Passes.** Each pass over the dataset (each ``iter(ds)``, each Keras epoch) yields exactly
``len(loader)`` batches, so ``ds.cardinality()`` is known (``INFINITE_CARDINALITY`` for
``epochs=None``) and Keras knows its steps per epoch. A pass continues the loader's epoch
counter (a fresh shuffle every pass). When the loader's position is mid-epoch (a
``load_state_dict`` of a state saved mid-pass, or a pass broken off and started again) the
pass starts there and runs on across the epoch boundary into the next epoch: passes no
longer line up with snap epochs, but every snap epoch still holds each record once and the
stream of batches is the one an uninterrupted run would have seen.

**Exact resume.** ``ds.state_dict()``/``load_state_dict()`` (and ``set_epoch``, ``stats``,
``close``; ``len(ds)`` is the cardinality) work as on the other adapters: after a loop has
received k batches from ``iter(ds)``, the state points at the first batch it has not
received, and a fresh loader's ``to_tf()`` given that state continues with bit-identical
batches. TensorFlow calls into Python for each batch when its consumer asks for it, so the
loader hands out a batch only then, and its own state is the consumer's; a new iterator
after a pass broken off starts where the consumer was. This needs the elements to leave
the dataset only when the consumer asks for them: the dataset's options turn off
``inject_prefetch``, the tf.data default that otherwise puts an autotuned prefetch at the
end of the pipeline (measured: with the default options, ``from_generator`` had taken up to
4 batches when its consumer had 2; ``tests/readers/test_tf.py``). Whatever prefetches
downstream (``ds.prefetch(n)``, Keras's ``class_weight``, a multi-device ``tf.distribute``
strategy) takes batches early, and the state then counts those as received.
``load_state_dict`` and ``set_epoch`` move the loader for the next pass; an iterator made
before them fails if used again.

**A plain dataset with methods attached**, built with public API, ``state_dict`` & co. set
on the instance (:class:`TFBatches` holds the Python side): a subclass would have to
implement ``tf.data.Dataset``'s private constructor protocol, which changes between
releases, and Keras and every transformation hand on a plain dataset anyway. Keep the object
``to_tf()`` returned to save state.

**Cost.** Each call from TensorFlow into Python costs it 150-300 us whatever it returns,
and so does any function of a dataset's ``map`` that runs an operation (~120 us an element
on this kind of machine, TensorFlow 2.21): one call per batch, counted in Python, costs less
than batches taken 8 per call and counted by a ``tf.Variable`` in a ``map`` (265-280 against
355-365 us a batch over batches made in advance; ``docs/performance.md``). Numeric
columns (the loader's 64-byte aligned arrays, reused only once nothing refers to them) are
shared through DLPack; other arrays (unaligned or strided ``map`` output) are copied. The
options turn tf.data's autotuning off: there is nothing to tune, and with it on the last
``next()`` of a pass often waited ~2 s for the autotuning thread. Re-enable it
(``options.autotune.enabled = True``) if ``AUTOTUNE`` transformations follow.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .adapter import LoaderFacing, mapped_arrays
from .tf_elements import (
    batch_signature,
    check_batch,
    import_tf,
    output_signature,
    peek,
    ragged_parts,
    select_columns,
    to_tensor,
)

if TYPE_CHECKING:
    from .loader import Batch, Loader

SUPERSEDED = (
    "this pass over the dataset was superseded: load_state_dict, set_epoch or a newer "
    "iterator moved the loader; iterate again"
)


class TFBatches(LoaderFacing):
    """The Python side of ``loader.to_tf()``: its passes, and the state of its consumer.

    Each iterator over the dataset is a pass (:meth:`start_pass`) of exactly
    :meth:`cardinality` batches, from as many loader passes as it needs. TensorFlow calls
    :meth:`batch` once for each batch its consumer asks for (nothing reads ahead: see the
    module's docstring), so the loader is always where the consumer is.
    """

    def __init__(
        self,
        loader: Loader,
        features: str | Sequence[str] | None = None,
        label: str | None = None,
    ) -> None:
        self.loader, self.label = loader, label
        self.features = features if isinstance(features, str) else None
        # with a map, the batches' columns, dtypes and shapes are the map's: taken from the
        # first batch (the loader is put back where it was); else from the schema
        sample = peek(loader) if loader.map is not None else None
        sample = None if sample is None else mapped_arrays(sample)  # (tensors, lists: arrays)
        readable = None if sample is None else list(sample)
        self._first = frozenset(readable or ())  # (a map's first batch's columns)
        self.columns = select_columns(loader, features, label, readable)  # no TensorFlow yet
        self.names = self.columns + ([label] if label else [])  # the order of a batch's parts
        if sample is None:
            spec = output_signature(loader, self.names)
        else:
            spec = batch_signature(sample, self.names)
        self._spec = spec
        x = spec[self.features] if self.features else {c: spec[c] for c in self.columns}
        self.signature: Any = x if label is None else (x, spec[label])
        self._reading = _Reading(loader)  # the loader passes batches come from
        self._pass = 0  # number of the newest pass; an older one may no longer read
        self._batches: Iterator[Batch] | None = None  # the newest pass's batches

    def cardinality(self) -> int:
        """Batches per pass: ``len(loader)``, or infinite (-1) for ``epochs=None``."""
        if self.loader.batches_per_epoch() == 0:
            return 0
        if self.loader.epochs is None:
            return int(import_tf().data.INFINITE_CARDINALITY)
        return len(self.loader)

    def start_pass(self) -> int:
        """A new iterator over the dataset: a pass starts where the consumer is (an older
        pass, an iterator dropped early, reads no more); its number."""
        self._reading.stop()
        self._pass += 1
        self._batches = self._reading.batches(self.cardinality())
        return self._pass

    def batch(self, pass_number: Any) -> list[Any]:
        """The next batch of pass ``pass_number`` as its columns' tensors (a ragged column
        as its values and row lengths), in :attr:`names` order."""
        if int(pass_number) != self._pass or self._batches is None:
            raise RuntimeError(SUPERSEDED)
        batch = next(self._batches, None)
        if batch is None:  # (the cardinality is len(loader): a loader that yields fewer)
            raise RuntimeError(
                f"the loader ended its pass early: to_tf() expected {self.cardinality()} "
                "batches a pass (len(loader))"
            )
        if self.loader.map is not None:
            batch = mapped_arrays(batch)
            check_batch(batch, self._spec, self.names, self._first)
        parts: list[Any] = []
        tf = import_tf()
        for name in self.names:
            spec, value = self._spec[name], batch[name]
            if isinstance(spec, tf.RaggedTensorSpec):
                parts += ragged_parts(value, spec.dtype.as_numpy_dtype, spec.ragged_rank)
            else:
                parts.append(to_tensor(value, spec))
        return parts

    def types(self) -> list[Any]:
        """What :meth:`batch` returns, as TensorFlow dtypes."""
        tf = import_tf()
        one: list[Any] = []
        for spec in (self._spec[n] for n in self.names):
            ragged = isinstance(spec, tf.RaggedTensorSpec)
            one += [spec.dtype, *[tf.int64] * spec.ragged_rank] if ragged else [spec.dtype]
        return one

    def element(self) -> Any:
        """A function of :meth:`batch`'s tensors to the element (``x`` or ``(x, label)``),
        shapes set and ragged columns made ``RaggedTensor``; it holds none of this object.
        (Traced once, in the dataset's map.)"""
        tf = import_tf()
        names, specs = list(self.names), [self._spec[n] for n in self.names]
        features, columns, label = self.features, list(self.columns), self.label

        def element(*parts: Any) -> Any:
            got, at = {}, 0
            for name, spec in zip(names, specs, strict=True):
                if isinstance(spec, tf.RaggedTensorSpec):
                    values, *lengths = parts[at : at + 1 + spec.ragged_rank]
                    for part in (values, *lengths):
                        part.set_shape([None])
                    at += 1 + spec.ragged_rank
                    # (the lengths were made from the values: no checks)
                    got[name] = tf.RaggedTensor.from_nested_row_lengths(
                        values, lengths, validate=False
                    )
                else:
                    parts[at].set_shape(spec.shape)
                    got[name] = parts[at]
                    at += 1
            x = got[features] if features else {c: got[c] for c in columns}
            return x if label is None else (x, got[label])

        return element

    # the loader's interface ------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Where the consumer is: the first batch it has not received (the loader's own
        place: it hands out a batch only when the consumer asks for it)."""
        return self.loader.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue exactly where ``state`` was taken; the next pass starts there."""
        self._moved()
        self.loader.load_state_dict(state)

    def set_epoch(self, epoch: int) -> None:
        """Start the next pass at the beginning of ``epoch``."""
        self._moved()
        self.loader.set_epoch(epoch)

    def _moved(self) -> None:
        self._reading.stop()
        self._pass += 1  # an iterator made before fails if used again
        self._batches = None

    def close(self) -> None:
        """Stop the loader's threads (a later pass starts them again)."""
        self._reading.stop()
        self.loader.close()


class _Reading:
    """The loader passes a :class:`TFBatches` takes its batches from. Apart from it, so that
    the generator of a pass holds this, not the TFBatches: a dataset dropped with its
    iterators frees both at once, and the loader's pass stops (the generator would make a
    cycle with the TFBatches, freed only by the cyclic garbage collector)."""

    def __init__(self, loader: Loader) -> None:
        self.loader = loader
        self.pass_: Iterator[Batch] | None = None  # the loader's pass under way

    def stop(self) -> None:
        if self.pass_ is not None:
            reading, self.pass_ = self.pass_, None
            reading.close()  # type: ignore[attr-defined]  # a generator: stops its threads

    def batches(self, n: int) -> Iterator[Batch]:
        """``n`` batches (-1: endless) from as many loader passes as they take."""
        remaining = None if n < 0 else n
        while remaining is None or remaining > 0:
            fresh = self.pass_ is None
            if self.pass_ is None:
                self.pass_ = iter(self.loader)
            batch = next(self.pass_, None)
            if batch is None:  # the loader's pass ended; this pass goes on into the next
                self.pass_ = None
                if fresh:
                    return  # the loader yields nothing at all: nothing more will come
                continue
            if remaining is not None:
                remaining -= 1
                if not remaining:  # the pass's last: no thread runs on (the loader keeps its
                    self.stop()  # place; TensorFlow may never ask for one more)
            yield batch


def _weak(batches: TFBatches, name: str) -> Any:
    """``batches.name`` as a function that holds ``batches`` weakly. TensorFlow keeps the
    functions of a dataset's ``py_function`` and ``flat_map`` for as long as it likes (past
    the dataset and its iterators): holding the TFBatches, they kept its loader's pass
    reading, with its threads and windows, after a Keras epoch dropped its iterator."""
    ref = weakref.ref(batches)

    def call(*args: Any) -> Any:
        me = ref()
        if me is None:  # (an iterator keeps its dataset, and the dataset the TFBatches)
            raise RuntimeError("the dataset of this iterator is gone")
        return getattr(me, name)(*args)

    return call


def to_dataset(
    loader: Loader, features: str | Sequence[str] | None = None, label: str | None = None
) -> Any:
    """See the module docstring."""
    batches = TFBatches(loader, features, label)  # bad column names fail before the import
    tf = import_tf()
    n = batches.cardinality()
    types = batches.types()
    batch, start_pass = (_weak(batches, m) for m in ("batch", "start_pass"))
    element = batches.element()

    def one_pass(number: Any) -> Any:
        def take(_: Any) -> Any:
            return element(*tf.py_function(batch, [number], types))

        return tf.data.Dataset.range(n if n >= 0 else np.iinfo(np.int64).max).map(take)

    start = tf.data.Dataset.from_tensors(np.int64(0))
    ds = start.map(lambda _: tf.py_function(start_pass, [], tf.int64)).flat_map(one_pass)
    ds = ds.apply(tf.data.experimental.assert_cardinality(n))
    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = False  # no element read ahead
    options.autotune.enabled = False  # nothing to tune here; see "Cost" in the docstring
    ds = ds.with_options(options)
    for name in ("state_dict", "load_state_dict", "set_epoch", "stats", "close"):
        setattr(ds, name, getattr(batches, name))
    ds.loader = loader
    return ds
