"""A manifest that spells its shard paths with "." segments and its crc32c in uppercase (as
another writer may), on object stores, where a path is an object's name and the storage
reports its own crc32c: the loader, ``verify`` (full, and ``--fast``, which compares GCS's
crc32c with the manifest's) and ``gc`` (which must keep every listed shard and the task
table) treat it as the snapshot snap would have written. The servers are the backend suite's
(fake-gcs-server, moto)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import snapshot_cli as snap
from tests.backends.conftest import Backend, backend, gcs_server, s3_server  # noqa: F401
from tests.commands.conftest import run_json


def preprocess(i: int) -> Iterator[dict[str, Any]]:
    for j in range(3):
        yield {"x": np.full(4, 10 * i + j, np.int32)}


def respelled(doc: dict[str, Any]) -> None:
    for k, entry in enumerate(doc["shards"]):
        entry["path"] = ("./" if k % 2 == 0 else "") + entry["path"].replace("/", "/./")
        entry["crc32c"] = entry["crc32c"].upper()
        entry["batch_crc32c"] = entry["batch_crc32c"].upper()
    doc["history"]["tasks"] = "./" + doc["history"]["tasks"]
    doc["history"]["tasks_crc32c"] = doc["history"]["tasks_crc32c"].upper()


@pytest.mark.parametrize("backend", ["gcs", "s3", "local"], indirect=True)
def test_dot_segments_and_uppercase_crc32c_on_object_stores(backend: Backend) -> None:  # noqa: F811
    url = backend.url()
    snap.create(preprocess, url, inputs=[0, 1, 2, 3], workers=0, inputs_per_task=1)
    fs, manifest = backend.fs, backend.path(url) + "/manifest.json"
    doc = json.loads(fs.cat_file(manifest))
    listed = sorted(e["path"] for e in doc["shards"])
    respelled(doc)
    assert all(any(c.isupper() for c in e["crc32c"] + e["batch_crc32c"]) for e in doc["shards"])
    fs.pipe_file(manifest, json.dumps(doc).encode())
    backend.refresh()

    assert sorted(e.path for e in snap.open(url).manifest.shards) == listed
    for extra in ([], ["--fast"]):
        checked = run_json("verify", url, *extra)
        assert checked["ok"] is True and checked["num_damaged"] == 0, checked
    if backend.name == "gcs":  # the storage's own crc32c, compared with the manifest's
        assert run_json("verify", url, "--fast")["checks"] == {"storage-crc32c": 4}
    loader = snap.open(url).loader(batch_size=5, shuffle=False)
    got = sorted(int(x[0]) for b in loader for x in b["x"])
    assert got == sorted(10 * i + j for i in range(4) for j in range(3))
    assert run_json("gc", url, "--retention", "0")["removed"] == []
    backend.refresh()
    assert sorted(e["path"] for e in run_json("inspect", url, "--shards")["shards"]) == listed
    assert run_json("verify", url)["ok"] is True  # gc took nothing a reader needs
