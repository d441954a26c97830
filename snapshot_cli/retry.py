"""Retries for storage calls: which failures are transient, and bounded jittered backoff.

Pure policy, no filesystem knowledge: :mod:`snapshot_cli.storage` wraps every call in
:func:`retrying`. Transient means worth another try (HTTP 408/425/429/5xx, dropped
connections, timeouts); anything a retry cannot fix (missing, forbidden, exists) propagates
at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno
import logging
import random
import re
import sys
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")

# A client's own timeouts: one class on Python 3.11 and later; on 3.10 asyncio's (and so
# fsspec's FSTimeoutError) and concurrent.futures' are classes of their own, no OSError
TIMEOUTS = (TimeoutError, asyncio.TimeoutError, concurrent.futures.TimeoutError)
RETRY_ATTEMPTS = 6  # first try + 5 retries
RETRY_BASE_S = 0.25  # backoff: base * 2**attempt, full jitter, capped
RETRY_CAP_S = 8.0
TRANSIENT_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
_TRANSIENT_ERRNO = frozenset(
    {errno.ECONNRESET, errno.ECONNABORTED, errno.ETIMEDOUT, errno.EPIPE, errno.EAGAIN}
)
_TRANSIENT_NAMES = (
    "ClientConnectorError",
    "ServerDisconnectedError",
    "ClientPayloadError",
    "ConnectionError",
    "ReadTimeout",
    "ConnectTimeout",
    "ChunkedEncodingError",
)
# A response whose checksum did not match what the server sent: bytes damaged on the way,
# not at rest (botocore's; gcsfs's md5 check). Worth another try, as a dropped connection.
TRANSFER_CHECKSUM = (("botocore", "FlexibleChecksumError"), ("gcsfs", "ChecksumError"))
# (requests' own ConnectionError and timeouts, as WebHDFS raises them, are not the builtins)
_PERMANENT = (FileNotFoundError, FileExistsError, PermissionError, IsADirectoryError,
              NotADirectoryError)  # fmt: skip


def status_of(err: BaseException) -> int | None:
    """The HTTP status an fsspec backend attached to an error (gcsfs ``code``, aiohttp
    ``status``, botocore). ``status`` first: aiohttp's ``code`` warns (DeprecationWarning,
    an error under ``-W error``)."""
    for attr in ("status", "code", "status_code"):
        value = getattr(err, attr, None)
        if isinstance(value, int) and 100 <= value < 600:
            return value
    response = getattr(err, "response", None)
    if isinstance(response, dict):  # botocore ClientError
        code = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return code if isinstance(code, int) else None
    return gcsfs_status(err)


def gcsfs_status(err: BaseException) -> int | None:
    """The status gcsfs's ``validate_response`` raised as a bare builtin, without it: 403 an
    ``OSError("Forbidden: URL")``, 404 a ``FileNotFoundError(URL)``, 412 a
    ``FileExistsError(URL)``, a 400 saying "invalid" a ``ValueError("Bad Request: URL")``,
    502 requests' ``ProxyError()``. Known by where it was raised, not by its words alone."""
    gcs_retry = sys.modules.get("gcsfs.retry")
    if gcs_retry is None or not _raised_through(err, getattr(gcs_retry, "__file__", None)):
        return None
    text = str(err)
    if isinstance(err, FileNotFoundError):
        return 404
    if isinstance(err, FileExistsError):
        return 412
    if type(err) is OSError and text.startswith("Forbidden:"):
        return 403
    if isinstance(err, ValueError) and text.startswith("Bad Request:"):
        return 400
    if type(err).__name__ == "ProxyError" and not text:
        return 502
    return None


def transfer_checksum(err: BaseException) -> bool:
    """``err`` (or what it was raised from) is a response's checksum mismatch: the bytes were
    damaged in transfer, not necessarily at rest."""
    return any(_checksum_mismatch(e) for e in causes(err))


def _checksum_mismatch(err: BaseException) -> bool:
    return (type(err).__module__.split(".")[0], type(err).__name__) in TRANSFER_CHECKSUM


def is_transient(err: BaseException) -> bool:
    """Worth retrying: throttling, server errors, dropped connections, timeouts."""
    for current in causes(err):  # look through wrapped causes
        if isinstance(current, _PERMANENT):
            return False
        status = status_of(current)
        if status is not None:
            return status in TRANSIENT_STATUS
        if isinstance(current, (ConnectionError, *TIMEOUTS)):
            return True
        if isinstance(current, OSError) and current.errno in _TRANSIENT_ERRNO:
            return True
        if type(current).__name__ in _TRANSIENT_NAMES or _checksum_mismatch(current):
            return True
    return False


