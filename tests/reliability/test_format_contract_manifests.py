"""Manifests another writer (or a hand) may write differently from snap, within the format:
every command and the loader answer them alike, in one line.

- A schema with a column name twice (snap's create refuses one; another writer may not) is
  refused where the manifest is validated, naming the column: it passed ``snap verify``,
  then ``head`` and ``bench`` failed with "unexpected KeyError (a bug in snap)".
- A crc32c in uppercase hex (shards' ``crc32c``, ``batch_crc32c``, ``history.tasks_crc32c``)
  is the same checksum: it was refused as "damaged or edited by hand".
- A shard path with "." segments (``./shards/x.arrow``) is the file it names: it was refused
  as not "relative and inside the snapshot", which it is. gc, verify, the loader and its cache
  see it as ``shards/x.arrow`` (gc must not take the file for one no version lists).
- A codec this snap does not know is a newer snap's, as a newer ``format_version`` is: it
  was reported as damage, with advice to ``--overwrite``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import crc32c
import numpy as np
import pyarrow as pa
import pytest

import snapshot_cli as snap
from snapshot_cli.errors import ManifestError
from snapshot_cli.manifest import Manifest, check_relative_path
from tests.commands.conftest import run
from tests.reliability.shards import block_crcs, copy_snapshot, load_manifest

COMMANDS = (["verify"], ["verify", "--fast"], ["inspect"], ["head"], ["bench", "--epochs", "1"])


def foreign_snapshot(out: Path, batch: pa.RecordBatch, **manifest: Any) -> Path:
    """A one-shard snapshot as another writer of snap's format 2 makes it, of ``batch`` (its
    schema as it is: duplicate names, permutations); ``manifest``: keys to set."""
    (out / "shards").mkdir(parents=True)
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    with pa.ipc.new_file(sink, batch.schema, options=options) as writer:
        writer.write_batch(batch)
    data = sink.getvalue().to_pybytes()
    (out / "shards" / "x-00000-0000.arrow").write_bytes(data)
    entry = {"path": "shards/x-00000-0000.arrow", "records": batch.num_rows,
             "record_batches": 1, "bytes": len(data), "uncompressed_bytes": batch.nbytes,
             "crc32c": f"{crc32c.crc32c(data):08x}", "batch_rows": [[batch.num_rows, 1]],
             "batch_crc32c": block_crcs(data, "")}  # fmt: skip
    schema = base64.b64encode(batch.schema.serialize().to_pybytes()).decode()
    doc = {
        "format": "snap", "format_version": 2, "fingerprint": "1" * 64,
        "fingerprint_parts": {"code": "0" * 64, "params": "0" * 64, "inputs": "0" * 64},
        "pipeline": {"spec": "x.py:f", "function": "f", "params": {}, "inputs": {"count": 0}},
        "schema": {"arrow_ipc_base64": schema, "columns": []},
        "compression": {"codec": "zstd", "level": 1},
        "totals": {"records": batch.num_rows, "shards": 1, "record_batches": 1,
                   "bytes": len(data), "uncompressed_bytes": batch.nbytes},
        "created": "2026-01-01T00:00:00+00:00", "created_by": {"snap": "other"}, "run": "x",
        "shards": [entry], **manifest,
    }  # fmt: skip
    (out / "manifest.json").write_text(json.dumps(doc))
    return out


def answers(path: Path) -> dict[str, tuple[int, str]]:
    """Each command's exit code and last line of stderr."""
    out = {}
    for command in COMMANDS:
        code, _, stderr = run(*command, str(path))
        out[" ".join(command)] = code, (stderr.strip().splitlines() or [""])[-1]
    return out


@snap.ragged("t")
def preprocess(i: int) -> Iterator[dict[str, Any]]:
    for j in range(4):
        yield {"x": np.full(3, 10 * i + j, np.float32), "t": np.arange(j + 1, dtype=np.int32)}


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A snapshot of snap's own (format 3, 3 shards of 2 record batches)."""
    out = tmp_path_factory.mktemp("contract") / "snap"
    snap.create(preprocess, str(out), inputs=[0, 1, 2], workers=0, inputs_per_task=1,
                batch_rows=2)  # fmt: skip
    return out


