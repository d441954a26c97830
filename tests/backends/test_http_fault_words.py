"""A storage's HTTP refusals said in words: every status gcsfs and s3fs map, at every kind of
storage call, against the real GCS emulator and moto through the fault proxy.

gcsfs raised a 403 as a bare ``OSError("Forbidden: <its request URL>")``: no credentials
hint, its internal URL in the message; a 412 as ``FileExistsError(<URL>)``, said as
"gs://.../snap: http://127.0.0.1:.../upload/...; fix that"; any 404 to a write as "the bucket
does not exist", without looking. Each message must name snap's path, the cause and what to
do, and never the client's request URL.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import gcsfs.core
import gcsfs.retry
import pytest
import s3fs

import snapshot_cli as snap
from snapshot_cli import retry, storage
from snapshot_cli.errors import StorageError
from tests.backends.conftest import BUCKET
from tests.conftest import snap_subprocess
from tests.infra.flaky_proxy import FlakyProxy
from tests.infra.servers import GcsServer, S3Server

CREDENTIALS = {"gcs": "GOOGLE_APPLICATION_CREDENTIALS", "s3": "AWS_PROFILE"}
SCHEME = {"gcs": "gs", "s3": "s3"}
REFUSALS = (400, 401, 403, 404, 409, 412, 416)


def fail_next(proxy: FlakyProxy) -> None:
    """The proxy's next request (only that one) gets its status."""
    with proxy._lock:
        proxy.every = 10**9
        proxy.requests = proxy.every - 1


def client(name: str, endpoint: str) -> Any:
    if name == "gcs":
        return gcsfs.core.GCSFileSystem(
            endpoint_url=endpoint, token="anon", project="test", skip_instance_cache=True
        )
    return s3fs.S3FileSystem(endpoint_url=endpoint, key="testing", secret="testing",
                             skip_instance_cache=True)  # fmt: skip


@pytest.fixture(params=["gcs", "s3"])
def store(request: pytest.FixtureRequest) -> Iterator[tuple[str, str, str]]:
    """(backend, its server's endpoint, this test's directory in the bucket, with a file)."""
    server: GcsServer | S3Server = request.getfixturevalue(f"{request.param}_server")
    root = f"{BUCKET}/words-{uuid.uuid4().hex[:8]}"
    client(request.param, server.endpoint).pipe_file(f"{root}/manifest.json", b'{"a": 1}')
    yield request.param, server.endpoint, root


def _stream(fs: Any, path: str) -> None:  # (as writers/shard.py writes a shard)
    with storage.errors_named(fs, path, "writing"):
        f = storage.open_write(fs, path)
        f.write(b"shard bytes")
        f.close()


def _range(fs: Any, path: str) -> bytes:  # (as readers/ranged.py reads one)
    with storage.errors_named(fs, path, "reading"):
        return storage.read_range(fs, path, 0, 4)


# (name, call, whether it reads, the file it names)
CALLS: list[tuple[str, Callable[[Any, str], object], bool, str]] = [
    ("read", lambda fs, r: storage.read_bytes(fs, f"{r}/manifest.json"), True, "manifest.json"),
    ("range", lambda fs, r: _range(fs, f"{r}/manifest.json"), True, "manifest.json"),
    ("info", lambda fs, r: storage.stored_checksum(fs, f"{r}/manifest.json"), True,
     "manifest.json"),
    ("check", lambda fs, r: storage.file_info(fs, f"{r}/manifest.json"), True, "manifest.json"),
    ("list", lambda fs, r: storage.list_names(fs, f"{r}/shards"), True, "shards"),
    ("write", lambda fs, r: storage.write_atomic(fs, f"{r}/run.json", b"{}"), False, "run.json"),
    ("create", lambda fs, r: storage.create_exclusive(fs, f"{r}/lease.json", b"{}"), False,
     "lease.json"),
    ("stream", lambda fs, r: _stream(fs, f"{r}/shards/a.arrow"), False, "shards/a.arrow"),
]  # fmt: skip


@pytest.fixture
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retry, "RETRY_ATTEMPTS", 2)
    monkeypatch.setattr(retry, "RETRY_BASE_S", 0.0)


