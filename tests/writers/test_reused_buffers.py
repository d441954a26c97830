"""A pipeline may yield views of buffers it refills: what it yielded is written as it was then.

Filling one preallocated array per record (or a torch tensor, or the columns of a DataFrame or
Arrow batch over reused numpy memory) is a common way to save allocations, and a record or
batch snap kept by reference until its record batch was built held the buffer's last values:
8 of every 10 records were wrong, silently. Hypothesis draws sequences of yields of every kind
(records of numpy views and of another library's array-likes, Batches, DataFrames, Arrow
record batches and tables) over the same buffers, overwritten with -1 after every yield, and
record-batch sizes that keep some of them pending across yields; every record must read back
as it was yielded.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli import schema as schema_mod

KINDS = ("record", "record of array-likes", "Batch", "DataFrame", "RecordBatch", "Table")
MOST = 40  # rows of one yielded batch


class ArrayLike:
    """Another library's tensor (torch, JAX on CPU): numpy views its memory without a copy."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self.array


def values(r: int) -> tuple[np.ndarray, np.ndarray]:
    """Record ``r``'s image (fixed shape) and tokens (ragged, some empty)."""
    return np.arange(6, dtype=np.int32).reshape(2, 3) + r, np.arange(r % 4, dtype=np.int32) + r


@snap.ragged("tok")
def refilling(item: int, plan: list[list[Any]]) -> Iterator[Any]:
    """Yields ``plan``'s (kind, rows) in order, every value a view of the same three buffers."""
    ids = np.empty(MOST, np.int64)
    imgs = np.empty((MOST, 2, 3), np.int32)
    toks = np.empty((MOST, 4), np.int32)
    r = 0
    for kind, n in plan:
        for buf in (ids, imgs, toks):
            buf.fill(-1)  # what a later fill does to whatever snap kept of the last yield
        for j in range(n):
            img, tok = values(r + j)
            ids[j], imgs[j], toks[j, : len(tok)] = r + j, img, tok
        tok_views = [toks[j, : (r + j) % 4] for j in range(n)]
        if kind == "record":
            yield {"id": r, "img": imgs[0], "tok": tok_views[0]}
        elif kind == "record of array-likes":
            yield {"id": r, "img": ArrayLike(imgs[0]), "tok": ArrayLike(tok_views[0])}
        elif kind == "Batch":
            yield snap.Batch({"id": ids[:n], "img": imgs[:n], "tok": tok_views})
        elif kind == "DataFrame":
            yield pd.DataFrame({"id": ids[:n], "img": list(imgs[:n]), "tok": tok_views})
        else:
            batch = pa.record_batch(
                [pa.array(ids[:n]), schema_mod.tensor_array(imgs[:n]),
                 schema_mod.ragged_array(tok_views, np.dtype(np.int32), 1)],
                names=["id", "img", "tok"],
            )  # fmt: skip
            yield batch if kind == "RecordBatch" else pa.Table.from_batches([batch])
        r += 1 if kind.startswith("record") else n
    for buf in (ids, imgs, toks):
        buf.fill(-1)


plans = st.lists(
    st.tuples(st.sampled_from(KINDS), st.integers(1, MOST)).map(
        lambda t: [t[0], 1 if t[0].startswith("record") else t[1]]
    ),
    min_size=1,
    max_size=12,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(plan=plans, batch_rows=st.integers(1, 64))
def test_what_was_yielded_is_written_though_its_buffers_are_refilled(
    tmp_path: Path, plan: list[list[Any]], batch_rows: int
) -> None:
    out = tmp_path / f"s{abs(hash((str(plan), batch_rows)))}"
    info = snap.create(
        refilling, out, inputs=[0], params={"plan": plan}, workers=0, batch_rows=batch_rows,
        compression="none", overwrite=True,
    )  # fmt: skip
    total = sum(n for _, n in plan)
    assert info.num_records == total
    got = snap.open(out).loader(batch_size=total, shuffle=False).__iter__().__next__()
    assert got["id"].tolist() == list(range(total))
    for r in range(total):
        img, tok = values(r)
        assert np.array_equal(got["img"][r], img), (r, got["img"][r])
        assert np.array_equal(got["tok"][r], tok), (r, got["tok"][r])