def edited(made: Path, tmp_path: Path, edit: Any) -> Path:
    """A copy of ``made`` whose manifest.json ``edit`` (a function of the dict) changed."""
    out = copy_snapshot(made, tmp_path / "copy")
    doc = load_manifest(out)
    edit(doc)
    (out / "manifest.json").write_text(json.dumps(doc))
    return out


def every_record(path: Path, **options: Any) -> list[float]:
    loader = snap.open(path).loader(batch_size=5, shuffle=False, **options)
    return sorted(float(x[0]) for b in loader for x in b["x"])


WANT = sorted(float(10 * i + j) for i in range(3) for j in range(4))


# --- duplicate column names --------------------------------------------------------------------


def test_a_column_name_twice_is_one_answer_everywhere(tmp_path: Path) -> None:
    batch = pa.record_batch([pa.array([1, 2]), pa.array([3, 4])], names=["a", "a"])
    path = foreign_snapshot(tmp_path / "dup", batch)
    got = answers(path)
    lines = {line for _, line in got.values()}
    assert len(lines) == 1, got  # the same one line from every command
    (line,) = lines
    assert all(code == 1 for code, _ in got.values()), got
    assert "'a' more than once" in line and "not written by snap, or is damaged" in line
    assert line.startswith("snap: error:") and "KeyError" not in line and "bug" not in line
    with pytest.raises(ManifestError, match="'a' more than once") as caught:
        snap.open(path).loader(batch_size=2)
    assert str(caught.value) in line


# --- crc32c in uppercase ---------------------------------------------------------------------


def _upper(doc: dict[str, Any]) -> None:
    for entry in doc["shards"]:
        entry["crc32c"] = entry["crc32c"].upper()
        entry["batch_crc32c"] = entry["batch_crc32c"].upper()
        assert any(c.isalpha() for c in entry["batch_crc32c"] + entry["crc32c"])
    doc["history"]["tasks_crc32c"] = doc["history"]["tasks_crc32c"].upper()


def test_uppercase_crc32c_is_the_same_checksum(made: Path, tmp_path: Path) -> None:
    path = edited(made, tmp_path, _upper)
    for command, (code, line) in answers(path).items():
        assert code == 0, (command, line)
    assert every_record(path) == WANT  # the loader checks every batch's crc32c
    cache = tmp_path / "cache"
    with pytest.warns(UserWarning, match="is not used"):  # (local: read in place, as above)
        assert every_record(path, cache_dir=str(cache)) == WANT
    # a grow reads the task table, checked against history.tasks_crc32c: reuses its tasks
    assert grow(path).changes["tasks_reused"] == 3
    assert all(e.crc32c == e.crc32c.lower() for e in snap.open(path).manifest.shards)


def grow(path: Path) -> Any:
    """One input more: the new version's history."""
    snap.create(preprocess, str(path), inputs=[0, 1, 2, 3], workers=0, inputs_per_task=1,
                batch_rows=2)  # fmt: skip
    history = snap.open(path).manifest.history
    assert history is not None and history.changes["tasks_computed"] == 1
    return history


def test_a_wrong_crc32c_in_uppercase_is_still_wrong(made: Path, tmp_path: Path) -> None:
    def wrong(doc: dict[str, Any]) -> None:
        doc["shards"][0]["crc32c"] = "ABCDEF12"

    code, stdout, _ = run("verify", str(edited(made, tmp_path, wrong)))
    assert code == 1 and "crc32c" in stdout and "abcdef12" in stdout


# --- "." segments in shard paths -------------------------------------------------------------


def _dotted(doc: dict[str, Any]) -> None:
    first, second = doc["shards"][0], doc["shards"][1]
    first["path"] = "./" + first["path"]
    second["path"] = second["path"].replace("shards/", "shards/./")
    doc["history"]["tasks"] = "./" + doc["history"]["tasks"]


