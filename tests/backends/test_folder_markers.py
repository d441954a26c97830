"""Folder markers: the empty objects named ``dir/`` that S3's console ("Create folder"), GCS's
console and many tools write to show a folder. s3fs lists one as a file beside ``dir``:

- ``--input 's3://b/d/**'`` gave each marker to the pipeline as an input (a probe's create
  read 4 inputs of 2 files, and a pipeline that read them wrote empty records);
- an OUTPUT made as an empty folder was refused: "exists and is not a snapshot (it holds
  consoledir)", the folder naming itself.

Every object store, each with a marker at every level a user may make one.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import snapshot_cli as snap
from tests.backends.conftest import Backend
from tests.commands.conftest import run

STORES = ["s3", "gcs"]  # (fsspec's memory store keeps no "dir/" object)


def named(path: str) -> Any:
    yield {"path": path}


def put(backend: Backend, key: str, data: bytes = b"") -> None:
    path = backend.path(backend.url(key)) + ("/" if key.endswith("/") else "")  # (kept)
    backend.fs.pipe_file(path, data)
    if key.endswith("/"):  # the marker is there, as itself
        backend.refresh()
        assert path in backend.fs.find(path.rstrip("/"), withdirs=True)


@pytest.mark.parametrize("backend", STORES, indirect=True)
@pytest.mark.parametrize("pattern", ["data/**", "data/**/*.bin", "data/*", "data/*/*"])
def test_a_folder_marker_is_no_input(backend: Backend, pattern: str) -> None:
    for key in ("data/", "data/sub/", "data/sub/deeper/"):
        put(backend, key)  # (each marker, as a console makes it)
    files = {"data/a.bin": b"a" * 30, "data/sub/b.bin": b"b" * 30,
             "data/sub/deeper/c.bin": b"c" * 30}  # fmt: skip
    for key, data in files.items():
        put(backend, key, data)
    backend.refresh()
    out = backend.url("out")
    snap.create(named, out, inputs=backend.url(pattern), workers=0, progress=False)
    read = sorted(p for b in snap.open(out).loader(8, shuffle=False) for p in b["path"])
    want = {
        "data/**": files, "data/**/*.bin": files, "data/*": ["data/a.bin"],
        "data/*/*": ["data/sub/b.bin"],
    }[pattern]  # fmt: skip
    assert read == sorted(backend.url(k) for k in want)


@pytest.mark.parametrize("backend", STORES, indirect=True)
def test_an_empty_folder_made_as_output_takes_a_snapshot(backend: Backend) -> None:
    put(backend, "consoledir/")
    backend.refresh()
    out = backend.url("consoledir")
    code, _, err = run("create", "tests.backends.test_folder_markers:named", out,
                       "--inputs-from", "tests.backends.test_folder_markers:three",
                       "--workers", "0")  # fmt: skip
    assert code == 0, err
    assert sorted(p for b in snap.open(out).loader(8) for p in b["path"]) == ["x", "y", "z"]
    code, out_text, err = run("gc", out, "--dry-run", "--json")  # (no entry of the snapshot)
    assert code == 0 and json.loads(out_text)["would_remove"] == [], err


def three() -> list[str]:
    return ["x", "y", "z"]
