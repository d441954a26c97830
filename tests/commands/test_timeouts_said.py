"""A storage that stops answering, as the commands say it: every kind of timeout a storage
client raises (Python's, asyncio's, fsspec's, aiohttp's, a socket's) is "no answer in time"
with what to do, never a bare class name ("FSTimeoutError") or "a bug in snap". (A real
stalled GCS server is given up on and retried in tests/test_retry.py; what is said after
gcsfs's 6 tries, ~40 s, is checked here, where the client's call fails at once.)"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import socket
from collections.abc import Callable

import fsspec.implementations.memory as memory
import pytest
from fsspec.exceptions import FSTimeoutError

import snapshot_cli as snap
from snapshot_cli import faults, retry, storage
from tests.commands.conftest import invoke

KINDS: list[Callable[[], BaseException]] = [
    TimeoutError,
    asyncio.TimeoutError,
    FSTimeoutError,
    lambda: socket.timeout("timed out"),  # noqa: UP041 (a name a client raises)
    concurrent.futures.TimeoutError,
]
with contextlib.suppress(ImportError):  # (gcsfs's client: not in the oldest-versions run)
    import aiohttp

    KINDS.append(lambda: aiohttp.ServerTimeoutError("Timeout on reading data from socket"))


@pytest.mark.parametrize("kind", KINDS)
def test_a_read_the_storage_never_answers_is_said_as_such(
    kind: Callable[[], BaseException], monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"memory:///timeouts-{id(kind)}/s"
    snap.create(lambda i: {"x": i}, url, inputs=list(range(4)), workers=0)
    monkeypatch.setattr(retry, "RETRY_BASE_S", 0.0)  # (snap's own retries: no wait)

    def silent(self: object, *args: object, **kwargs: object) -> bytes:
        raise kind()

    monkeypatch.setattr(memory.MemoryFileSystem, "cat_file", silent)
    res = invoke("inspect", url)
    assert res.exit_code == 1
    (line,) = res.output.splitlines()
    assert line.startswith(f"snap: error: storage kept failing while reading {url}/manifest.json")
    assert f"no answer in time ({type(kind()).__name__}" in line, line
    assert "check that the storage is reachable" in line, line


@pytest.mark.parametrize("kind", KINDS)
def test_a_timeout_no_call_named_is_the_storage_s_silence(
    kind: Callable[[], BaseException],
) -> None:
    err = kind()
    said = (
        str(storage.fault(err, "the snapshot", reading=True))
        if isinstance(err, OSError)  # (Python 3.11: every kind; 3.10: not asyncio's)
        else str(faults.no_answer(err, "the snapshot"))
    )
    assert said.startswith(f"the snapshot: no answer in time ({type(err).__name__}"), said
    assert said.endswith(
        "the storage stopped answering: check that it is reachable, then run again"
    )
    assert faults.no_answer(ValueError("x"), "the snapshot") is None
