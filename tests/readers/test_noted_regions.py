"""Where a shard's record batches lie, noted by the decoding threads that read them at once.

A first epoch's decoding threads read record batches of one shard file together, and each
notes where its record batch's columns start (``BlockFile._note``) for a later epoch to
gather from. The first note of a file made the table and its "noted" flags in two steps,
and a thread between them read the old, empty flags: ``IndexError: bytearray index out of
range`` ended a pass now and then under load (seen in ``make test``'s
``test_gathered_batches_are_the_slot_windows_batches``); two threads both making the table
also lost one's notes.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator

import numpy as np
import pytest

import snapshot_cli as snap
from snapshot_cli import storage
from snapshot_cli.readers import direct
from snapshot_cli.readers.blocks import BlockFile

THREADS = 8


@pytest.fixture(scope="module")
def many_batches(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One uncompressed shard of 64 record batches."""
    out = str(tmp_path_factory.mktemp("noted") / "s")

    def records() -> Iterator[snap.Batch]:
        for start in range(0, 64 * 8, 8):
            ids = np.arange(start, start + 8)
            yield snap.Batch(id=ids, v=np.stack([ids, ids + 1], axis=1).astype(np.float32))

    snap.create(records, out, workers=0, compression="none", batch_rows=8, progress=False)
    return out


@pytest.fixture
def fine_switching() -> Iterator[None]:
    """Threads switched every microsecond, so they interleave inside a note."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def test_record_batches_noted_by_threads_at_once_are_all_noted(
    many_batches: str, fine_switching: None
) -> None:
    """Rounds of a fresh file whose record batches are read by eight threads at once (each
    its own, all released together): no read fails, and afterwards the file knows where
    every record batch lies, the very places the values were read from."""
    s = snap.open(many_batches)
    (entry,) = s.manifest.shards
    rows = entry.batch_sizes()
    assert len(rows) == 64
    placement = direct.Placement.of(s.schema, ["id", "v"])
    assert placement is not None
    file = storage.join(many_batches, entry.path)
    for _ in range(30):
        f = BlockFile(file, entry, s.schema, entry.path)
        start = threading.Barrier(THREADS)
        errors: list[BaseException] = []

        def read(
            first: int,
            f: BlockFile = f,
            start: threading.Barrier = start,
            errors: list[BaseException] = errors,
        ) -> None:
            try:
                start.wait(timeout=30)
                for i in range(first, len(rows), THREADS):
                    got = f.read_values(i, True, rows[i], placement)
                    assert got is not None
                    assert got["id"].tolist() == list(range(8 * i, 8 * i + 8))
            except BaseException as err:  # (said below, by the test's thread)
                errors.append(err)

        threads = [threading.Thread(target=read, args=(k,)) for k in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        noted = f.placed(np.arange(len(rows)), placement)
        assert noted is not None, "a record batch read by a thread was not noted"
        with open(file, "rb") as raw:
            data = raw.read()
        for i in range(len(rows)):
            at = int(noted["id"][i])
            ids = np.frombuffer(data, np.int64, count=8, offset=at)
            assert ids.tolist() == list(range(8 * i, 8 * i + 8))
