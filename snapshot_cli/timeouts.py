"""Timeouts for the storage clients that have none (used by :mod:`snapshot_cli.storage`).

A request the server never answers (a stalled server; a NAT or load balancer that dropped an
idle pooled connection, between two epochs) holds its caller until something gives up on it.
s3fs's botocore gives up after 60 s of silence (connect and read timeouts of its own), then
retries. Two clients never do:

- **gcsfs** makes every request with no timeout at all (``requests_timeout=None`` reaches
  aiohttp as "never"): snap gives it ``requests_timeout`` unless the user set one (storage
  options, or fsspec's configuration such as ``FSSPEC_GCS_REQUESTS_TIMEOUT``). gcsfs retries
  such a timeout itself (6 tries).
- **WebHDFS** (fsspec's, over ``requests``) passes no timeout to ``requests``, which then waits
  for ever: its session gets an adapter that adds one to every request made without one.
  snap's own retries (:mod:`snapshot_cli.retry`) retry the timeout. The same adapter keeps
  ``POOL`` connections a host (``requests`` keeps 10): snap's 16 fetch streams and up to 64
  ranged reads at once had connections discarded (urllib3's "Connection pool is full"
  warnings) instead of reused.

A request abandoned this way is one that went ``READ_S`` seconds without a byte (or
``CONNECT_S`` to connect): a slow but moving download is never cut.
"""

from __future__ import annotations

import functools
from typing import Any

import fsspec.config
from fsspec import AbstractFileSystem

CONNECT_S = 30.0
READ_S = 60.0
GCS_PROTOCOLS = ("gs", "gcs")
WEBHDFS_PROTOCOLS = ("webhdfs", "webHDFS")
POOL = 64  # connections kept a host: at least the requests snap makes at once (tests hold it)


def client_options(scheme: str, given: dict[str, Any]) -> dict[str, Any]:
    """Options snap adds to a client's for URL scheme ``scheme``, unless the user set them
    (in ``given``, the storage options, or in fsspec's configuration)."""
    if scheme not in GCS_PROTOCOLS:
        return {}
    configured = [given, *(fsspec.config.conf.get(p, {}) for p in GCS_PROTOCOLS)]
    if any("requests_timeout" in options for options in configured):
        return {}
    try:
        import aiohttp  # (gcsfs's client library)
    except ImportError:  # no gcsfs either: fsspec says to install it
        return {}
    return {"requests_timeout": aiohttp.ClientTimeout(sock_connect=CONNECT_S, sock_read=READ_S)}


def bound(fs: AbstractFileSystem) -> AbstractFileSystem:
    """``fs``, its requests given timeouts where its client makes them without (WebHDFS), and
    a pool of connections as large as snap's concurrency."""
    protocols = fs.protocol if isinstance(fs.protocol, tuple | list) else (fs.protocol,)
    session = getattr(fs, "session", None)
    if not set(protocols) & set(WEBHDFS_PROTOCOLS) or session is None:
        return fs
    adapter = _adapter_class()
    if not isinstance(session.get_adapter("http://"), adapter):
        for prefix in ("http://", "https://"):
            session.mount(prefix, adapter(pool_maxsize=POOL))
    return fs


@functools.cache
def _adapter_class() -> type[Any]:
    """A ``requests`` adapter adding the timeouts to a request made without (made once: the
    import of ``requests`` waits for a WebHDFS URL)."""
    import requests.adapters

    class WithTimeouts(requests.adapters.HTTPAdapter):
        def send(self, request: Any, **kwargs: Any) -> Any:  # type: ignore[override]
            if kwargs.get("timeout") is None:
                kwargs["timeout"] = (CONNECT_S, READ_S)
            return super().send(request, **kwargs)

    return WithTimeouts
