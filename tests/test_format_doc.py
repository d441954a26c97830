"""docs/format.md stays true: its Python blocks, taken from the file itself, run as written.

The footer parser, the pyarrow and polars recipes (which must read exactly the manifest's
shards: a glob of ``shards/`` also reads versions since replaced), and the independent
writer, whose snapshots snap's ``verify`` and loader must accept, in every codec.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import snapshot_cli as snap
from snapshot_cli import ipc_blocks

from .conftest import REPO

DOC = REPO / "docs" / "format.md"


def blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)


def run_blocks(names: dict[str, Any], *which: int) -> dict[str, Any]:
    code = blocks()
    for i in which:
        exec(compile(code[i], f"{DOC}:block{i}", "exec"), names)  # noqa: S102 (our own doc)
    return names


def test_the_doc_has_the_blocks_this_test_runs() -> None:
    code = blocks()
    assert len(code) == 4, len(code)
    assert "def record_batch_blocks" in code[0] and "def write_snapshot" in code[3]
    assert "ds.dataset" in code[1] and "pl.scan_ipc" in code[2]


def test_the_footer_parser_finds_snaps_blocks(tmp_path: Path) -> None:
    def f(i: int) -> Any:
        yield snap.Batch(x=np.arange(i * 3000, (i + 1) * 3000), y=np.ones((3000, 4), np.float32))

    snap.create(f, str(tmp_path / "s"), inputs=[0, 1], workers=0, batch_rows=700)
    names = run_blocks({}, 0)
    for entry in snap.open(str(tmp_path / "s")).shards:
        data = (tmp_path / "s" / entry.path).read_bytes()
        ours = ipc_blocks.file_blocks(lambda n, o, data=data: data[o : o + n], len(data))
        got = names["record_batch_blocks"](data)
        assert [(o, m) for o, m, _ in got] == [(b.offset, b.meta) for b in ours]
        assert [m + b for _, m, b in got] == [b.length for b in ours]


def test_the_recipes_read_exactly_the_manifests_shards(tmp_path: Path) -> None:
    def f(i: int) -> Any:
        yield {"id": np.int64(i), "img": np.full((2, 3), i, np.uint8)}

    root = str(tmp_path / "s")
    snap.create(f, root, inputs=list(range(30)), workers=0)
    snap.create(f, root, inputs=list(range(20, 45)), workers=0)  # a new version: 25 records
    assert len(list((tmp_path / "s" / "shards").iterdir())) > len(snap.open(root).shards)
    names = run_blocks({"root": root}, 1, 2)
    assert sorted(names["table"]["id"].to_pylist()) == list(range(20, 45))
    assert sorted(names["frame"]["id"].to_list()) == list(range(20, 45))


@pytest.mark.parametrize("codec", ["zstd", "lz4", "none"])
def test_the_independent_writers_snapshot_is_read_by_snap(tmp_path: Path, codec: str) -> None:
    names = run_blocks({}, 0, 3)
    schema = pa.schema([("x", pa.int64()), ("t", pa.fixed_shape_tensor(pa.float32(), [2, 2]))])

    def batch(start: int, n: int) -> pa.RecordBatch:
        values = pa.array(np.arange(start * 4, (start + n) * 4, dtype=np.float32))
        tensor = pa.ExtensionArray.from_storage(
            schema.field("t").type, pa.FixedSizeListArray.from_arrays(values, 4)
        )
        return pa.record_batch([pa.array(np.arange(start, start + n)), tensor], schema=schema)

    root = str(tmp_path / "mine")
    names["write_snapshot"](root, [[batch(0, 100), batch(100, 100)], [batch(200, 50)]], codec)
    res = subprocess.run([sys.executable, "-m", "snapshot_cli", "verify", root],
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    s = snap.open(root)
    got = list(s.loader(50, shuffle=False))
    assert np.array_equal(np.concatenate([b["x"] for b in got]), np.arange(250))
    t = np.concatenate([b["t"] for b in got])
    assert t.shape == (250, 2, 2) and np.array_equal(t.reshape(-1), np.arange(1000))
