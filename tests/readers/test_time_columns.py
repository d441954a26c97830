"""Times and durations are held in a window as arrays of their own, as numbers are.

They were kept as Arrow data and taken batch by batch (a take and a conversion each): a later
epoch of one time column cost 2.5x an int64 column's (gather 0.54 s against 0.02). The same
values in the same order, in every way the loader reads; a null another writer left is NaT.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import snapshot_cli as snap

from ..test_format_doc import run_blocks

N = 3000


def table(part: int) -> Any:
    i = np.arange(part * N, (part + 1) * N)
    yield pa.table({
        "i": i,
        "ms": pa.array(i * 1000 + 7).cast(pa.timestamp("ms")),
        "zoned": pa.array(i * 10**6).cast(pa.timestamp("us", tz="Europe/Paris")),
        "took": pa.array(i * 3).cast(pa.duration("ns")),
    })  # fmt: skip


@pytest.mark.parametrize("codec", ["none", "lz4"])
def test_times_read_back_in_every_order_and_epoch(tmp_path: Path, codec: str) -> None:
    out = str(tmp_path / codec)
    snap.create(table, out, inputs=[0, 1, 2], workers=0, compression=codec, batch_rows=500)
    s = snap.open(out)
    ways: list[dict[str, Any]] = [{"batch_size": 256}, {"batch_size": 256, "shuffle": False},
                                  {"global_batch_size": 300}, {"batch_size": 100,
                                  "columns": ["ms", "i"]}]  # fmt: skip
    for kw in ways:
        loader = s.loader(seed=2, **kw)
        for _ in range(2):  # (an uncompressed snapshot's later epochs gather from the files)
            seen = 0
            for b in loader:
                i = b["i"]
                assert b["ms"].dtype == np.dtype("datetime64[ms]")
                assert np.array_equal(b["ms"].astype(np.int64), i * 1000 + 7)
                if "zoned" in b:  # the zone's instants, in UTC
                    assert b["zoned"].dtype == np.dtype("datetime64[us]")
                    assert np.array_equal(b["zoned"].astype(np.int64), i * 10**6)
                    assert b["took"].dtype == np.dtype("timedelta64[ns]")
                    assert np.array_equal(b["took"].astype(np.int64), i * 3)
                seen += len(i)
            assert seen >= 3 * N, (kw, seen)


def with_a_null_time(tmp_path: Path) -> str:
    """A snapshot of records 0, 1, 2 whose time ``t`` is null in record 1: snap never writes
    one; docs/format.md's writer can."""
    names = run_blocks({}, 0, 3)
    schema = pa.schema([("i", pa.int64()), ("t", pa.timestamp("ms"))])
    batch = pa.record_batch([pa.array([0, 1, 2]), pa.array([5, None, 7], pa.timestamp("ms"))],
                            schema=schema)  # fmt: skip
    root = str(tmp_path / "foreign")
    names["write_snapshot"](root, [[batch]], "none")
    return root


def test_a_null_time_another_writer_left_is_nat(tmp_path: Path) -> None:
    root = with_a_null_time(tmp_path)
    for kw in ({"shuffle": False}, {}):
        batches = list(snap.open(root).loader(3, **kw))
        got = {int(i): t for b in batches for i, t in zip(b["i"], b["t"], strict=True)}
        assert np.isnat(got[1]) and got[0] == np.datetime64(5, "ms"), got


def test_to_torch_says_a_null_time_is_one(tmp_path: Path) -> None:
    """It said the column "holds a time no Python datetime holds (its values run from NaT
    to NaT ...)"."""
    root = with_a_null_time(tmp_path)
    with pytest.raises(snap.RecordError, match=r"column 't' holds a missing time \(NaT"):
        list(snap.open(root).loader(3, shuffle=False).to_torch())


@pytest.mark.parametrize("codec", ["none", "lz4"])
def test_decode_processes_read_times_as_threads_do(tmp_path: Path, codec: str) -> None:
    """``processes=`` refused a time column ("decodes columns of numbers and tensors only"),
    though a window holds times as arrays of fixed width, as numbers."""
    from snapshot_cli.readers import procs

    assert len(procs.pool().wait_ready(2)) == 2  # (every window below goes through them)
    out = str(tmp_path / codec)
    snap.create(table, out, inputs=[0, 1, 2], workers=0, compression=codec, batch_rows=500)
    s = snap.open(out)
    for shuffle in (True, False):
        kw: dict[str, Any] = {"seed": 2, "shuffle": shuffle, "epochs": 2}
        threads = [{k: v.copy() for k, v in b.items()} for b in s.loader(256, **kw)]
        with s.loader(256, processes=2, **kw) as loader:
            got = [{k: v.copy() for k, v in b.items()} for b in loader]
            assert loader.stats()["stage_seconds"]["decode_process_cpu"] > 0
        assert len(got) == len(threads)
        for a, b in zip(threads, got, strict=True):
            for k in a:
                assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), k
    root = with_a_null_time(tmp_path)
    got_t = [t for b in snap.open(root).loader(3, shuffle=False, processes=1) for t in b["t"]]
    assert np.isnat(got_t[1]) and got_t[2] == np.datetime64(7, "ms"), got_t


TF_TIMES = """
import json, sys
import numpy as np
import snapshot_cli as snap

s = snap.open(sys.argv[1])
try:
    s.loader(64, shuffle=False).to_tf()
    said = None
except snap.OptionError as err:
    said = str(err)

def ticks(batch):
    times = {k: batch[k].astype("datetime64[ns]").view(np.int64) for k in ("ms", "zoned")}
    return {**times, "took": batch["took"].view(np.int64), "i": batch["i"]}

first = next(iter(s.loader(64, shuffle=False, map=ticks).to_tf()))
print(json.dumps({"said": said, "ms": first["ms"].numpy().tolist()}))
"""


def test_to_tf_names_every_time_column_and_says_how_to_keep_them(tmp_path: Path) -> None:
    """``to_tf()`` named only the first time column (the next once that one was left out),
    with a plain TypeError and half the advice README gives (a probe): every one, and the
    map= that makes them int64 ticks, which then reach TensorFlow as the values are.
    (TensorFlow in a process of its own, as in test_tf.py.)"""
    snap.create(table, tmp_path / "s", inputs=[0], workers=0)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    res = subprocess.run([sys.executable, "-c", TF_TIMES, str(tmp_path / "s")], env=env,
                         capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    said = out["said"]
    assert said.startswith("columns 'ms' (timestamp[ms]), 'zoned' (timestamp[us, tz=Europe/Paris")
    assert "'took' (duration[ns]) have no TensorFlow form" in said and "map=" in said
    assert out["ms"] == [(i * 1000 + 7) * 10**6 for i in range(64)]
