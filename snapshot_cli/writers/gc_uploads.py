"""S3 uploads a killed writer left unfinished: found and aborted by ``snap gc``.

s3fs writes a shard of more than one block (50 MiB) as a multipart upload; a writer killed
mid-shard (a spot instance reclaimed, SIGKILL) leaves the upload open, its parts stored and
billed, listed by no listing of the bucket and so by nothing gc saw: a create killed 20
times while it wrote 256 MiB shards left gigabytes nobody could see. gc now lists the
uploads under the snapshot (S3's ``ListMultipartUploads``, by prefix) and aborts those of
shards snap names and no live writer uses, as it removes such shards (kind ``upload``).
GCS's resumable uploads expire by themselves (a week); other stores have none.
"""

from __future__ import annotations

import contextlib
import functools
import posixpath
from typing import Any

from fsspec import AbstractFileSystem

from .. import layout, retry, storage
from ..layout import SHARDS_DIR

S3 = ("s3", "s3a")
WHY = "an upload a killed writer left unfinished (S3 keeps and bills its parts)"


def _uploads(fs: AbstractFileSystem, root: str, key: str = "") -> list[dict[str, Any]]:
    """The open multipart uploads under ``root`` (of ``key`` in it, if given): S3's own."""
    bucket, prefix, _ = fs.split_path(posixpath.join(root, key) if key else root + "/")
    found: list[dict[str, Any]] = []
    more: dict[str, str] = {}
    while True:
        ask = functools.partial(fs.call_s3, "list_multipart_uploads", Bucket=bucket,
                                Prefix=prefix, **more)  # fmt: skip
        page = storage.retrying(
            ask, f"listing the unfinished uploads of {storage.to_url(fs, root)}"
        )
        found += [u for u in page.get("Uploads", []) if not key or u["Key"] == prefix]
        if not page.get("IsTruncated"):
            return found
        more = {"KeyMarker": page["NextKeyMarker"], "UploadIdMarker": page["NextUploadIdMarker"]}


def _stored(fs: AbstractFileSystem, bucket: str, upload: dict[str, Any]) -> int:
    """The bytes of the parts ``upload`` holds (its first page of parts: up to 1,000)."""
    parts = storage.retrying(
        lambda: fs.call_s3(
            "list_parts", Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"]
        ),  # fmt: skip
        f"listing the parts of {upload['Key']}",
    )
    return sum(int(p.get("Size", 0)) for p in parts.get("Parts", []))


def unfinished(
    fs: AbstractFileSystem, root: str, live_run: str | None, keep_all: bool
) -> tuple[list[tuple[str, int]], str | None]:
    """The shards (relative to ``root``) with unfinished uploads gc may abort, and the bytes
    stored for each: none while a writer that has not chosen its run holds the lease
    (``keep_all``), none of the live run's, none of a name snap does not give. And a note if
    they could not be listed: a user may not (S3's ListBucketMultipartUploads is a permission
    of its own) or the store has no such call; gc does the rest of its work all the same."""
    if storage.protocol(fs) not in S3 or keep_all:
        return [], None
    bucket = fs.split_path(root)[0]
    _, prefix, _ = fs.split_path(root + "/")
    sizes: dict[str, int] = {}
    try:
        for upload in _uploads(fs, root):
            rel = upload["Key"][len(prefix) :].lstrip("/")
            shards, _, name = rel.rpartition("/")
            if shards != SHARDS_DIR or not layout.is_own_shard(name):
                continue  # (someone else's upload under the prefix: left alone)
            if live_run and layout.is_shard_of(name, live_run):
                continue
            sizes[rel] = sizes.get(rel, 0) + _stored(fs, bucket, upload)
    except Exception as err:  # (any refusal: the uploads are gc's extra, not its job)
        return [], f"unfinished uploads not looked for: listing them failed ({retry.said(err)})"
    return sorted(sizes.items()), None


def abort(fs: AbstractFileSystem, root: str, rel: str) -> None:
    """Abort every unfinished upload of the shard ``rel``; one already gone is no error."""
    bucket = fs.split_path(root)[0]
    for upload in _uploads(fs, root, rel):
        stop = functools.partial(fs.call_s3, "abort_multipart_upload", Bucket=bucket,
                                 Key=upload["Key"], UploadId=upload["UploadId"])  # fmt: skip
        with contextlib.suppress(FileNotFoundError):  # (finished or aborted meanwhile)
            storage.retrying(stop, f"aborting the unfinished upload of {rel}")


def remove(fs: AbstractFileSystem, root: str, path: str, kind: str) -> None:
    """Remove one item of gc's garbage: an unfinished upload is aborted, a run's directory
    removed with what it holds, any other file removed."""
    if kind == "upload":
        with storage.errors_named(fs, storage.join(root, path), "deleting"):
            abort(fs, root, path)
    else:
        storage.remove(fs, storage.join(root, path), recursive=kind == "run")
