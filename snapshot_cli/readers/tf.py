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
lengths (no Python loop over values), strings and bytes ``tf.string``.

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
batches. This holds because TensorFlow takes a batch from the loader only when its consumer
asks for one: there is no ``prefetch`` here (snap's own threads already read, shuffle and
batch ahead), and the dataset's options turn off ``inject_prefetch``, the tf.data default
that otherwise puts an autotuned prefetch at the end of the pipeline (measured: with the
default options, ``from_generator`` had taken up to 4 batches when its consumer had 2;
``tests/readers/test_tf.py``). Whatever prefetches downstream (``ds.prefetch(n)``, Keras's
``class_weight``, a multi-device ``tf.distribute`` strategy) takes batches early, and the
state then counts those as received. ``load_state_dict`` and ``set_epoch`` move the loader
for the next pass; an iterator made before them fails if used again.

**Why a plain dataset with methods attached, not a subclass.** The object returned is the
``tf.data.Dataset`` that ``from_generator`` -> ``assert_cardinality`` -> ``with_options``
built with public API, with ``state_dict`` & co. set on the instance (:class:`TFBatches`
holds the Python side). A subclass of ``tf.data.Dataset`` would have to implement its
private constructor protocol (``_variant_tensor``, ``_inputs``), which changes between
releases, and would gain nothing: Keras, ``tf.distribute`` and every transformation
(``ds.map``) hand on a plain dataset anyway, and a dataset passed through a ``tf.function``
is rebuilt from its type spec. Keep the object ``to_tf()`` returned to save state.

**Cost.** TensorFlow calls back into Python once per batch. Numeric columns (the loader's
64-byte aligned arrays, which it reuses only once nothing refers to them) are handed over
without a copy through DLPack; other arrays
(unaligned or strided output of a ``map``) are copied by TensorFlow. The options also turn
tf.data's autotuning off: this pipeline has nothing to tune, and with it on, the last
``next()`` of a pass often waited for the autotuning thread's next wake-up (~2 s here, the
pass ending at 5.1 s every time). Re-enable it (``options.autotune.enabled = True``) if
``AUTOTUNE`` transformations follow. ``benchmarks/device.py`` compares the rate with the
bare loader.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import schema as schema_mod
from ..errors import OptionError
from .adapter import LoaderFacing
from .window import ALIGN

if TYPE_CHECKING:
    from .loader import Batch, Loader


def _tf() -> Any:
    try:
        import tensorflow as tf
    except ImportError as err:
        raise ImportError(
            "the TensorFlow adapter needs tensorflow: pip install 'arrowsnap[tf]'"
        ) from err
    return tf


def output_signature(loader: Loader, columns: Sequence[str] | None = None) -> dict[str, Any]:
    """``{column: TensorSpec | RaggedTensorSpec}`` of ``columns`` (default: all it reads)."""
    tf = _tf()
    schema = loader.schema
    out: dict[str, Any] = {}
    for name in loader.columns if columns is None else columns:
        d = schema_mod.describe_type(schema.field(name).type)
        if d["kind"] in ("string", "binary"):
            out[name] = tf.TensorSpec((None,), tf.string)
        elif d["kind"] == "ragged":
            dtype = tf.as_dtype(np.dtype(d["dtype"]))
            out[name] = tf.RaggedTensorSpec(
                (None, *([None] * len(d["shape"]))), dtype, ragged_rank=1
            )
        elif d["kind"] in ("tensor", "scalar"):
            out[name] = tf.TensorSpec((None, *d["shape"]), tf.as_dtype(np.dtype(d["dtype"])))
        else:
            raise TypeError(
                f"column {name!r} ({d['dtype']}) has no TensorFlow form; read the others with "
                "loader(columns=[...])"
            )
    return out


def select_columns(
    loader: Loader, features: str | Sequence[str] | None, label: str | None
) -> list[str]:
    """The feature columns that ``features``/``label`` name; raises OptionError if unusable."""
    readable = list(loader.columns)

    def check(name: object, role: str) -> str:
        if not isinstance(name, str):
            raise OptionError(f"{role} must be a column name (a str), got {name!r}")
        if name in readable:
            return name
        if name in loader.schema.names:
            raise OptionError(
                f"{role} column {name!r} is not read by this loader, which reads {readable}: "
                "add it to loader(columns=[...])"
            )
        raise OptionError(f"unknown {role} column {name!r}; the loader reads {readable}")

    if label is not None:
        check(label, "label")
    if features is None:
        names = [c for c in readable if c != label]
        if not names:
            raise OptionError(
                f"no feature columns: the loader reads only {readable}, all taken by the label"
            )
        return names
    if isinstance(features, str):
        names = [check(features, "feature")]
    elif isinstance(features, Sequence) and features:
        names = [check(c, "feature") for c in features]
    else:
        raise OptionError(
            f"features must be a column name, a non-empty list of them or None, got {features!r}"
        )
    repeated = sorted({c for c in names if names.count(c) > 1})
    if repeated:
        raise OptionError(f"features name {repeated} more than once")
    if label in names:
        others = [c for c in readable if c != label]
        raise OptionError(
            f"column {label!r} is both the label and a feature; choose features from {others}"
        )
    return names


