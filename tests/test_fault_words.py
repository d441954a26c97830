"""The HTTP status behind a storage client's error, and its words, wherever a layer says it:
:func:`faults.fault` (a command's last resort, a worker's, verify's), :func:`faults.read_failure`
(a shard's read) and :func:`faults.errors_named` (every storage call).

The errors are the clients' own: gcsfs's ``validate_response`` raising what it raises for each
status (a 403 as a bare ``OSError("Forbidden: URL")``, a 404 as ``FileNotFoundError(URL)``, a
412 as ``FileExistsError(URL)``: no status, its request URL as the text), s3fs's translation
of botocore's (a 401 or 429 as EIO), botocore's response checksum mismatch. The real servers'
answers: tests/backends/test_http_fault_words.py.
"""

from __future__ import annotations

import json
from typing import Any

import botocore.exceptions
import gcsfs.core
import pytest
from gcsfs.retry import validate_response
from s3fs.errors import translate_boto_error

from snapshot_cli import faults, retry
from snapshot_cli.errors import CorruptShardError, StorageError

REQUEST = (
    "http://127.0.0.1:35701/download/storage/v1/b/bkt/o/run%2Fsnap%2Fshards%2Fa.arrow?alt=media"
)
UPLOAD = "http://127.0.0.1:35701/upload/storage/v1/b/bkt/o?uploadType=resumable&name=run%2Fsnap%2Fmanifest.json&upload_id=9f"
GCS_STATUSES = (400, 401, 403, 404, 409, 412, 416, 429, 500, 502, 503, 504)


def gcsfs_error(status: int, url: str = REQUEST, message: str = "refused here") -> Exception:
    body = json.dumps({"error": {"code": status, "message": message}}).encode()
    try:
        validate_response(status, body, url)
    except Exception as err:
        return err
    raise AssertionError(f"validate_response accepted {status}")


def s3fs_error(status: int) -> OSError:
    response: Any = {"Error": {"Code": str(status), "Message": "Nope"},
                     "ResponseMetadata": {"HTTPStatusCode": status}}  # fmt: skip
    try:
        raise translate_boto_error(botocore.exceptions.ClientError(response, "GetObject"))
    except OSError as err:
        return err


@pytest.mark.parametrize("status", GCS_STATUSES)
def test_a_gcsfs_error_carries_its_status(status: int) -> None:
    assert faults.http_status(gcsfs_error(status)) == status
    assert retry.is_transient(gcsfs_error(status)) is (status in retry.TRANSIENT_STATUS)


def test_the_same_builtins_raised_elsewhere_carry_none() -> None:
    for err in (FileNotFoundError(REQUEST), FileExistsError("x"), OSError("Forbidden: x")):
        assert faults.http_status(err) is None


@pytest.mark.parametrize("reading", [True, False])
@pytest.mark.parametrize("url", [REQUEST, UPLOAD])
@pytest.mark.parametrize("status", [403, 404, 412])  # (the OS errors gcsfs raises with a URL)
def test_fault_names_the_object_not_the_request_url(status: int, url: str, reading: bool) -> None:
    """A layer that knew no path ("the snapshot", a worker's OUTPUT) still names the object."""
    text = str(faults.fault(gcsfs_error(status, url), "the snapshot", reading))  # type: ignore[arg-type]
    named = (
        "gs://bkt/run/snap/shards/a.arrow" if url == REQUEST else "gs://bkt/run/snap/manifest.json"
    )
    assert text.startswith(f"{named}: "), text
    assert "127.0.0.1" not in text and "http://" not in text, text
    assert f"HTTP {status}" in text, text
    if status in (401, 403):
        assert "check the credentials (GOOGLE_APPLICATION_CREDENTIALS" in text, text
    assert "fix that" not in text and "check the disk" not in text, text


@pytest.mark.parametrize("status", GCS_STATUSES)
def test_a_shard_read_refused_is_the_storages_not_damage(status: int) -> None:
    said = faults.read_failure("shard gs://bkt/run/snap/shards/a.arrow", gcsfs_error(status))
    assert isinstance(said, StorageError) and not isinstance(said, CorruptShardError), said
    text = str(said)
    assert text.startswith("shard gs://bkt/run/snap/shards/a.arrow could not be read: "), text
    assert f"HTTP {status}" in text and "127.0.0.1" not in text, text
    assert "damaged" not in text and "decoded" not in text, text


S3_WORDS = [(401, "access denied"), (403, "access denied"), (412, "precondition"),
            (416, "byte range"), (400, "malformed"), (429, "failed while"), (500, "failed while"),
            (503, "failed while")]  # fmt: skip


@pytest.mark.parametrize(("status", "words"), S3_WORDS)
@pytest.mark.parametrize("action", ["reading", "writing"])
def test_an_s3_status_under_an_errno_is_said_by_its_status(
    status: int, words: str, action: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """s3fs turns a 401 or 429 into EIO, a 500 into EREMOTEIO, a 412 into EINVAL: said "the
    storage reported an I/O error: check the disk" or as a bare errno, not by the answer."""
    import s3fs

    monkeypatch.setattr(retry, "RETRY_BASE_S", 0.0)
    fs = s3fs.S3FileSystem(key="k", secret="s", endpoint_url="http://127.0.0.1:9")
    with pytest.raises(StorageError) as caught, faults.errors_named(fs, "bkt/snap/x", action):
        raise s3fs_error(status)
    text = str(caught.value)
    assert "s3://bkt/snap/x" in text and f"HTTP {status}" in text and words in text, text
    assert "check the disk" not in text, text
    assert "tried 1 time" not in text and "kept failing" not in text, text  # (sent once)
    if status in (401, 403):
        assert "check the credentials (AWS_PROFILE" in text, text


@pytest.mark.parametrize("status", [403, 412, 416, 400])
@pytest.mark.parametrize("action", ["reading", "listing", "writing", "creating"])
def test_errors_named_says_a_gcsfs_refusal_without_its_url(status: int, action: str) -> None:
    fs = gcsfs.core.GCSFileSystem(token="anon", endpoint_url="http://127.0.0.1:9")
    with pytest.raises(StorageError) as caught, faults.errors_named(fs, "bkt/run/s/m", action):
        raise gcsfs_error(status, UPLOAD)
    text = str(caught.value)
    assert "gs://bkt/run/s/m: " in text and f"HTTP {status}" in text, text
    assert "127.0.0.1" not in text, text
    assert ("refused here" in text) is (status != 412), text  # (the server's words: 412 has none)


def test_a_response_checksum_mismatch_is_transient_and_no_damage() -> None:
    err = botocore.exceptions.FlexibleChecksumError(error_msg="Expected checksum a did not match")
    assert retry.is_transient(err)
    calls: list[int] = []

    def flaky() -> bytes:
        calls.append(1)
        if len(calls) == 1:
            raise err
        return b"ok"

    assert retry.retrying(flaky, attempts=2) == b"ok"
    said = faults.read_failure("shard s3://b/s/shards/a.arrow record batch 3", err)
    assert isinstance(said, StorageError) and not isinstance(said, CorruptShardError)
    assert "arrived damaged" in str(said) and "not necessarily damaged" in str(said), said