def causes(err: BaseException) -> Iterator[BaseException]:
    """``err``, then what it was raised from or during, and so on (each once)."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def client_tries(err: BaseException) -> int:
    """How many times the storage client already tried the call that raised ``err``: gcsfs
    retries what its ``is_retriable`` accepts (5xx, 408, 429, dropped connections) 6 times
    on its own. Then snap does not retry again: one layer of retries, not 6 x 6."""
    gcs_retry = sys.modules.get("gcsfs.retry")
    if gcs_retry is None:
        return 0
    for e in causes(err):
        if gcs_retry.is_retriable(e) and (
            type(e).__module__.startswith("gcsfs") or _raised_through(e, gcs_retry.__file__)
        ):
            gcs_core = sys.modules.get("gcsfs.core")
            return int(getattr(getattr(gcs_core, "GCSFileSystem", None), "retries", 1))
    return 0


def _raised_through(err: BaseException, filename: str | None) -> bool:
    """Whether ``err``'s traceback passes through a function of file ``filename`` (an aiohttp
    error that gcsfs's retry loop gave up on: its last try's)."""
    tb = err.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            return True
        tb = tb.tb_next
    return False


def worth_a_new_try(err: BaseException) -> bool:
    """Transient, and not already retried by :func:`retrying` (one layer of retries only)."""
    if any(getattr(e, "snap_tries", 1) > 1 for e in causes(err)) or client_tries(err):
        return False
    return is_transient(err)


_SECRET = re.compile(
    r"(\b(?:access_token|token|key|signature|sig|x-amz-signature|x-amz-credential|"
    r"x-goog-signature|x-goog-credential|password)=)[^&\s'\")]+",
    re.IGNORECASE,
)


def redacted(text: str) -> str:
    """``text`` with the values of a URL's secret parameters hidden: a client's request URL
    in its error (google-auth's ``/tokeninfo?access_token=ya29...`` when Google could not be
    reached) printed the user's token (a remote-storage probe)."""
    return _SECRET.sub(r"\1<hidden>", text)


# A client's request URL in its error: its query is the request's (list-type=2&prefix=...),
# not where the storage is (botocore: 'Could not connect to the endpoint URL: "http://...?..."')
_QUERY = re.compile(r"(\bhttps?://[^\s\"'?]+)\?[^\s\"')]*")


def said(err: BaseException) -> str:
    """``err`` as one line for a message: its class and its own text, not its repr (aiohttp's
    connection errors repr every field of their connection key), secrets hidden, and a
    request URL's query left out."""
    text = _QUERY.sub(r"\1", redacted(" ".join(str(err).split())))
    named = f"{type(err).__name__}: {text}" if text else type(err).__name__
    if isinstance(err, TIMEOUTS) and not getattr(err, "errno", None):
        return f"no answer in time ({named})"  # (a client's own timeout: FSTimeoutError...)
    return named


def back_off(attempt: int, what: str, err: BaseException) -> None:
    """Wait before try ``attempt + 2``: exponential backoff with full jitter."""
    delay = random.uniform(0, min(RETRY_CAP_S, RETRY_BASE_S * 2**attempt))
    log.info("transient storage error while %s (%s); retry %d in %.2f s",
             what, said(err), attempt + 1, delay)  # fmt: skip
    time.sleep(delay)


def retrying(fn: Callable[[], T], what: str = "", attempts: int | None = None) -> T:
    """Call ``fn``; retry transient failures with exponential backoff and full jitter.

    Bounded: after ``RETRY_ATTEMPTS`` tries (at most ~8 s of waiting in all, ~4 s on
    average: full jitter) the last error
    propagates. Permanent failures (missing, forbidden, exists) propagate at once, and so do
    failures the storage client already retried itself (:func:`client_tries`); the error
    carries ``snap_tries``, the number of tries made, for the message.
    """
    tries = attempts or RETRY_ATTEMPTS
    for attempt in range(tries):
        try:
            return fn()
        except Exception as err:
            by_client = client_tries(err)
            if attempt + 1 >= tries or not is_transient(err) or by_client:
                with contextlib.suppress(AttributeError):  # for the message: how many tries
                    err.snap_tries = max(attempt + 1, by_client)  # type: ignore[attr-defined]
                raise
            back_off(attempt, what or "calling the storage", err)
    raise AssertionError("unreachable")
