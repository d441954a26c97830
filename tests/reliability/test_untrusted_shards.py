"""Shards from an untrusted or buggy writer, with checksums that are right: the loader (both
shuffle modes, with and without verify), ``head`` and ``verify`` answer CorruptShardError
naming the shard, never a crash, a cast, or bytes that are not in the file.

Each probe runs in its own process (forked: :mod:`tests.forks`), so that a segfault fails
the test instead of ending it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import snapshot_cli as snap
from snapshot_cli import schema as schema_mod
from tests import forks
from tests.conftest import REPO
from tests.reliability.shards import copy_snapshot, load_manifest, refresh_entry

ROWS = 8


def good_snapshot(root: Path) -> Path:
    @snap.ragged("tokens")
    def preprocess(i: int) -> Any:
        for k in range(ROWS):
            n = i * ROWS + k
            yield {"label": n, "tokens": np.arange(n % 4 + 1, dtype=np.int32), "name": f"r{n}",
                   "x": np.full(3, n, np.float32)}  # fmt: skip

    out = root / "snap"
    snap.create(preprocess, str(out), inputs=[0, 1, 2], workers=0, inputs_per_task=1)
    return out


def forged_batch(kind: str, schema: pa.Schema) -> pa.RecordBatch:
    """A record batch of ROWS records, wrong in one way Arrow's validation can see."""
    n = ROWS
    label = pa.array(np.arange(n, dtype=np.int64))
    offsets = np.arange(n + 1, dtype=np.int32)  # Arrow checks them when the array is made:
    name_offsets = np.arange(n + 1, dtype=np.int32)  # they are forged after, in place
    values = pa.array(np.arange(n, dtype=np.int32))
    tokens = pa.ListArray.from_buffers(
        schema.field("tokens").type, n, [None, pa.py_buffer(offsets)], children=[values]
    )
    name_data = np.frombuffer(bytearray(b"abc\xff\xfeefg" if kind == "string not UTF-8"
                                        else b"abcdefgh"), np.uint8)  # fmt: skip
    name = pa.StringArray.from_buffers(n, pa.py_buffer(name_offsets), pa.py_buffer(name_data))
    x_type = schema.field("x").type
    storage = pa.FixedSizeListArray.from_arrays(pa.array(np.zeros(3 * n, np.float32)), 3)
    x = pa.ExtensionArray.from_storage(x_type, storage)
    columns = {"label": label, "tokens": tokens, "name": name, "x": x}
    if kind == "label stored as uint8":
        columns["label"] = pa.array(np.arange(n, dtype=np.uint8))
        schema = schema.set(schema.get_field_index("label"), pa.field("label", pa.uint8()))
    batch = pa.RecordBatch.from_arrays([columns[f.name] for f in schema], schema=schema)
    if kind == "list offsets past the values":
        offsets[-1] = 1 << 20
    elif kind == "list offsets going back":
        offsets[3] = 0
    elif kind == "string offsets past the data":
        name_offsets[-1] = 1 << 24
    return batch


KINDS = [
    "list offsets past the values",
    "list offsets going back",
    "string offsets past the data",
    "string not UTF-8",
    "label stored as uint8",
]


def forge(out: Path, kind: str) -> str:
    """Replace shard 1 with a forged one; fix its manifest entry so its checksum is right."""
    manifest = load_manifest(out)
    schema = schema_mod.decode_schema(manifest["schema"]["arrow_ipc_base64"])
    entry = manifest["shards"][1]
    batch = forged_batch(kind, schema)
    path = out / entry["path"]
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return refresh_entry(out, 1, record_batches=1, batch_rows=[[ROWS, 1]], records=ROWS)


PROBE = """
import sys
import snapshot_cli as snap
path, how = sys.argv[1], sys.argv[2]
s = snap.open(path)
try:
    if how == "head":
        s.head(100)
    else:
        shuffle, verify = how.split("-")
        for batch in s.loader(4, shuffle=shuffle == "shuffle", verify=verify == "verify"):
            pass
except snap.CorruptShardError as err:
    print("CorruptShardError:", err)
else:
    print("read without an error")
"""


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return good_snapshot(tmp_path_factory.mktemp("untrusted"))


@pytest.mark.parametrize("kind", KINDS)
def test_a_forged_shard_is_a_clean_error_everywhere(
    pristine: Path, tmp_path: Path, kind: str
) -> None:
    out = tmp_path / "snap"
    copy_snapshot(pristine, out)
    shard = forge(out, kind)
    for how in ("head", "shuffle-verify", "ordered-verify", "shuffle-noverify",
                "ordered-noverify"):  # fmt: skip
        res = forks.shared().python(["-c", PROBE, str(out), how], REPO, dict(os.environ), 120)
        assert res.returncode == 0, f"{kind}, {how}: exit {res.returncode}\n{res.stderr}"
        assert res.stdout.startswith("CorruptShardError:"), f"{kind}, {how}: {res.stdout}"
        assert shard in res.stdout
    verify = forks.shared().run(["verify", str(out), "--json"], REPO, dict(os.environ), 120)
    assert verify.returncode == 1
    damaged = json.loads(verify.stdout)["damaged"]
    assert [d["path"] for d in damaged] == [shard]


def test_the_pristine_snapshot_reads_in_every_mode(pristine: Path) -> None:
    for how in ("head", "shuffle-verify", "ordered-noverify"):
        res = forks.shared().python(["-c", PROBE, str(pristine), how], REPO, dict(os.environ), 120)
        assert res.returncode == 0, res.stderr
        assert res.stdout.strip() == "read without an error"
