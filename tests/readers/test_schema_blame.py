"""When a shard's own schema and the manifest's differ, the one changed since it was written
is named: the manifest (ManifestError naming manifest.json and how to put it back) when the
shard's bytes are as written, else the shard (CorruptShardError naming it). On every read
path: a local shard checked per record batch (format 2) or whole (format 1), with
``verify=False``, and a remote one fetched whole, kept in a ``cache_dir`` or read by range.

The manifest's case is the one Hypothesis found in CI: one byte of the schema's base64 text
changed makes ``string`` a ``large_string``, which the description beside it does not tell
apart, so the manifest still parses (``tests/test_manifest_schema_bytes.py``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import snapshot_cli as snap
from snapshot_cli import ipc_blocks, storage
from snapshot_cli import schema as schema_mod
from snapshot_cli.errors import CorruptShardError, ManifestError
from snapshot_cli.readers import checked
from snapshot_cli.readers import shard as shard_mod
from snapshot_cli.readers.verify import verify

PATHS = ["local", "local format 1", "local verify=False", "remote", "remote cache_dir",
         "remote by range"]  # fmt: skip


def preprocess(i: int) -> Iterator[dict[str, Any]]:
    for k in range(20):
        yield {"label": i * 20 + k, "text": f"record {i * 20 + k}"}


@pytest.fixture(params=PATHS)
def made(
    request: pytest.FixtureRequest, tmp_path: Path, memfs: Any, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    how: str = request.param
    url = "memory://blame/snap" if how.startswith("remote") else str(tmp_path / "snap")
    snap.create(preprocess, url, inputs=[0, 1, 2], workers=0, inputs_per_task=1)
    fs, root = storage.resolve(url)
    if how == "local format 1":  # (no crc32c per record batch: the shard checked whole)
        doc = json.loads(storage.read_bytes(fs, f"{root}/manifest.json"))
        for entry in doc["shards"]:
            del entry["batch_crc32c"]
        doc["format_version"] = 1
        fs.pipe_file(f"{root}/manifest.json", json.dumps(doc).encode())
    if how == "remote by range":
        monkeypatch.setattr(shard_mod, "MEMORY_BUDGET", 1024)
    options: dict[str, Any] = {"verify": how != "local verify=False"}
    if how == "remote cache_dir":
        options["cache_dir"] = str(tmp_path / "cache")
    clean = sorted(labels(url, options))  # (read once clean first: what a sweep has done)
    assert clean == list(range(60))
    return {"url": url, "fs": fs, "root": root, "options": options}


def labels(url: str, options: dict[str, Any]) -> list[int]:
    s = snap.open(url)
    with s.loader(7, shuffle=False, **options) as loader:
        return [int(x) for b in loader for x in b["label"]]


def edit(fs: Any, path: str, change: Callable[[bytes], bytes]) -> None:
    fs.pipe_file(path, change(storage.read_bytes(fs, path)))


def large_text(manifest: bytes) -> bytes:
    """The manifest with column 'text' a large_string in its Arrow schema (its description,
    which says "string" for both, unchanged)."""
    doc = json.loads(manifest)
    schema = schema_mod.decode_schema(doc["schema"]["arrow_ipc_base64"])
    assert schema.field("text").type == pa.string()
    changed = schema.set(schema.get_field_index("text"), pa.field("text", pa.large_string()))
    doc["schema"]["arrow_ipc_base64"] = schema_mod.encode_schema(changed)
    return json.dumps(doc).encode()


def test_a_manifest_whose_schema_changed_is_named(made: dict[str, Any]) -> None:
    fs, root = made["fs"], made["root"]
    edit(fs, f"{root}/manifest.json", large_text)
    with pytest.raises(ManifestError) as caught:
        labels(made["url"], made["options"])
    message = str(caught.value)
    assert message.startswith(storage.to_url(fs, f"{root}/manifest.json") + ": "), message
    assert "is as written" in message and "column 'text'" in message
    assert "put back the newest copy" in message and "snap create --overwrite" in message
    report = verify(snap.open(made["url"]))  # (snap verify: no shard called damaged)
    assert not report.ok and not report.damaged, report.to_json()
    blamed = [p for p in report.problems if "the manifest's schema is damaged, not the" in p]
    assert len(blamed) == 1 and blamed[0].startswith(message.split(": ")[0]), report.problems


def test_a_shard_whose_schema_changed_is_named(made: dict[str, Any]) -> None:
    """The shard's footer schema changed in place (same size): the shard is blamed."""
    fs, root = made["fs"], made["root"]
    victim = snap.open(made["url"]).shards[1].path
    edit(fs, f"{root}/{victim}", with_large_text)
    checked._checked.clear()  # (a file changed within the same mtime tick is checked again)
    shard_mod._verified_local.clear()
    options = made["options"]
    if "cache_dir" in options:  # (a cached copy is the shard as fetched: fetched again)
        for entry in Path(options["cache_dir"]).glob("*.arrow"):
            entry.unlink()
    with pytest.raises(CorruptShardError) as caught:
        labels(made["url"], options)
    message = str(caught.value)
    assert storage.to_url(fs, f"{root}/{victim}") in message, message
    assert "the snapshot is damaged" in message or "crc32c" in message, message
    report = verify(snap.open(made["url"]))
    assert [c.path for c in report.damaged] == [victim], report.to_json()
    assert not any("schema" in p for p in report.problems), report.problems


def with_large_text(data: bytes) -> bytes:
    """The shard with the byte of its schema messages that makes 'text' a Utf8 made
    LargeUtf8 (flatbuffers' Type 5 and 20): found by trying each byte that is 5."""
    found = bytearray(data)
    for at in [i for i, b in enumerate(data) if b == 5]:
        trial = bytearray(found)
        trial[at] = 20
        try:
            schema = ipc_blocks.file_schema(
                lambda n, off, d=trial: bytes(d[off : off + n]), len(trial)
            )
        except ipc_blocks.FooterError:
            continue
        if "text" in schema.names and schema.field("text").type == pa.large_string():
            found = trial  # (the stream's schema message, then the footer's)
            try:
                if pa.ipc.open_file(pa.py_buffer(bytes(found))).schema == schema:
                    return bytes(found)
            except pa.ArrowInvalid:
                continue
    raise AssertionError("no byte of the shard makes 'text' a large_string")
