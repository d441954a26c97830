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
batches. TensorFlow takes CHUNK (8) batches from the loader per call into Python, so the
loader runs up to 7 batches ahead of the consumer; the dataset counts what its consumer has
taken (a ``tf.Variable`` incremented as each element leaves it), and the state is the
loader's state recorded after that many batches. A new iterator after a pass broken off
starts where the consumer was, not where the loader is. This needs the elements to leave
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

**Cost.** Each call from TensorFlow into Python costs it 150-300 us whatever it returns:
batches go over 8 per call. One call a batch, counted in Python, costs TensorFlow less over
batches made in advance (265-297 against 355-406 us a batch: the counting ``map`` alone
~130), but beside the loader's threads it ran slower: alternating on a quiet machine
(``benchmarks/device.py``, 2026-12-01) 0.49-0.52 of the bare loader against 0.57-0.58
uncompressed, 0.62-0.63 against 0.65 with lz4, 0.87 against 0.84-0.86 with zstd
(``docs/performance.md``). Numeric
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

from .adapter import Consumer, LoaderFacing
from .map_arrays import mapped_arrays
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
from .tf_passes import Reading

if TYPE_CHECKING:
    from .loader import Batch, Loader

# Batches TensorFlow takes from Python per call: each call back into Python costs TensorFlow
# 150-300 us whatever it returns (measured), 2 to 4 times what one batch then costs it.
CHUNK = 8
SUPERSEDED = (
    "this pass over the dataset was superseded: load_state_dict, set_epoch or a newer "
    "iterator moved the loader; iterate again"
)


class _Consumer(Consumer):
    """Where a dataset's consumer is (kept by the loader: see :class:`.adapter.Consumer`):
    the loader's state before and after each batch of the last chunk and the number of the
    chunk's first batch in its pass (None: the loader is where the consumer is), and
    TensorFlow's count of the batches the consumer got."""

    chunk: tuple[list[dict[str, Any]], int] | None = None
    delivered: Any = None  # tf.Variable

    def at(self, position: dict[str, Any]) -> dict[str, Any] | None:
        # Only where the last chunk left the loader: else it was moved since (iterated
        # itself between two passes of the dataset, or given another place), and a
        # consumer's place from before would put it back (a pass after a pass of the
        # loader's own was empty: TensorFlow's "expected to contain N elements").
        if self.chunk is None or self.delivered is None or position != self.chunk[0][-1]:
            return None
        states, first = self.chunk
        at = int(self.delivered.numpy()) - first
        return states[at] if 0 <= at < len(states) else None


