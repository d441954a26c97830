"""A shard whose record batch declares 2**53 - 1 records (the most a manifest allows) of
2 KiB, its checksums and the manifest made to agree: the byte count of its records does not
fit int64 (it wrapped to a few bytes, and the compiled decode copied far past the buffer:
SIGBUS). Every read path refuses it with a CorruptShardError naming the shard, in every codec
(the compressed ones with their values stored plain, as Arrow stores what does not shrink).
Each read runs in a process of its own (forked: :mod:`tests.forks`): a crash fails the
test, not the suite."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

import crc32c
import numpy as np
import pytest

import snapshot_cli as snap
from snapshot_cli import ipc_blocks, ipc_layout
from tests import forks
from tests.conftest import REPO

ROWS = 2**53 - 1  # the most records a manifest allows


def preprocess(i: int):  # type: ignore[no-untyped-def]
    # 2,048 bytes each (the most values a record whose count fits int64 may have is 1,023)
    yield {"emb": np.full(512, 1.5, np.float32), "pos": np.arange(256, dtype=np.float64)}


class _Flat:
    """Positions of a record batch message's fields, by its flatbuffer (Message.fbs)."""

    def __init__(self, data: bytearray, start: int) -> None:
        self.data, self.start = data, start

    def table(self, pos: int) -> tuple[int, int]:
        return pos, pos - struct.unpack_from("<i", self.data, pos)[0]

    def field(self, table: tuple[int, int], i: int) -> int:
        pos, vtable = table
        (off,) = struct.unpack_from("<H", self.data, vtable + 4 + 2 * i)
        assert off, f"field {i} is not in the message"
        return pos + off

    def ref(self, table: tuple[int, int], i: int) -> int:
        at = self.field(table, i)
        return at + struct.unpack_from("<I", self.data, at)[0]

    def record_batch(self) -> tuple[int, int, int]:
        """The positions of its length, its nodes and its buffers (after each count)."""
        root = self.start + 8
        message = self.table(root + struct.unpack_from("<I", self.data, root)[0])
        header = self.table(self.ref(message, 2))
        return self.field(header, 0), self.ref(header, 1) + 4, self.ref(header, 2) + 4


def forge(out: Path, codec: str) -> Path:
    """Snapshot ``out`` of one record, its record batch made to declare ROWS records, the
    checksums and the manifest made to agree; returns the shard's path."""
    snap.create(preprocess, str(out), inputs=[0], workers=0, compression=codec, progress=False)
    doc = json.loads((out / "manifest.json").read_text())
    shard = out / doc["shards"][0]["path"]
    data = bytearray(shard.read_bytes())
    (block,) = ipc_blocks.file_blocks(lambda n, at: bytes(data[at : at + n]), len(data))
    schema = snap.open(str(out)).schema
    slots = [s for s in (ipc_layout.column_slots(schema) or {}).values() if s is not None]
    assert len(slots) == 2
    length, nodes, buffers = _Flat(data, block.offset).record_batch()
    struct.pack_into("<q", data, length, ROWS)
    body = block.offset + ipc_layout.metadata_size(bytes(data[block.offset : block.offset + 8]))
    for slot in slots:
        struct.pack_into("<q", data, nodes + 16 * slot.node, ROWS)
        if slot.child is not None:
            struct.pack_into("<q", data, nodes + 16 * slot.child, ROWS * slot.width)
        if codec != "none":  # "stored plain" (-1), as Arrow marks a buffer that did not shrink
            (offset,) = struct.unpack_from("<q", data, buffers + 16 * slot.values)
            struct.pack_into("<q", data, body + offset, -1)
    shard.write_bytes(data)
    message = bytes(data[block.offset : block.offset + block.length])
    for name in ["manifest.json", *(p.name for p in (out / "_versions").glob("v*[0-9].json"))]:
        path = out / name if name == "manifest.json" else out / "_versions" / name
        doc = json.loads(path.read_text())
        doc["shards"][0].update(
            crc32c=f"{crc32c.crc32c(bytes(data)):08x}", records=ROWS, batch_rows=[[ROWS, 1]],
            batch_crc32c=ipc_blocks.encode([crc32c.crc32c(message)]),
        )  # fmt: skip
        doc["totals"]["records"] = ROWS
        path.write_text(json.dumps(doc))
    return shard


@pytest.fixture(scope="module", params=["none", "zstd", "lz4"])
def forged(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("forged") / request.param
    forge(out, request.param)
    return out


READ = """
import sys
import snapshot_cli as snap
options = eval(sys.argv[2])
try:
    for _ in snap.open(sys.argv[1]).loader(256, **options):
        pass
except snap.SnapError as err:
    print(type(err).__name__, err)
else:
    print("no error")
"""

PATHS = {
    "shuffled": {"shuffle": True},
    "shuffled, unverified": {"shuffle": True, "verify": False},
    "in order": {"shuffle": False},
    "in order, unverified": {"shuffle": False, "verify": False},
    "one column, shuffled": {"shuffle": True, "columns": ["pos"]},
    "one column, unverified": {"shuffle": True, "columns": ["emb"], "verify": False},
    "decode processes": {"shuffle": True, "processes": 2},
    "decode processes, in order": {"shuffle": False, "processes": 2, "verify": False},
}


def _shard(out: Path) -> str:
    return str(out / json.loads((out / "manifest.json").read_text())["shards"][0]["path"])


def read(out: Path, options: dict[str, Any]) -> str:
    """What a loader of ``out`` with these options raised, read in a process of its own."""
    env = dict(os.environ)  # (forked from a server that imported snap: tests.forks)
    res = forks.shared().python(["-c", READ, str(out), repr(options)], REPO, env, 300)
    assert res.returncode == 0, (res.returncode, res.stderr[-2000:])  # (-7: SIGBUS)
    return res.stdout


@pytest.mark.parametrize("how", sorted(PATHS))
def test_every_read_path_refuses_a_forged_record_count(forged: Path, how: str) -> None:
    out = read(forged, PATHS[how])
    assert out.startswith(f"CorruptShardError shard {_shard(forged)} record batch 0"), out


@pytest.mark.parametrize("command", ["bench", "head", "verify"])
def test_commands_say_which_shard_in_one_line(forged: Path, command: str) -> None:
    args = ["--epochs", "1"] if command == "bench" else []
    res = forks.shared().run([command, str(forged), *args], REPO, dict(os.environ), 300)
    assert res.returncode == 1, (res.returncode, res.stderr[-2000:])
    assert "Traceback" not in res.stderr and "a bug in snap" not in res.stderr
    if command != "verify":  # (verify lists each damaged shard on stdout)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"snap: error: shard {_shard(forged)}"), (
            lines
        )
    else:
        assert f"DAMAGED  {_shard(forged)}" in res.stdout, res.stdout


def test_the_message_says_what_the_records_need(forged: Path) -> None:
    """The shuffled path, which reached the compiled decode: the column, the bytes its buffer
    holds and those its records need (the Arrow decoder's own words, where the decode was
    refused, were "impossibly large length and offset")."""
    out = read(forged, {"shuffle": True, "verify": False})
    need = f"{ROWS * 2048:,}"
    assert "column 'emb' holds" in out and f"its {ROWS:,} records need {need};" in out, out
