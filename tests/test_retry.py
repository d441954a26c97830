"""snapshot_cli.retry: which failures are transient, the bounded jittered backoff, and one real
run through a proxy that answers 503 to every few requests of the GCS emulator."""

from __future__ import annotations

import asyncio
import errno
import pickle
import re
import socket
import threading
from collections.abc import Iterator
from typing import Any

import aiohttp
import botocore.exceptions
import numpy as np
import pytest
from gcsfs.retry import HttpError
from s3fs.errors import translate_boto_error

import snapshot_cli as snap
from snapshot_cli import retry, storage, timeouts
from snapshot_cli.retry import RETRY_ATTEMPTS, RETRY_BASE_S, RETRY_CAP_S
from tests.backends.conftest import use_core_gcsfs
from tests.infra.flaky_proxy import FlakyProxy
from tests.infra.servers import GcsServer


class StatusError(Exception):
    """An error carrying an HTTP status the way some client library does."""

    def __init__(self, attr: str, value: object) -> None:
        super().__init__(f"{attr}={value!r}")
        setattr(self, attr, value)


def client_error(status: int, code: str = "Error") -> botocore.exceptions.ClientError:
    response: Any = {"Error": {"Code": code, "Message": "m"},
                     "ResponseMetadata": {"HTTPStatusCode": status}}  # fmt: skip
    return botocore.exceptions.ClientError(response, "PutObject")


def chained(outer: BaseException, inner: BaseException, explicit: bool = True) -> BaseException:
    """``outer`` raised while handling ``inner`` (``raise ... from`` or implicitly)."""
    try:
        try:
            raise inner
        except BaseException:
            if explicit:
                raise outer from inner
            raise outer  # noqa: B904 (the implicit __context__ is what is tested)
    except BaseException as err:
        return err
    raise AssertionError("unreachable")


# --- status_of and is_transient ---------------------------------------------------------------


@pytest.mark.parametrize("attr", ["code", "status", "status_code"])
@pytest.mark.parametrize("status", [429, 500, 503])
def test_server_and_throttling_statuses_are_transient(attr: str, status: int) -> None:
    err = StatusError(attr, status)
    assert retry.status_of(err) == status
    assert retry.is_transient(err)


@pytest.mark.parametrize("attr", ["code", "status"])
@pytest.mark.parametrize("status", [400, 401, 403, 404, 412])
def test_client_errors_are_permanent(attr: str, status: int) -> None:
    err = StatusError(attr, status)
    assert retry.status_of(err) == status
    assert not retry.is_transient(err)


@pytest.mark.parametrize("value", ["503", "ENOENT", 99, 600, None, True])
def test_status_of_ignores_what_is_no_http_status(value: object) -> None:
    assert retry.status_of(StatusError("code", value)) is None
    assert retry.status_of(ValueError("x")) is None


def test_botocore_responses() -> None:
    assert retry.status_of(client_error(503, "SlowDown")) == 503
    assert retry.is_transient(client_error(503, "SlowDown"))
    assert retry.is_transient(client_error(500, "InternalError"))
    assert not retry.is_transient(client_error(404, "NoSuchKey"))
    assert not retry.is_transient(client_error(403, "AccessDenied"))
    odd = botocore.exceptions.ClientError({"Error": {"Code": "X"}}, "GetObject")
    assert retry.status_of(odd) is None and not retry.is_transient(odd)
    # s3fs turns ClientError into an OSError whose cause is the ClientError
    assert retry.is_transient(translate_boto_error(client_error(503, "SlowDown")))
    assert not retry.is_transient(translate_boto_error(client_error(404, "NoSuchKey")))
    assert not retry.is_transient(translate_boto_error(client_error(403, "AccessDenied")))


def test_gcsfs_http_errors() -> None:
    assert retry.is_transient(HttpError({"code": 503, "message": "backend error"}))
    assert retry.is_transient(HttpError({"code": 429, "message": "rate limit"}))
    assert not retry.is_transient(HttpError({"code": 403, "message": "forbidden"}))


