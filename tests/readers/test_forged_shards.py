"""A shard rewritten as another valid Arrow file, its checksums and sizes fixed in the manifest
(someone else's snapshot, a hand-repaired one): every reader refuses it; none reads its bytes
by the manifest's schema (the bits of 0.5 were served as the int64 4602678819172646912)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import crc32c
import numpy as np
import pyarrow as pa
import pytest

import snapshot_cli as snap
from snapshot_cli import ipc_blocks
from snapshot_cli.errors import CorruptShardError
from tests.forks import Forks


def preprocess(i: int):  # type: ignore[no-untyped-def]
    yield {"label": np.int64(i), "v": np.full(4, i, np.float32), "s": f"r{i}"}


def tensor(values: list[list[float]], dtype: pa.DataType, width: int) -> pa.Array:
    storage = pa.array(values, pa.list_(dtype, width))
    return pa.ExtensionArray.from_storage(pa.fixed_shape_tensor(dtype, [width]), storage)


ONE = {"label": pa.array([1]), "v": tensor([[1.0] * 4], pa.float32(), 4), "s": pa.array(["a"])}
FORGED = {  # one record, each unlike the manifest's schema in one way
    "float for int": {**ONE, "label": pa.array([0.5])},
    "uint64 for int64": {**ONE, "label": pa.array([2**63 + 5], pa.uint64())},
    "int32 values": {**ONE, "v": tensor([[1] * 4], pa.int32(), 4)},
    "other width": {**ONE, "v": tensor([[1.0] * 5], pa.float32(), 5)},
    "a list for a tensor": {**ONE, "v": pa.array([[1.0] * 4], pa.list_(pa.float32(), 4))},
    "renamed": {"label": ONE["label"], "v": ONE["v"], "EVIL": ONE["s"]},
    "extra column": {**ONE, "x": pa.array([7])},
    "fewer columns": {"label": ONE["label"], "v": ONE["v"]},
}


def forge(tmp_path: Path, columns: dict[str, pa.Array], codec: str | None) -> Path:
    out = tmp_path / "s"
    snap.create(preprocess, str(out), inputs=[0, 1], workers=0, inputs_per_task=1,
                compression=codec or "none")  # fmt: skip
    doc = json.loads((out / "manifest.json").read_text())
    shard = out / doc["shards"][0]["path"]
    table = pa.table(columns)
    options = pa.ipc.IpcWriteOptions(compression=codec)
    with pa.OSFile(str(shard), "wb") as f, pa.ipc.new_file(f, table.schema, options=options) as w:
        w.write_table(table)
    data = shard.read_bytes()
    n = ipc_blocks.footer_length(data[-ipc_blocks.TAIL :])
    (block,) = ipc_blocks.record_batch_blocks(
        data[-ipc_blocks.TAIL - n : -ipc_blocks.TAIL], len(data)
    )
    for name in ("manifest.json", "_versions/v00000001.json"):
        doc = json.loads((out / name).read_text())
        e = doc["shards"][0]
        doc["totals"]["bytes"] += len(data) - e["bytes"]
        body = data[block.offset : block.offset + block.length]
        crcs = ipc_blocks.encode([crc32c.crc32c(body)])
        e.update(bytes=len(data), crc32c=f"{crc32c.crc32c(data):08x}", records=1,
                 batch_rows=[[1, 1]], batch_crc32c=crcs)  # fmt: skip
        (out / name).write_text(json.dumps(doc))
    return out


@pytest.mark.parametrize("codec", [None, "zstd"])
@pytest.mark.parametrize("forged", sorted(FORGED))
def test_every_reader_refuses_a_shard_of_another_schema(
    tmp_path: Path, forks: Forks, forged: str, codec: str | None
) -> None:
    out = forge(tmp_path, FORGED[forged], codec)
    s = snap.open(str(out))
    for shuffle in (False, True):
        for columns in (None, ["label"], ["v"]):
            with pytest.raises(CorruptShardError, match="schema differs from the manifest's"):
                for _ in s.loader(1, shuffle=shuffle, columns=columns):
                    pass
    with pytest.raises(CorruptShardError, match="schema differs"):
        list(s.iter_batches())
    for args in (["head", str(out), "-n", "2"], ["bench", str(out), "--epochs", "1"],
                 ["verify", str(out)]):  # fmt: skip
        res = forks.run(args, tmp_path, dict(os.environ), 120)  # (a process: tests.forks)
        assert res.returncode == 1 and "schema differs" in res.stdout + res.stderr, (args, res)
        assert "Traceback" not in res.stderr
        if forged == "renamed" and args[0] == "verify":  # (said "'s': string instead of string")
            assert "a column 'EVIL' where the manifest has 's'" in res.stdout, res.stdout