class TFBatches(LoaderFacing):
    """The Python side of ``loader.to_tf()``: its passes, and the state of its consumer.

    Each iterator over the dataset is a pass (:meth:`start_pass`) of exactly
    :meth:`cardinality` batches, from as many loader passes as it needs. TensorFlow calls
    :meth:`chunk` for CHUNK batches at a time and counts those its consumer received
    (``delivered``): :meth:`state_dict` is where the consumer is, not the loader.
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
        self.names = self.columns + ([label] if label else [])  # the order of a chunk's parts
        if sample is None:
            spec = output_signature(loader, self.names)
        else:
            spec = batch_signature(sample, self.names)
        self._spec = spec
        x = spec[self.features] if self.features else {c: spec[c] for c in self.columns}
        self.signature: Any = x if label is None else (x, spec[label])
        self._reading = Reading(loader)  # the loader passes batches come from
        self._pass = 0  # number of the newest pass; an older one may no longer read
        self._batches: Iterator[Batch] | None = None  # the newest pass's batches
        self.delivered: Any = None  # tf.Variable: batches the newest pass's consumer got
        self.current: Any = None  # tf.Variable: the newest pass's number
        self._consumer = _Consumer()
        self._failed: Exception | None = None  # raised by the next chunk (see chunk)

    def cardinality(self) -> int:
        """Batches per pass: ``len(loader)``, or infinite (-1) for ``epochs=None``."""
        if self.loader.batches_per_epoch() == 0:
            return 0
        if self.loader.epochs is None:
            return int(import_tf().data.INFINITE_CARDINALITY)
        return len(self.loader)

    def start_pass(self) -> int:
        """A new iterator over the dataset: the loader is put back where the consumer is
        (a pass broken off mid-chunk leaves it ahead), then a pass starts; its number."""
        consumer = self.loader.consumer()  # this dataset's, or another adapter's
        self._reading.stop()  # an abandoned pass (an iterator dropped early) reads no more
        if consumer is not None and consumer != self.loader._position():
            self.loader.load_state_dict(consumer)
        self._pass, self._consumer.chunk, self._failed = self._pass + 1, None, None
        self.loader.followed_by(self._consumer)
        self._batches = self._reading.batches(self.cardinality())
        if self.delivered is not None:
            self.delivered.assign(0)
            self.current.assign(self._pass)
        return self._pass

    def chunk(self, pass_number: Any, index: Any) -> list[Any]:
        """Chunk ``index`` of pass ``pass_number``: each of up to CHUNK batches as its
        columns' tensors (a ragged column as values and row lengths), empty ones after the
        pass's last batch, then how many batches it holds."""
        if (failed := self._failed) is not None and int(pass_number) == self._pass:
            self._failed = None  # (the batches before it went first)
            raise failed
        if int(pass_number) != self._pass or self._batches is None:
            raise RuntimeError(SUPERSEDED)
        states = [self.loader._position()]
        batches: list[Batch] = []
        for _ in range(CHUNK):
            try:
                batch = next(self._batches, None)
                if batch is not None and self.loader.map is not None:
                    batch = mapped_arrays(batch)
                    check_batch(batch, self._spec, self.names, self._first)
            except Exception as err:  # noqa: BLE001 - raised by the next call, in its turn
                if not batches:
                    raise
                self._failed, self._batches = err, None  # (batches 8-14 of a map failing on
                break  # 15 were made and lost: the loop got 8, and the state said 15)
            if batch is None:
                break
            batches.append(batch)
            states.append(self.loader._position())
        parts: list[Any] = []
        for k in range(CHUNK):
            batch = batches[k] if k < len(batches) else None
            for name in self.names:
                parts += self._parts(None if batch is None else batch[name], self._spec[name])
        self._consumer.chunk = (states, int(index) * CHUNK)
        return [*parts, np.int64(len(batches))]

    def _parts(self, value: np.ndarray | None, spec: Any) -> list[Any]:
        tf = import_tf()
        if isinstance(spec, tf.RaggedTensorSpec):
            none = np.empty(0, object)  # a batch after the pass's last: no rows
            given = none if value is None else value
            return ragged_parts(given, spec.dtype.as_numpy_dtype, spec.ragged_rank)
        if value is None:
            shape = [0 if d is None else d for d in spec.shape.as_list()]
            return [tf.zeros(shape, spec.dtype)]
        return [to_tensor(value, spec)]

    def types(self) -> list[Any]:
        """What :meth:`chunk` returns, as TensorFlow dtypes."""
        tf = import_tf()
        one: list[Any] = []
        for spec in (self._spec[n] for n in self.names):
            ragged = isinstance(spec, tf.RaggedTensorSpec)
            one += [spec.dtype, *[tf.int64] * spec.ragged_rank] if ragged else [spec.dtype]
        return one * CHUNK + [tf.int64]

    def split(self, *parts: Any) -> Any:
        """A chunk (:meth:`chunk`'s tensors) as a dataset of its batches, each a
        ``{column: tensor}`` dict, a ragged column still its values and row lengths (made a
        ``RaggedTensor`` by :meth:`element`, traced once, not once per batch of a chunk:
        eight ragged constructions per column took ``to_tf()`` 4 s to build and its first
        batch 6 s more with three ragged columns)."""
        tf = import_tf()
        elements: Any = None
        at = 0
        for _ in range(CHUNK):
            columns: dict[str, Any] = {}
            for name in self.names:
                spec = self._spec[name]
                if isinstance(spec, tf.RaggedTensorSpec):
                    rank = spec.ragged_rank
                    columns[name] = tuple(parts[at : at + 1 + rank])
                    for part in columns[name]:
                        part.set_shape([None])
                    at += 1 + rank
                else:
                    parts[at].set_shape(spec.shape)
                    columns[name] = parts[at]
                    at += 1
            one = tf.data.Dataset.from_tensors(columns)
            elements = one if elements is None else elements.concatenate(one)
        return elements.take(parts[-1])

    def element(self) -> Any:
        """A function of :meth:`split`'s dicts to the elements (``x`` or ``(x, label)``),
        ragged columns made ``RaggedTensor``; it holds none of this object."""
        tf = import_tf()
        ragged = {n for n in self.names if isinstance(self._spec[n], tf.RaggedTensorSpec)}
        features, columns, label = self.features, list(self.columns), self.label

        def element(parts: dict[str, Any]) -> Any:
            got = {}
            for name, value in parts.items():
                if name in ragged:  # (the lengths were made from the values: no checks)
                    values, *lengths = value
                    value = tf.RaggedTensor.from_nested_row_lengths(values, lengths, validate=False)
                got[name] = value
            x = got[features] if features else {c: got[c] for c in columns}
            return x if label is None else (x, got[label])

        return element

    # the loader's interface ------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Where the consumer is: the first batch it has not received (see the docstring);
        the loader's own place once something else moved it (the loader iterated itself)."""
        return self.loader.state_dict()  # (which asks this dataset's consumer, or a newer's)

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
        self._pass += 1
        self._batches, self._consumer.chunk, self._failed = None, None, None
        if self.current is not None:
            self.current.assign(self._pass)  # an iterator made before fails if used again

    def close(self) -> None:
        """Stop the loader's threads (a later pass starts them again)."""
        self._reading.stop()
        self.loader.close()


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
    with tf.init_scope():
        batches.delivered = tf.Variable(0, dtype=tf.int64, trainable=False)
        batches._consumer.delivered = batches.delivered
        batches.current = tf.Variable(0, dtype=tf.int64, trainable=False)
    n = batches.cardinality()
    # (one chunk more than the pass needs: an error met in its last chunk after batches it
    # hands over is raised by the next call; it is empty otherwise, and ends the pass)
    chunks = tf.data.Dataset.range(-(-n // CHUNK) + 1 if n >= 0 else np.iinfo(np.int64).max)
    types = batches.types()
    delivered, current = batches.delivered, batches.current  # (no closure holds `batches`)
    chunk, split, start_pass = (_weak(batches, m) for m in ("chunk", "split", "start_pass"))
    element = batches.element()

    def one_pass(number: Any) -> Any:
        def counted(parts: dict[str, Any]) -> Any:  # the consumer takes it: one more delivered
            # (a dataset function runs its stateful ops, whatever its outputs depend on)
            tf.debugging.assert_equal(number, current, message=SUPERSEDED)
            delivered.assign_add(1)
            return element(parts)

        calls = chunks.map(lambda i: tuple(tf.py_function(chunk, [number, i], types)))
        calls = calls.take_while(lambda *parts: parts[-1] > 0)
        return calls.flat_map(split).map(counted)

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