@pytest.mark.parametrize(
    "err",
    [
        ConnectionResetError(errno.ECONNRESET, "reset by peer"),
        ConnectionRefusedError(),
        BrokenPipeError(),
        TimeoutError("read timed out"),
        asyncio.TimeoutError(),
        OSError(errno.ECONNRESET, "reset"),
        OSError(errno.ETIMEDOUT, "timed out"),
        aiohttp.ServerDisconnectedError(),
    ],
    ids=repr,
)
def test_dropped_connections_and_timeouts_are_transient(err: BaseException) -> None:
    assert retry.is_transient(err)


@pytest.mark.parametrize(
    "err",
    [
        FileNotFoundError("gone"),
        PermissionError("denied"),
        FileExistsError("exists"),
        IsADirectoryError("dir"),
        OSError(errno.ENOSPC, "disk full"),
        ValueError("bad"),
        KeyError("k"),
    ],
    ids=repr,
)
def test_everything_else_is_permanent(err: BaseException) -> None:
    assert not retry.is_transient(err)


@pytest.mark.parametrize("explicit", [True, False], ids=["cause", "context"])
def test_wrapped_causes_are_looked_through(explicit: bool) -> None:
    assert retry.is_transient(chained(RuntimeError("wrapper"), ConnectionResetError(), explicit))
    assert retry.is_transient(chained(ValueError("x"), StatusError("code", 503), explicit))
    deep = chained(RuntimeError("a"), chained(RuntimeError("b"), TimeoutError(), explicit))
    assert retry.is_transient(deep)
    assert not retry.is_transient(chained(RuntimeError("w"), ValueError("x"), explicit))
    # a permanent error is permanent whatever it wraps
    assert not retry.is_transient(chained(FileNotFoundError("x"), TimeoutError(), explicit))
    assert not retry.is_transient(chained(RuntimeError("w"), StatusError("code", 404), explicit))


def test_a_cause_cycle_ends() -> None:
    a, b = RuntimeError("a"), RuntimeError("b")
    a.__cause__, b.__cause__ = b, a
    assert not retry.is_transient(a)


# --- retrying ---------------------------------------------------------------------------------


