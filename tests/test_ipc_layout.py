"""The record batch message parser: any bytes give a layout inside the body or LayoutError."""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from snapshot_cli import ipc_layout


def message(codec: str | None) -> bytes:
    """One record batch message (metadata and body) as Arrow writes it in a stream."""
    t = pa.fixed_shape_tensor(pa.uint8(), [2, 3])
    image = pa.ExtensionArray.from_storage(
        t, pa.FixedSizeListArray.from_arrays(pa.array(np.arange(60, dtype=np.uint8)), 6)
    )
    batch = pa.record_batch(
        [pa.array(np.arange(10)), image, pa.array([f"s{i}" for i in range(10)])],
        names=["id", "image", "name"],
    )
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=codec)
    with pa.ipc.new_stream(sink, batch.schema, options=options) as w:
        w.write_batch(batch)
    data = sink.getvalue().to_pybytes()
    schema_len = ipc_layout.metadata_size(data[:8])
    reader = pa.BufferReader(data)
    pa.ipc.read_message(reader)
    start = reader.tell()
    pa.ipc.read_message(reader)
    assert schema_len <= start
    return data[start : reader.tell()]


def test_a_real_message_parses() -> None:
    for codec in (None, "lz4", "zstd"):
        msg = message(codec)
        layout = ipc_layout.batch_layout(msg[: ipc_layout.metadata_size(msg[:8])], len(msg))
        assert layout.length == 10 and layout.codec == {None: None, "lz4": 0, "zstd": 1}[codec]
        assert (layout.buffers.sum(axis=1) <= layout.body_length).all()


@settings(max_examples=400, deadline=None)
@given(
    codec=st.sampled_from([None, "lz4", "zstd"]),
    edits=st.lists(
        st.tuples(
            st.integers(8, 400), st.sampled_from([1, 2, 4, 8]), st.integers(-(2**63), 2**63 - 1)
        ),
        min_size=1,
        max_size=4,
    ),
)
def test_any_edit_of_the_metadata_is_a_layout_in_the_body_or_layout_error(
    codec: str | None, edits: list[tuple[int, int, int]]
) -> None:
    msg = bytearray(message(codec))
    size = ipc_layout.metadata_size(bytes(msg[:8]))
    for pos, width, value in edits:
        if pos + width <= size:
            fmt = {1: "<b", 2: "<h", 4: "<i", 8: "<q"}[width]
            lo, hi = -(2 ** (8 * width - 1)), 2 ** (8 * width - 1) - 1
            struct.pack_into(fmt, msg, pos, max(lo, min(hi, value)))
    try:
        layout = ipc_layout.batch_layout(bytes(msg[:size]), len(msg))
    except ipc_layout.LayoutError:
        return
    assert layout.length >= 0 and layout.body_start + layout.body_length == len(msg)
    assert (layout.buffers >= 0).all() and (layout.buffers <= layout.body_length).all()
    assert (layout.buffers.sum(axis=1) <= layout.body_length).all()


def test_buffers_whose_sum_overflows_are_refused() -> None:
    """An offset and a length that are each huge, whose int64 sum wraps negative, must not
    pass the bounds check."""
    msg = bytearray(message(None))
    size = ipc_layout.metadata_size(bytes(msg[:8]))
    layout = ipc_layout.batch_layout(bytes(msg[:size]), len(msg))
    offset, length = (int(x) for x in layout.buffers[1])
    where = bytes(msg[:size]).find(struct.pack("<qq", offset, length))
    assert where > 0
    struct.pack_into("<qq", msg, where, 2**62, 2**62)
    try:
        ipc_layout.batch_layout(bytes(msg[:size]), len(msg))
    except ipc_layout.LayoutError:
        return
    raise AssertionError("a buffer at 2**62 was accepted")
