"""A writer killed while it wrote a shard to S3 leaves a multipart upload open: its parts
stored and billed, in no listing of the bucket. ``snap gc`` lists them under the snapshot
and aborts those no live writer uses (see writers/gc_uploads.py), as it removes such shards.

A real create on the S3 server (moto): its pipeline kills its own worker process once the
shard being written has parts uploaded (s3fs's block size made 5 MiB, S3's least).
"""

from __future__ import annotations

from typing import Any

import pytest

import snapshot_cli as snap
from snapshot_cli.errors import PipelineError
from snapshot_cli.writers.gc import gc
from tests.backends.conftest import BUCKET, Backend

PIPE = """
import os, signal
import numpy as np

def preprocess(i):
    for j in range(4):  # 4 MiB a record, a record batch each: parts go up as they come
        yield {"x": np.random.default_rng(i * 10 + j).integers(0, 2**31, 1 << 20, dtype=np.int32)}
    if i == 1:
        os.kill(os.getpid(), signal.SIGKILL)  # mid-shard: 16 MiB sent, the shard not closed
"""
BLOCK = {"default_block_size": 5 << 20}


def _uploads(backend: Backend) -> list[str]:
    """The keys of the open uploads under this test's snapshot."""
    prefix = backend.path(backend.url()).split("/", 1)[1] + "/"  # (S3's keys: no bucket)
    found = backend.fs.call_s3("list_multipart_uploads", Bucket=BUCKET, Prefix=prefix)
    return [u["Key"] for u in found.get("Uploads", [])]


@pytest.mark.parametrize("backend", ["s3"], indirect=True)
def test_gc_aborts_the_upload_a_killed_writer_left(backend: Backend, write_pipeline) -> None:  # type: ignore[no-untyped-def]
    spec = write_pipeline(PIPE)
    url = backend.url()
    with pytest.raises(PipelineError, match="SIGKILL"):
        snap.create(spec, url, inputs=[0, 1], inputs_per_task=1, batch_rows=1, workers=1,
                    storage_options=BLOCK)  # fmt: skip
    left = _uploads(backend)
    assert len(left) == 1 and "/shards/" in left[0], left  # (task 0's shard was finished)
    listed = gc(url, dry_run=True)
    assert [(g.kind, g.path) for g in listed.garbage if g.kind == "upload"] == [
        ("upload", left[0].rsplit("/", 2)[-2] + "/" + left[0].rsplit("/", 1)[-1])
    ]
    assert [g.bytes for g in listed.garbage if g.kind == "upload"][0] >= 10 << 20
    assert _uploads(backend) == left  # (a dry run aborts nothing)
    done = gc(url)
    assert "upload" in {g.kind for g in done.garbage}
    assert _uploads(backend) == []


@pytest.mark.parametrize("backend", ["s3"], indirect=True)
def test_gc_leaves_uploads_of_names_snap_does_not_give(backend: Backend) -> None:
    """Under the snapshot's prefix but not a shard of snap's (a file someone is putting
    there): not gc's to abort."""
    url = backend.url("theirs")
    snap.create(lambda i: iter([{"x": i}]), url, inputs=[0], workers=0)
    prefix = backend.path(url).split("/", 1)[1]
    keys = [f"{prefix}/notes/big.bin", f"{prefix}/shards/their-file.arrow"]
    ids = [backend.fs.call_s3("create_multipart_upload", Bucket=BUCKET, Key=k)["UploadId"]
           for k in keys]  # fmt: skip
    try:
        assert [g for g in gc(url).garbage if g.kind == "upload"] == []
        found = backend.fs.call_s3("list_multipart_uploads", Bucket=BUCKET, Prefix=prefix + "/")
        assert sorted(u["Key"] for u in found.get("Uploads", [])) == sorted(keys)
    finally:
        for key, upload in zip(keys, ids, strict=True):
            backend.fs.call_s3("abort_multipart_upload", Bucket=BUCKET, Key=key, UploadId=upload)


@pytest.mark.parametrize("backend", ["s3"], indirect=True)
def test_a_user_who_may_not_list_uploads_still_has_gc_do_the_rest(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S3's ListBucketMultipartUploads is a permission of its own (and some S3-compatible
    stores lack the call): gc failed as a whole where it was refused. Injected at the call."""
    url = backend.url("denied")
    for n in (1, 2):  # (version 2 replaces version 1: its shard is garbage at retention 0)
        snap.create(lambda i: iter([{"x": i}]), url, inputs=list(range(n)), workers=0,
                    overwrite=n > 1)  # fmt: skip
    fs, real = backend.fs, backend.fs.call_s3

    def call_s3(method: str, *args: Any, **kwargs: Any) -> Any:
        if method == "list_multipart_uploads":
            raise PermissionError("Access Denied")
        return real(method, *args, **kwargs)

    monkeypatch.setattr(fs, "call_s3", call_s3)
    done = gc(url, retention=0)
    assert {g.kind for g in done.garbage} == {"shard", "version"}, done.garbage  # (removed)
    assert done.note is not None and done.note.endswith(
        "unfinished uploads not looked for: listing them failed (PermissionError: Access Denied)"
    ), done.note