@pytest.fixture
def delays(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The backoff delays ``retrying`` asks for (no real sleeping)."""
    asked: list[float] = []
    monkeypatch.setattr(retry.time, "sleep", asked.append)
    return asked


class Failing:
    """A function raising ``errors`` one per call, then returning ``result``."""

    def __init__(self, errors: list[BaseException], result: str = "done") -> None:
        self.pending, self.result = list(errors), result
        self.raised: list[BaseException] = []
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.pending:
            self.raised.append(self.pending.pop(0))
            raise self.raised[-1]
        return self.result


def test_retries_transient_failures_then_succeeds(delays: list[float]) -> None:
    fn = Failing([StatusError("code", 503), StatusError("code", 503)])
    assert retry.retrying(fn, "reading x") == "done"
    assert fn.calls == 3
    assert len(delays) == 2
    assert all(0 <= d <= min(RETRY_CAP_S, RETRY_BASE_S * 2**i) for i, d in enumerate(delays))


def test_a_server_not_listening_is_named_in_one_line(
    delays: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    """aiohttp's connection errors repr every field of their connection key: the message
    (and each retry's log line) gives the error's own text, and says to check the address."""
    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/snap"
    with caplog.at_level("INFO", logger="snapshot_cli"), pytest.raises(snap.StorageError) as e:
        snap.open(url)
    said = str(e.value)
    assert said.startswith(f"storage kept failing while reading {url}/manifest.json (tried ")
    assert f"ClientConnectorError: Cannot connect to host 127.0.0.1:{port}" in said
    assert said.endswith("check that the storage is reachable at that address, then try again")
    assert "\n" not in said and "ConnectionKey" not in said
    retries = [r.getMessage() for r in caplog.records if "retry" in r.getMessage()]
    assert len(retries) == len(delays) > 0
    assert all("ConnectionKey" not in m and "Cannot connect" in m for m in retries)


def test_gives_up_after_the_attempts_with_the_last_error(delays: list[float]) -> None:
    errors: list[BaseException] = [StatusError("code", 503) for _ in range(RETRY_ATTEMPTS + 3)]
    fn = Failing(errors)
    with pytest.raises(StatusError) as caught:
        retry.retrying(fn)
    assert fn.calls == RETRY_ATTEMPTS
    assert caught.value is fn.raised[-1]
    assert caught.value is errors[RETRY_ATTEMPTS - 1]
    assert len(delays) == RETRY_ATTEMPTS - 1

    fn = Failing([TimeoutError(), TimeoutError(), TimeoutError()])
    with pytest.raises(TimeoutError):
        retry.retrying(fn, attempts=2)
    assert fn.calls == 2


@pytest.mark.parametrize(
    "err",
    [FileNotFoundError("x"), PermissionError("x"), FileExistsError("x"),
     StatusError("code", 404), StatusError("code", 403), ValueError("x")],
    ids=repr,
)  # fmt: skip
def test_never_retries_permanent_errors(err: BaseException, delays: list[float]) -> None:
    fn = Failing([err])
    with pytest.raises(type(err)) as caught:
        retry.retrying(fn)
    assert caught.value is err
    assert fn.calls == 1 and delays == []


def test_backoff_upper_bound_grows_to_the_cap(
    delays: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    bounds: list[tuple[float, float]] = []

    def upper(low: float, high: float) -> float:  # full jitter, at its largest
        bounds.append((low, high))
        return high

    monkeypatch.setattr(retry.random, "uniform", upper)
    attempts = 10
    fn = Failing([ConnectionResetError() for _ in range(attempts - 1)])
    assert retry.retrying(fn, attempts=attempts) == "done"
    assert all(low == 0 for low, _ in bounds)
    assert delays == [high for _, high in bounds]
    assert delays[0] == RETRY_BASE_S
    assert all(b == min(RETRY_CAP_S, 2 * a) for a, b in zip(delays, delays[1:], strict=False))
    assert delays[-1] == RETRY_CAP_S and max(delays) == RETRY_CAP_S


def test_jittered_delays_stay_under_their_bound(delays: list[float]) -> None:
    for _ in range(50):
        retry.retrying(Failing([StatusError("status", 429)] * (RETRY_ATTEMPTS - 1)))
    per_try = [delays[i :: RETRY_ATTEMPTS - 1] for i in range(RETRY_ATTEMPTS - 1)]
    for attempt, values in enumerate(per_try):
        bound = min(RETRY_CAP_S, RETRY_BASE_S * 2**attempt)
        assert all(0 <= v <= bound for v in values)
    assert len(set(delays)) > len(delays) // 2  # jittered, not a fixed schedule


# --- a real storage stack through injected 503s ----------------------------------------------

BUCKET = "snap-retry-tests"


@pytest.fixture(scope="module")
def gcs() -> Iterator[GcsServer]:
    use_core_gcsfs()  # gs:// URLs opened by snap get the class that does not probe gRPC
    with GcsServer() as server:
        server.make_bucket(BUCKET)
        yield server


def gcs_options(endpoint: str) -> dict[str, Any]:
    return {"endpoint_url": endpoint, "token": "anon", "project": "test"}


def gcs_filesystem(endpoint: str) -> Any:
    import gcsfs.core

    return gcsfs.core.GCSFileSystem(**gcs_options(endpoint), skip_instance_cache=True)


def preprocess(k: int) -> Iterator[dict[str, Any]]:
    for j in range(5):
        yield {"label": k * 5 + j, "x": np.full(3, k * 5 + j, np.int16)}


@pytest.mark.parametrize("status", [503, 425])
def test_storage_survives_real_server_errors(
    gcs: GcsServer, status: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """503: gcsfs retries it itself (after 1-2 s), and snap does not retry it again (one layer
    of retries). 425: gcsfs passes it through at once, so snap's own retrying recovers."""
    snap_retries: list[float] = []
    real_sleep = retry.time.sleep

    def sleep(seconds: float) -> None:  # time.sleep of every thread: count snap's backoffs only
        if threading.current_thread().name.startswith(("MainThread", "snap-")):
            snap_retries.append(seconds)
        real_sleep(seconds)

    monkeypatch.setattr(retry.time, "sleep", sleep)
    direct = gcs_filesystem(gcs.endpoint)
    url = f"gs://{BUCKET}/through-proxy-{status}/snap"
    snap.create(preprocess, url, inputs_from=lambda: list(range(4)), workers=0,
                inputs_per_task=1, storage_options=gcs_options(gcs.endpoint))  # fmt: skip
    with FlakyProxy(gcs.endpoint, every=4, status=status) as proxy:
        fs = gcs_filesystem(proxy.endpoint)
        root = f"{BUCKET}/through-proxy-{status}"
        storage.write_atomic(fs, f"{root}/state.json", b"one")
        storage.write_atomic(fs, f"{root}/state.json", b"two")
        assert storage.read_bytes(fs, f"{root}/state.json") == b"two"
        assert storage.create_exclusive(fs, f"{root}/lock", b"first") is True
        assert storage.create_exclusive(fs, f"{root}/lock", b"second") is False
        assert storage.read_bytes(fs, f"{root}/lock") == b"first"

        s = snap.open(url, storage_options=gcs_options(proxy.endpoint))
        with s.loader(batch_size=6, shuffle=True, seed=1) as loader:
            labels = sorted(int(v) for b in loader for v in b["label"])
        assert labels == list(range(20))
    assert proxy.injected >= 3, (proxy.requests, proxy.injected)
    if status == 425:  # every failure was retried by snap, once
        assert len(snap_retries) == proxy.injected, (snap_retries, proxy.injected)
    else:  # gcsfs retried each itself: snap adds no second layer of retries
        assert snap_retries == [], snap_retries
    assert proxy.forwarded == proxy.requests - proxy.injected
    assert direct.cat_file(f"{root}/lock") == b"first"  # what the server really holds


@pytest.mark.parametrize(("code", "by_gcsfs"), [(503, True), (429, True), (425, False)])
def test_what_gcsfs_retried_itself_is_not_retried_again(code: int, by_gcsfs: bool) -> None:
    from gcsfs.retry import HttpError

    calls: list[int] = []

    def failing() -> None:
        calls.append(1)
        raise HttpError({"code": code, "message": "busy"})

    wrapped = RuntimeError("outer")
    wrapped.__cause__ = HttpError({"code": code, "message": "busy"})
    assert (retry.client_tries(wrapped) > 1) is by_gcsfs
    with pytest.raises(HttpError) as caught:
        retry.retrying(failing, attempts=3)
    assert len(calls) == (1 if by_gcsfs else 3)
    assert caught.value.snap_tries == (6 if by_gcsfs else 3)  # type: ignore[attr-defined]


def _snapshot_for_silence(gcs: GcsServer, name: str) -> str:
    url = f"gs://{BUCKET}/{name}/snap"
    snap.create(preprocess, url, inputs_from=lambda: list(range(4)), workers=0,
                inputs_per_task=1, storage_options=gcs_options(gcs.endpoint))  # fmt: skip
    return url


def test_a_connection_gone_silent_is_given_up_and_tried_again(
    gcs: GcsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # gcsfs waited for ever on a request the server never answered (no timeout at all): a
    # loader hung with no message. snap gives gcsfs a read timeout (60 s; 1 s here). (A server
    # silent for good: gcsfs's 6 tries, ~31 s of its backoff between them, then snap's
    # "storage kept failing" error naming the shard; 40 s with 1 s timeouts, in a probe.)
    monkeypatch.setattr(timeouts, "READ_S", 1.0)
    url = _snapshot_for_silence(gcs, "silent-then-back")
    with FlakyProxy(gcs.endpoint, every=10**9) as proxy:
        options = {"endpoint_url": proxy.endpoint, "token": "anon", "project": "test"}
        s = snap.open(url, storage_options=options)  # (no requests_timeout: snap's default)
        proxy.silent = 3  # the next three requests: no answer, ever
        with s.loader(batch_size=6, shuffle=True, seed=1) as loader:
            labels = sorted(int(v) for b in loader for v in b["label"])
    assert labels == list(range(20))
    assert proxy.unanswered == 3


def test_a_timeout_the_user_set_is_kept() -> None:
    import fsspec.config

    default = storage.resolve(f"gs://{BUCKET}/x", {"token": "anon"})[0]
    assert default.requests_timeout.sock_read == timeouts.READ_S
    given = storage.resolve(f"gs://{BUCKET}/x", {"token": "anon", "requests_timeout": 7})[0]
    assert given.requests_timeout == 7
    saved = dict(fsspec.config.conf.get("gcs", {}))
    fsspec.config.conf.setdefault("gcs", {})["requests_timeout"] = 9
    try:  # FSSPEC_GCS_REQUESTS_TIMEOUT=9 in the environment makes this configuration
        assert storage.resolve(f"gs://{BUCKET}/y", {"token": "anon"})[0].requests_timeout == 9
    finally:
        fsspec.config.conf["gcs"] = saved
    assert (
        storage.resolve("s3://bucket/x", {"anon": True})[0].storage_options.get("requests_timeout")
        is None
    )  # (s3fs: botocore's own 60 s timeouts)


def test_an_aiohttp_error_gcsfs_gave_up_on_is_not_retried_again() -> None:
    # a timeout gcsfs retried 6 times reaches snap as aiohttp's own error (not a gcsfs type):
    # its traceback passes through gcsfs's retry loop, so snap adds no second layer of 6
    import gcsfs.retry

    namespace: dict[str, Any] = {"aiohttp": aiohttp}
    source = "def give_up():\n    raise aiohttp.ServerTimeoutError('Timeout on reading data')\n"
    exec(compile(source, gcsfs.retry.__file__, "exec"), namespace)  # a frame of that file
    calls: list[int] = []

    def through_gcsfs() -> None:
        calls.append(1)
        namespace["give_up"]()

    with pytest.raises(aiohttp.ServerTimeoutError) as caught:
        retry.retrying(through_gcsfs, attempts=3)
    assert calls == [1] and caught.value.snap_tries == 6  # type: ignore[attr-defined]
    calls.clear()

    def elsewhere() -> None:  # the same error from another client: snap retries it
        calls.append(1)
        raise aiohttp.ServerTimeoutError("Timeout on reading data")

    with pytest.raises(aiohttp.ServerTimeoutError):
        retry.retrying(elsewhere, attempts=3)
    assert len(calls) == 3


def test_webhdfs_requests_are_given_up_when_nothing_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # fsspec's WebHDFS makes its requests with no timeout: a NameNode or DataNode gone quiet
    # held the caller for good. Nothing upstream here: the proxy answers nothing at all
    import requests

    monkeypatch.setattr(timeouts, "READ_S", 1.0)
    with FlakyProxy("http://127.0.0.1:9", every=10**9) as proxy:
        proxy.silent = 10**9
        host_port = proxy.endpoint.removeprefix("http://")
        fs = storage.resolve(f"webhdfs://{host_port}/snaps/x", {"user": "root"})[0]
        for client in (fs, storage.fresh_instance(fs)):  # (a forked worker's new client too)
            with pytest.raises(requests.exceptions.ReadTimeout) as raised:
                client.ls("/snaps")
            assert retry.is_transient(raised.value)  # then snap's retries take it
        assert proxy.unanswered == 2


@pytest.mark.parametrize("name", ["ConnectionError", "ReadTimeout", "ConnectTimeout"])
def test_requests_own_failures_are_transient(name: str) -> None:
    import requests

    assert retry.is_transient(getattr(requests.exceptions, name)("dropped"))
    assert not retry.is_transient(requests.exceptions.InvalidURL("bad"))


def test_a_decode_process_makes_its_webhdfs_client_with_the_timeouts() -> None:
    # (processes=N: a decode process gets the filesystem pickled, made there without resolve)
    import fsspec
    import pyarrow as pa

    from snapshot_cli.readers import decoder

    bare = fsspec.filesystem("webhdfs", host="127.0.0.1", port=9, skip_instance_cache=True)
    assert not isinstance(bare.session.get_adapter("http://"), timeouts._adapter_class())
    schema = pa.schema([("x", pa.int64())])
    spec = {"fs": pickle.dumps(bare), "root": "/s", "shards": (), "schema": schema,
            "verify": True, "max_open": 4, "max_bytes": None, "placement": None,
            "cache": None}  # fmt: skip
    readers = decoder.from_spec(spec)
    assert isinstance(readers.fs.session.get_adapter("http://"), timeouts._adapter_class())


@pytest.mark.parametrize(
    "param", ["access_token", "token", "X-Goog-Signature", "X-Amz-Credential", "sig"]
)
def test_a_secret_in_a_client_s_request_url_is_never_said(param: str) -> None:
    """google-auth's error when Google could not be reached held its request URL,
    ``/tokeninfo?access_token=ya29...``: snap printed the user's token (a probe)."""
    err = OSError(f"Max retries exceeded with url: /t?alt=json&{param}=ya29.SECRET&x=1 (DNS)")
    said = retry.said(err)
    assert "SECRET" not in said and f"{param}=<hidden>&x=1" in said
    bad = {"token": "ya29.SECRET", "project": "p"}
    with pytest.raises(snap.SnapError) as caught:
        storage.resolve("gs://bucket/x", {**bad, "endpoint_url": "http://127.0.0.1:1"})
    assert "SECRET" not in str(caught.value)


def test_a_client_s_request_query_is_left_out_of_what_is_said() -> None:
    """botocore's connection error said its whole request URL, a listing's query in every
    retry line and in the final error; the endpoint and the path stay."""
    from botocore.exceptions import EndpointConnectionError

    url = "http://127.0.0.1:47012/bucket?list-type=2&prefix=snaps%2Fdown%2F&encoding-type=url"
    assert retry.said(EndpointConnectionError(endpoint_url=url)) == (
        'EndpointConnectionError: Could not connect to the endpoint URL: "http://127.0.0.1:47012'
        '/bucket"'
    )


@pytest.mark.parametrize("command", ["verify", "bench"])
def test_a_signal_stops_a_command_whose_reads_storage_never_answers(
    gcs: GcsServer, command: str
) -> None:
    """A SIGTERM to ``snap verify`` while the server had gone silent was obeyed after 381 s:
    the command's threads waited for each read in flight to spend its retries, past any
    scheduler's grace period (a probe). It ends within STOP_GRACE_S (10 s), saying so, with
    the signal's status; a real process, a real server behind a proxy that answers the
    manifest and never a shard."""
    import os
    import signal
    import subprocess
    import sys

    from tests.conftest import REPO, wait_for

    url = _snapshot_for_silence(gcs, f"signal-{command}")
    with FlakyProxy(gcs.endpoint, every=10**9) as proxy:
        proxy.arm("silent", 1, method="GET", path="shards", times=10**9)  # (every shard read)
        env = {**os.environ, **gcs.client_env(), "STORAGE_EMULATOR_HOST": proxy.endpoint,
               "PYTHONPATH": str(REPO)}  # fmt: skip
        args = [sys.executable, "-m", "snapshot_cli", command, url]
        with subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) as process:  # fmt: skip
            wait_for(lambda: proxy.unanswered >= 1, "a shard read left unanswered")
            process.send_signal(signal.SIGTERM)
            _, stderr = process.communicate(timeout=120)  # (the default timeouts: minutes)
    assert process.returncode == 128 + signal.SIGTERM, stderr
    lines = stderr.strip().splitlines()
    # The main thread waits on the silent read (the 10 s watchdog ends the process, saying
    # so), or it was between reads and ended at once: then the thread left reading gets the
    # exit's 5 s and is named (CI saw this once in ~10 runs; both end within the grace).
    waited = lines[-1].startswith("snap: terminated (SIGTERM), and still stopping 10 s later")
    unwound = (
        len(lines) >= 2
        and lines[-2].startswith("snap: terminated (SIGTERM)")
        and re.match(r"snap: note: snap's own \d+ threads? \(snap-.*\) still ran 5 s ", lines[-1])
    )
    assert waited or unwound, stderr
    assert "Traceback" not in stderr
