"""docs/format.md stays true: its Python blocks, taken from the file itself, run as written.

The footer parser, the pyarrow and polars recipes (which must read exactly the manifest's
shards: a glob of ``shards/`` also reads versions since replaced), and the independent
writer, whose snapshots snap's ``verify`` and loader must accept, in every codec.
"""

from __future__ import annotations

import json
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
        yield {"id": np.int64(i), "img": np.full((2, 3), i, np.uint8),
               "mask": np.array([i % 2, 1, 0, i % 3 == 0, 1], bool)}  # fmt: skip

    root = str(tmp_path / "s")
    snap.create(f, root, inputs=list(range(30)), workers=0)
    snap.create(f, root, inputs=list(range(20, 45)), workers=0)  # a new version: 25 records
    assert len(list((tmp_path / "s" / "shards").iterdir())) > len(snap.open(root).shards)
    names = run_blocks({"root": root}, 1, 2)
    table, frame, tensor_values = names["table"], names["frame"], names["tensor_values"]
    ids = table["id"].to_numpy()
    assert sorted(ids) == list(range(20, 45))
    assert sorted(frame["id"].to_list()) == list(range(20, 45))
    # the tensor recipe, for any value type: bool too, where to_numpy_ndarray raises
    want = np.array([[i % 2, 1, 0, i % 3 == 0, 1] for i in ids], bool)
    for column in (table["mask"], frame["mask"].to_arrow()):
        got = tensor_values(column)
        assert got.dtype == bool and np.array_equal(got, want)
    with pytest.raises(pa.ArrowTypeError, match="bool is not valid data type for a tensor"):
        table["mask"].combine_chunks().to_numpy_ndarray()  # (what the doc says of it)
    img = tensor_values(table["img"])
    assert img.shape == (25, 2, 3) and np.array_equal(img[:, 1, 2], ids)
    assert np.array_equal(tensor_values(table["img"].slice(3, 2)), img[3:5])


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


def test_the_independent_writer_leaves_dictionary_columns_to_the_whole_file_crc(
    tmp_path: Path,
) -> None:
    """§3.10: a dictionary batch is covered by no record batch checksum, so the writer writes
    no batch_crc32c for such a schema, and a changed dictionary is caught by the whole file's
    crc32c (snap's readers check it whatever batch_crc32c holds)."""
    names = run_blocks({}, 0, 3)
    words = pa.DictionaryArray.from_arrays(pa.array([0, 1, 2, 0], pa.int32()),
                                           pa.array(["cat", "dog", "emu"]))  # fmt: skip
    nested = pa.StructArray.from_arrays([words], names=["w"])
    for column in (words, nested):
        assert names["has_dictionary"](pa.schema([("c", column.type)]))
    assert not names["has_dictionary"](pa.schema([("x", pa.int64()), ("s", pa.string())]))
    root = tmp_path / "dict"
    batch = pa.RecordBatch.from_arrays([words, pa.array(range(4))], names=["dc", "x"])
    names["write_snapshot"](str(root), [[batch]], "none")
    m = json.loads((root / "manifest.json").read_text())
    assert m["shards"][0]["batch_crc32c"] == ""
    assert [b["dc"].tolist() for b in snap.open(str(root)).loader(4, shuffle=False)] == [
        ["cat", "dog", "emu", "cat"]
    ]
    shard = root / m["shards"][0]["path"]
    data = shard.read_bytes()
    shard.write_bytes(data.replace(b"dog", b"cow"))  # the dictionary batch, its crc32c kept
    blocks = names["record_batch_blocks"](data)
    for crcs in ("", "".join(names["crc"](data[o : o + a + b]) for o, a, b in blocks)):
        m["shards"][0]["batch_crc32c"] = crcs  # (given or not: the whole file is checked)
        (root / "manifest.json").write_text(json.dumps(m))
        res = subprocess.run([sys.executable, "-m", "snapshot_cli", "verify", str(root)],
                             capture_output=True, text=True, timeout=300)  # fmt: skip
        assert res.returncode == 1 and "crc32c" in res.stdout, res.stdout + res.stderr
        with pytest.raises(snap.CorruptShardError, match="crc32c"):
            list(snap.open(str(root)).loader(4, shuffle=False))


def test_a_shard_holds_its_schema_twice(tmp_path: Path) -> None:
    """§4.2: the schema message and the footer's schema must be the same. snap's readers read
    the message, pyarrow's open_file the footer; the whole file's crc32c tells a footer that
    was changed."""
    names = run_blocks({}, 0, 3)
    root = tmp_path / "s"
    values = pa.array(range(8), pa.int64())
    names["write_snapshot"](str(root), [[pa.RecordBatch.from_arrays([values], ["x"])]], "none")
    m = json.loads((root / "manifest.json").read_text())
    shard = root / m["shards"][0]["path"]
    mine = shard.read_bytes()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, pa.schema([("y", pa.int64())])) as w:
        w.write_batch(pa.RecordBatch.from_arrays([values], ["y"]))
    other = sink.getvalue().to_pybytes()
    footer = len(mine) - 10 - int.from_bytes(mine[-10:-6], "little")
    assert len(other) == len(mine) and other[:footer].replace(b"y", b"x") == mine[:footer]
    spliced = mine[:footer] + other[footer:]  # x's schema message, y's footer
    shard.write_bytes(spliced)
    res = subprocess.run([sys.executable, "-m", "snapshot_cli", "verify", str(root)],
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert res.returncode == 1 and "crc32c" in res.stdout + res.stderr, res.stdout + res.stderr
    m["shards"][0]["crc32c"] = names["crc"](spliced)  # (a writer that wrote it so: damaged)
    (root / "manifest.json").write_text(json.dumps(m))
    got = ipc_blocks.file_schema(lambda n, o: spliced[o : o + n], len(spliced))
    assert got.names == ["x"] and pa.ipc.open_file(pa.py_buffer(spliced)).schema.names == ["y"]
    (batch,) = snap.open(str(root)).loader(8, shuffle=False)
    assert batch["x"].tolist() == list(range(8))
