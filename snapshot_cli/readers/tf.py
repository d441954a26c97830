"""TensorFlow: the loader as a ``tf.data.Dataset`` with a full ``output_signature``.

``loader.to_tf()`` returns ``tf.data.Dataset.from_generator`` over the loader, so Keras code
that used ``dataset.snapshot(path)`` switches with one line::

    ds = snap.open("gs://b/snaps/train").loader(256, epochs=1).to_tf()
    model.fit(ds, epochs=10)  # every fit epoch is a new loader pass: a fresh shuffle

The signature comes from the snapshot's schema: fixed-shape columns are
``TensorSpec((None, *shape), dtype)`` (the batch dimension is None: the last batch may be
partial unless ``drop_last=True``), ragged columns ``RaggedTensorSpec`` built from row
lengths (no Python loop over values), strings and bytes ``tf.string``. Shuffling, reading
and batching stay in snap's threads; TensorFlow only receives finished batches (two are kept
ready with ``prefetch(2)``). The generator boundary costs: TensorFlow calls back into Python
for each batch and copies it into its own tensors, about 1-2 ms per 3 MiB batch here
(``benchmarks/device.py``), which a model step of tens of ms hides.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import schema as schema_mod

if TYPE_CHECKING:
    from .loader import Loader


def _tf() -> Any:
    try:
        import tensorflow as tf
    except ImportError as err:
        raise ImportError(
            "the TensorFlow adapter needs tensorflow: pip install 'arrowsnap[tf]'"
        ) from err
    return tf


def output_signature(loader: Loader) -> dict[str, Any]:
    """``{column: TensorSpec | RaggedTensorSpec}`` of the loader's batches."""
    tf = _tf()
    schema = loader.snapshot.schema
    out: dict[str, Any] = {}
    for name in loader.columns:
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


def _convert(batch: dict[str, np.ndarray], spec: dict[str, Any]) -> dict[str, Any]:
    tf = _tf()
    out: dict[str, Any] = {}
    for name, value in batch.items():
        s = spec[name]
        if isinstance(s, tf.RaggedTensorSpec):
            lengths = np.fromiter((len(v) for v in value), np.int64, len(value))
            flat = np.concatenate(value) if len(value) else np.zeros((0,), s.dtype.as_numpy_dtype)
            out[name] = tf.RaggedTensor.from_row_lengths(flat, lengths)
        elif s.dtype == tf.string:
            out[name] = tf.constant(list(value), tf.string)
        else:
            out[name] = value
    return out


def to_dataset(loader: Loader) -> Any:
    """See the module docstring."""
    tf = _tf()
    spec = output_signature(loader)

    def batches() -> Iterator[dict[str, Any]]:
        for batch in loader:
            yield _convert(batch, spec)

    return tf.data.Dataset.from_generator(batches, output_signature=spec).prefetch(2)