def test_dot_segments_name_the_same_files(made: Path, tmp_path: Path) -> None:
    path = edited(made, tmp_path, _dotted)
    for command, (code, line) in answers(path).items():
        assert code == 0, (command, line)
    assert every_record(path) == WANT
    with pytest.warns(UserWarning, match="is not used"):  # (local: read in place, as above)
        assert every_record(path, cache_dir=str(tmp_path / "cache")) == WANT
    listed = [e.path for e in snap.open(path).manifest.shards]
    assert listed == [e.path for e in snap.open(made).manifest.shards]
    # gc sees every shard and the task table as referenced: it removes nothing
    doc = json.loads(run("gc", str(path), "--retention", "0", "--json")[1])
    assert doc["removed"] == [], doc
    assert len(list((path / "shards").iterdir())) == 3
    assert (path / load_manifest(made)["history"]["tasks"]).exists()
    assert every_record(path) == WANT
    assert grow(path).changes["tasks_reused"] == 3  # its task table found by its path


def test_dot_segments_in_the_task_table_name_the_same_shards(made: Path, tmp_path: Path) -> None:
    """The task table's shard paths were kept as spelled: with ``./`` there (as in the
    manifest, which is read without them), a grow reused none of the tasks, without a word,
    and ``snap inspect SHARD`` named no task."""
    from snapshot_cli.readers.checksum import crc32c_buffer

    path = copy_snapshot(made, tmp_path / "copy")
    doc = load_manifest(path)
    table_file = path / doc["history"]["tasks"]
    table = json.loads(table_file.read_bytes())
    for task in table["tasks"]:
        task["shards"] = ["./" + p for p in task["shards"]]
    data = json.dumps(table).encode()
    table_file.write_bytes(data)
    doc["history"]["tasks_crc32c"] = crc32c_buffer(data)
    doc["shards"] = [{**e, "path": "./" + e["path"]} for e in doc["shards"]]
    (path / "manifest.json").write_text(json.dumps(doc))
    shard = path / snap.open(path).manifest.shards[0].path
    code, out, _ = run("inspect", str(shard), "--json")
    assert code == 0 and json.loads(out)["task"] is not None, out
    assert grow(path).changes["tasks_reused"] == 3


@pytest.mark.parametrize(
    "bad",
    ["../x.arrow", "shards/../../x.arrow", "/abs/x.arrow", "shards\\x.arrow", "shards//x.arrow",
     "shards/x.arrow/", ".", "./", "shards/.", "gs://b/x.arrow", ""],
)  # fmt: skip
def test_paths_that_leave_or_are_not_plain_are_still_refused(bad: str) -> None:
    with pytest.raises(ManifestError, match="must be relative and stay inside") as caught:
        check_relative_path(bad, "m")
    assert "none empty or '..' (no leading '/')" in str(caught.value)


def test_one_file_spelled_two_ways_is_listed_twice(made: Path, tmp_path: Path) -> None:
    def twice(doc: dict[str, Any]) -> None:
        doc["shards"][1]["path"] = "./" + doc["shards"][0]["path"]

    with pytest.raises(ManifestError, match="lists the shard '.*' twice"):
        Manifest.from_json((edited(made, tmp_path, twice) / "manifest.json").read_bytes())


# --- a codec of a newer snap -----------------------------------------------------------------


def test_an_unknown_codec_is_a_newer_snaps(made: Path, tmp_path: Path) -> None:
    path = edited(made, tmp_path, lambda d: d["compression"].update(codec="brotli"))
    got = answers(path)
    assert {line for _, line in got.values()} == {
        f"snap: error: {path}/manifest.json: 'compression.codec' is 'brotli', which this snap "
        "does not read: it reads zstd, lz4, none (it was written by a newer snap; upgrade "
        "snap to read it)"
    }, got
    assert all(code == 1 for code, _ in got.values())


@pytest.mark.parametrize("codec", [None, 5, True, "", "ZSTD!", ["zstd"]])
def test_a_codec_of_the_wrong_kind_is_damage(made: Path, tmp_path: Path, codec: Any) -> None:
    path = edited(made, tmp_path, lambda d: d["compression"].update(codec=codec))
    code, _, stderr = run("inspect", str(path))
    assert code == 1 and "'compression.codec'" in stderr
    assert "upgrade snap" not in stderr and "damaged or was edited by hand" in stderr