@pytest.mark.parametrize("call", CALLS, ids=[c[0] for c in CALLS])
@pytest.mark.parametrize("status", REFUSALS)
def test_each_refusal_names_the_path_the_cause_and_what_to_do(
    store: tuple[str, str, str], status: int, call: tuple[Any, ...], quick_retries: None
) -> None:
    name, endpoint, root = store
    what, fn, reading, file = call
    with FlakyProxy(endpoint, every=1, status=status) as proxy:  # (every request)
        fs = client(name, proxy.endpoint)
        if status == 404 and not reading:  # only the write's: the bucket's check is answered
            fail_next(proxy)
        if what == "create" and status == 412:  # the store's "it exists": no error
            assert fn(fs, root) is False
            return
        try:
            fn(fs, root)
        except FileNotFoundError as err:
            text = str(err)
            assert status == 404 and reading, text  # (a read's 404: callers say what is missing)
            assert "127.0.0.1" not in text and "://" + "127" not in text, text
            return
        except StorageError as err:
            text = str(err)
        else:
            assert status == 404 and what == "list", (what, status)  # (none there: empty)
            return
        assert proxy.injected >= 1
    url = f"{SCHEME[name]}://{root}/{file}"
    assert url in text, text
    assert "127.0.0.1" not in text and "http://" not in text, text
    assert f"HTTP {status}" in text, text
    if status in (401, 403):
        assert "access denied" in text and f"check the credentials ({CREDENTIALS[name]}" in text
    elif status == 404:  # a write's: the bucket exists, so it is not said missing
        assert "does not exist" not in text and "upload session expired" in text, text
    else:
        assert "run the same command again" in text, text
    assert "check the disk" not in text, text


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504])
@pytest.mark.parametrize("what", ["read", "write"])
def test_one_transient_status_is_retried_through(
    store: tuple[str, str, str], status: int, what: str, quick_retries: None
) -> None:
    name, endpoint, root = store
    with FlakyProxy(endpoint, status=status) as proxy:
        fs = client(name, proxy.endpoint)
        fail_next(proxy)
        if what == "read":
            assert storage.read_bytes(fs, f"{root}/manifest.json") == b'{"a": 1}'
        else:
            storage.write_atomic(fs, f"{root}/state.json", b"two")
        assert proxy.injected == 1
    assert client(name, endpoint).cat_file(f"{root}/manifest.json") == b'{"a": 1}'


@pytest.mark.parametrize("status", [500, 503])
def test_a_persisting_s3_server_error_is_said_as_the_storage_failing(
    s3_server: S3Server, status: int, quick_retries: None
) -> None:
    root = f"{BUCKET}/words-{uuid.uuid4().hex[:8]}"
    with FlakyProxy(s3_server.endpoint, every=1, status=status) as proxy:
        fs = s3fs.S3FileSystem(endpoint_url=proxy.endpoint, key="testing", secret="testing",
                               skip_instance_cache=True,
                               config_kwargs={"retries": {"max_attempts": 1}})  # fmt: skip
        fs.retries = 1  # (s3fs's own retry loop: once)
        with pytest.raises(StorageError) as caught:
            storage.read_bytes(fs, f"{root}/manifest.json")
    text = str(caught.value)
    assert f"storage kept failing while reading s3://{root}/manifest.json" in text, text
    assert f"HTTP {status}" in text and "try again later" in text, text
    assert "check the disk" not in text, text