def to_tensor(value: np.ndarray, spec: Any) -> Any:
    """One column of a batch in TensorFlow's form; numeric arrays shared when TF can."""
    tf = _tf()
    if isinstance(spec, tf.RaggedTensorSpec):
        lengths = np.fromiter((len(v) for v in value), np.int64, len(value))
        flat = np.concatenate(value) if len(value) else np.zeros((0,), spec.dtype.as_numpy_dtype)
        return tf.RaggedTensor.from_row_lengths(flat, lengths)
    if spec.dtype == tf.string:
        return tf.constant(list(value), tf.string)
    if (
        value.size
        and value.flags.c_contiguous
        and value.ctypes.data % ALIGN == 0  # TensorFlow aborts the process on unaligned data
        and value.dtype.isnative
        and value.dtype.kind in "biufc"
    ):
        # No copy: the tensor holds the array, and the loader reuses a batch's memory only
        # once nothing refers to it (slabs.WindowPool).
        with contextlib.suppress(BufferError, TypeError, ValueError):
            return tf.experimental.dlpack.from_dlpack(value.__dlpack__())
    return value  # from_generator copies it into a tensor


class TFBatches(LoaderFacing):
    """The Python side of ``loader.to_tf()``: calling it is one pass over the dataset.

    ``from_generator`` calls it for each new iterator over the dataset. A pass yields exactly
    :meth:`cardinality` batches, taking them from as many loader passes as it needs.
    """

    def __init__(
        self,
        loader: Loader,
        features: str | Sequence[str] | None = None,
        label: str | None = None,
    ) -> None:
        self.loader, self.label = loader, label
        self.features = features if isinstance(features, str) else None
        self.columns = select_columns(loader, features, label)  # imports no TensorFlow
        spec = output_signature(loader, self.columns + ([label] if label else []))
        self._spec = spec
        x = spec[self.features] if self.features else {c: spec[c] for c in self.columns}
        self.signature: Any = x if label is None else (x, spec[label])
        self._reading: Iterator[Batch] | None = None  # the loader pass batches come from
        self._pass = 0  # number of the newest pass; an older one may no longer read

    def cardinality(self) -> int:
        """Batches per pass: ``len(loader)``, or infinite (-1) for ``epochs=None``."""
        if self.loader.batches_per_epoch() == 0:
            return 0
        if self.loader.epochs is None:
            return int(_tf().data.INFINITE_CARDINALITY)
        return len(self.loader)

    def __call__(self) -> Iterator[Any]:
        self._stop_reading()  # an abandoned pass (an iterator dropped early) reads no more
        self._pass += 1
        mine = self._pass
        n = self.cardinality()
        remaining = None if n < 0 else n
        try:
            while remaining is None or remaining > 0:
                if self._pass != mine:
                    raise RuntimeError(
                        "this pass over the dataset was superseded: load_state_dict, "
                        "set_epoch or a newer iterator moved the loader; iterate again"
                    )
                fresh = self._reading is None
                if self._reading is None:
                    self._reading = iter(self.loader)
                batch = next(self._reading, None)
                if batch is None:  # the loader's pass ended; this pass goes on into the next
                    self._reading = None
                    if fresh:
                        return  # the loader yields nothing at all: nothing more will come
                    continue
                yield self._element(batch)
                if remaining is not None:
                    remaining -= 1
        finally:
            if self._pass == mine:
                self._stop_reading()

    def _element(self, batch: Batch) -> Any:
        spec = self._spec
        if self.features:
            x: Any = to_tensor(batch[self.features], spec[self.features])
        else:
            x = {c: to_tensor(batch[c], spec[c]) for c in self.columns}
        if self.label is None:
            return x
        return x, to_tensor(batch[self.label], spec[self.label])

    def _stop_reading(self) -> None:
        if self._reading is not None:
            reading, self._reading = self._reading, None
            reading.close()  # type: ignore[attr-defined]  # a generator: stops its threads

    # the loader's interface ------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Where the consumer is: the first batch it has not received (see the docstring)."""
        return self.loader.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue exactly where ``state`` was taken; the next pass starts there."""
        self._stop_reading()
        self._pass += 1
        self.loader.load_state_dict(state)

    def set_epoch(self, epoch: int) -> None:
        """Start the next pass at the beginning of ``epoch``."""
        self._stop_reading()
        self._pass += 1
        self.loader.set_epoch(epoch)

    def close(self) -> None:
        """Stop the loader's threads (a later pass starts them again)."""
        self._stop_reading()
        self.loader.close()


def to_dataset(
    loader: Loader, features: str | Sequence[str] | None = None, label: str | None = None
) -> Any:
    """See the module docstring."""
    batches = TFBatches(loader, features, label)  # bad column names fail before the import
    tf = _tf()
    ds = tf.data.Dataset.from_generator(batches, output_signature=batches.signature)
    ds = ds.apply(tf.data.experimental.assert_cardinality(batches.cardinality()))
    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = False  # no element read ahead
    options.autotune.enabled = False  # nothing to tune here; see "Cost" in the docstring
    ds = ds.with_options(options)
    for name in ("state_dict", "load_state_dict", "set_epoch", "stats", "close"):
        setattr(ds, name, getattr(batches, name))
    ds.loader = loader
    return ds