@pytest.mark.parametrize("status", [500, 503])
def test_a_persisting_gcs_server_error_says_how_often_gcsfs_tried(
    gcs_server: GcsServer, status: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gcsfs retries a 5xx 6 times on its own (snap then does not, one layer of retries);
    the error said "tried 1 time", which reads as if nothing was retried."""
    waits: list[float] = []

    async def no_wait(seconds: float) -> None:  # (gcsfs's backoff: 1+2+4+8+16 s of waiting)
        waits.append(seconds)

    monkeypatch.setattr(gcsfs.retry, "asyncio", SimpleNamespace(sleep=no_wait))
    root = f"{BUCKET}/words-{uuid.uuid4().hex[:8]}"
    client("gcs", gcs_server.endpoint).pipe_file(f"{root}/manifest.json", b"{}")
    proxy = FlakyProxy(gcs_server.endpoint, every=1, status=status)
    with proxy, pytest.raises(StorageError) as caught:
        storage.read_bytes(client("gcs", proxy.endpoint), f"{root}/manifest.json")
    text = str(caught.value)
    tries = len(waits) + 1
    assert tries == gcsfs.core.GCSFileSystem.retries == proxy.injected, (waits, proxy.injected)
    assert f"gs://{root}/manifest.json (tried {tries} times)" in text, text
    assert f"HTTP {status}" in text and "try again later" in text, text


def test_a_write_to_a_missing_bucket_still_says_so(store: tuple[str, str, str]) -> None:
    name, endpoint, _ = store
    bucket = f"no-such-bucket-{uuid.uuid4().hex[:8]}"
    with pytest.raises(StorageError) as caught:
        storage.write_atomic(client(name, endpoint), f"{bucket}/snap/run.json", b"{}")
    text = str(caught.value)
    assert f"the bucket {bucket!r} does not exist (create it, or check the URL)" in text, text
    assert "127.0.0.1" not in text, text


@pytest.mark.parametrize("status", [401, 403, 412, 416])
def test_the_command_line_names_the_snapshot_not_the_request_url(
    gcs_server: GcsServer, status: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"gs://{BUCKET}/words-cli-{uuid.uuid4().hex[:8]}/snap"
    snap.create(lambda k: iter([{"x": k}]), url, inputs_from=lambda: [1, 2], workers=0)
    with FlakyProxy(gcs_server.endpoint, every=1, status=status) as proxy:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.endpoint)  # (the snap processes')
        for command in ("inspect", "head", "verify"):
            proc = snap_subprocess(command, url)
            text = proc.stderr
            assert proc.returncode == 1, (command, text)
            assert "127.0.0.1" not in text and "http://" not in text, (command, text)
            assert url in text and f"HTTP {status}" in text, (command, text)
            assert "Traceback" not in text, text
            if status in (401, 403):
                assert CREDENTIALS["gcs"] in text, text


@pytest.mark.parametrize("failures", [1, 2, 100])
def test_a_response_checksum_mismatch_is_retried_then_said_as_a_transfer_fault(
    s3_server: S3Server, failures: int, quick_retries: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """botocore checks a GET's bytes against the checksum S3 sent with them: a mismatch is
    bytes damaged on the way (FlexibleChecksumError), worth another try as a dropped
    connection, and if it persists said as such, never as a damaged file to delete."""
    import aiobotocore.httpchecksum

    mixin = aiobotocore.httpchecksum._ChecksumMixin
    real, checked = mixin._validate_checksum, []

    def validate(self: Any) -> None:
        checked.append(1)
        if len(checked) <= failures:
            raise aiobotocore.httpchecksum.FlexibleChecksumError(
                error_msg="Expected checksum abc= did not match calculated checksum: xyz="
            )
        real(self)

    monkeypatch.setattr(mixin, "_validate_checksum", validate)
    monkeypatch.setattr(retry, "RETRY_ATTEMPTS", 3)
    root = f"{BUCKET}/words-{uuid.uuid4().hex[:8]}"
    fs = client("s3", s3_server.endpoint)
    fs.pipe_file(f"{root}/manifest.json", b"x" * 5000)
    if failures < retry.RETRY_ATTEMPTS:
        assert storage.read_bytes(fs, f"{root}/manifest.json") == b"x" * 5000
        assert len(checked) == failures + 1
        return
    with pytest.raises(StorageError) as caught:
        storage.read_bytes(fs, f"{root}/manifest.json")
    text = str(caught.value)
    assert len(checked) == retry.RETRY_ATTEMPTS, checked
    assert f"s3://{root}/manifest.json (tried 3 times)" in text, text
    assert "arrived damaged" in text and "not necessarily damaged" in text, text
    assert "delete" not in text, text


@pytest.mark.parametrize("option", ["REGON", "endpoint_ulr"])
def test_an_option_the_client_does_not_take_is_named_with_where_it_came_from(
    s3_server: S3Server, monkeypatch: pytest.MonkeyPatch, option: str
) -> None:
    """``FSSPEC_S3_REGON=us-east-1`` (a misspelt option of fsspec's configuration) was "failed
    while reading ...: TypeError: AioSession.__init__() got an unexpected keyword argument
    'regon'; check the URL and the storage": it names the option and where it was given."""
    url = f"s3://{BUCKET}/words-option-{uuid.uuid4().hex[:8]}/snap"
    snap.create(lambda k: iter([{"x": k}]), url, inputs_from=lambda: [1], workers=0)
    monkeypatch.setenv(f"FSSPEC_S3_{option}", "x")
    proc = snap_subprocess("verify", url)
    name = option.lower()
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"the s3 client takes no option {name!r}, given in the environment's " in proc.stderr
    assert f"FSSPEC_S3_{option}" in proc.stderr and "correct or remove it" in proc.stderr
    assert "check the URL and the storage" not in proc.stderr, proc.stderr
    monkeypatch.delenv(f"FSSPEC_S3_{option}")
    with pytest.raises(StorageError, match=f"takes no option {name!r}, given in storage_options="):
        snap.open(url, storage_options={name: "x"}).verify()


@pytest.mark.parametrize("backend", ["gcs", "s3"])
def test_gc_and_a_dry_run_say_the_bucket_is_missing(
    request: pytest.FixtureRequest, backend: str, tmp_path: Any
) -> None:
    """``inspect``, ``verify`` and ``bench`` said "the bucket 'nobkt' does not exist"; ``gc``
    said only "does not exist: check the path", and ``create --dry-run`` planned a version
    1 and exited 0, where the create then failed at once on the bucket."""
    request.getfixturevalue(f"{backend}_server")
    url = f"{SCHEME[backend]}://nobkt-{uuid.uuid4().hex[:8]}/snap"
    gc = snap_subprocess("gc", url)
    assert gc.returncode == 1 and "the bucket 'nobkt-" in gc.stderr, gc.stderr
    (tmp_path / "p.py").write_text("def f(i):\n    yield {'i': i}\ndef items():\n    return [1]\n")
    dry = snap_subprocess("create", f"{tmp_path / 'p.py'}:f", url, "--inputs-from",
                          f"{tmp_path / 'p.py'}:items", "--dry-run")  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    assert "a create would fail: the bucket 'nobkt-" in dry.stderr, dry.stderr
