"""A reverse proxy that fails on purpose: every Nth request gets an HTTP error, the rest are
forwarded to an upstream server (the GCS emulator, in the tests).

    with FlakyProxy("http://127.0.0.1:4443", every=3) as proxy:
        fs = gcsfs.core.GCSFileSystem(endpoint_url=proxy.endpoint, token="anon")
        ...
        assert proxy.injected > 0

Threaded (one thread per connection, HTTP/1.1 keep-alive), on a free loopback port. An
injected failure is answered without contacting the upstream, so the request had no effect
there: what a client sees is a real 503 from a server that did nothing.

``proxy.silent = n`` leaves the next ``n`` requests without any answer (the connection stays
open, nothing comes back: a server or a NAT gone quiet), until the proxy stops; only the
client's own timeout ends such a request. ``proxy.unanswered`` counts them.

``proxy.arm(kind, n, method=..., path=...)`` damages the answer to the ``n``-th request (from
then, 1-based) whose method is ``method`` and whose path (with its query) holds ``path``;
an HTTP status (an int) answers it in place of the upstream, which never sees it, and
``silent`` leaves it unanswered (as ``proxy.silent``, for those requests only); the other
kinds forward it first, so the upstream did it: ``lost`` (the connection is reset
instead of answering), ``flip`` (two bytes in the middle of the body XOR 0x01, same length),
``cut`` (the headers and half the body, then the connection closes). ``times`` damages that
many matching requests from the ``n``-th on (a store that always answers so). ``proxy.fired``
lists ``(kind, method, path)`` of each one done.
"""

from __future__ import annotations

import http.client
import json
import socket
import struct
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

#: Headers that describe one connection, not the message: never forwarded.
HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
     "trailer", "trailers", "transfer-encoding", "upgrade", "content-length", "host"}
)  # fmt: skip


class FlakyProxy:
    """Forwards to ``upstream``; answers ``status`` to every ``every``-th request (1-based)."""

    def __init__(self, upstream: str, every: int = 3, status: int = 503) -> None:
        if every < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        parsed = urllib.parse.urlsplit(upstream)
        if parsed.scheme != "http" or not parsed.hostname or not parsed.port:
            raise ValueError(f"upstream must be http://HOST:PORT, got {upstream!r}")
        self.upstream_host, self.upstream_port = parsed.hostname, parsed.port
        self.every, self.status = every, status
        self.requests = 0  # every request received
        self.injected = 0  # answered with ``status``
        self.forwarded = 0  # answered by the upstream
        self.silent = 0  # the next this many requests get no answer at all
        self.unanswered = 0
        self.fired: list[tuple[str, str, str]] = []  # the armed faults done
        self._armed: tuple[str, int, str | None, str | None] | None = None
        self._times = 1  # matching requests left to damage once the armed one is reached
        self._released = threading.Event()  # set when the proxy stops
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        if self._server is None:
            raise RuntimeError("the proxy is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def arm(
        self,
        kind: str | int,
        n: int = 1,
        method: str | None = None,
        path: str | None = None,
        times: int = 1,
    ) -> None:
        """Damage the answer to the ``n``-th matching request and the ``times - 1`` matching
        ones after it (see the module docstring)."""
        if (
            kind not in ("lost", "flip", "cut", "silent")
            and not isinstance(kind, int)
            or min(n, times) < 1
        ):
            raise ValueError(f"kind must be lost, flip, cut or a status, n >= 1: {kind!r}, {n}")
        with self._lock:
            self._armed = (str(kind), n, method, path)
            self._times = times

    def _damage(self, method: str, path: str) -> str | None:
        """The armed fault this request gets, if any (counting the matching ones)."""
        with self._lock:
            if self._armed is None:
                return None
            kind, n, want_method, want_path = self._armed
            if (want_method or method) != method or (want_path or "") not in path:
                return None
            if n > 1:
                self._armed = (kind, n - 1, want_method, want_path)
                return None
            self._times -= 1
            if self._times < 1:
                self._armed = None
            self.fired.append((kind, method, path))
            return kind

    def _count(self) -> bool:
        """Count a request; True if it is to fail."""
        with self._lock:
            self.requests += 1
            fail = self.requests % self.every == 0
            if fail:
                self.injected += 1
            return fail

    def _silenced(self) -> bool:
        """Count a request; True if it is to get no answer."""
        with self._lock:
            if self.silent <= 0:
                return False
            self.silent -= 1
            self.unanswered += 1
            return True

    def _forwarded(self) -> None:
        with self._lock:
            self.forwarded += 1

    def __enter__(self) -> FlakyProxy:
        proxy = self

        class Handler(_ProxyHandler):
            owner = proxy

        self._server = _Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="flaky-proxy"
        )
        self._thread.start()
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._released.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(10)


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up before its answer (it timed out, as the tests make clients
        do) is no error of the proxy's: said only for anything else."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _ProxyHandler(BaseHTTPRequestHandler):
    owner: FlakyProxy
    protocol_version = "HTTP/1.1"  # keep-alive, as real clients use it

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base's name)
        pass  # quiet: pytest shows stderr of failing tests only, and this would flood it

    def _body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()  # the CRLF after each chunk
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _reply(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.send_response(status)
        for name, value in headers:
            if name.lower() not in HOP_BY_HOP:
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _handle(self) -> None:
        body = self._body()  # read it in any case: the connection is reused
        owner = self.owner
        if owner._silenced():
            owner._released.wait()  # no answer, ever: the client has to give up
            self.close_connection = True
            return
        damage = owner._damage(self.command, self.path)
        if damage == "silent":
            with owner._lock:
                owner.unanswered += 1
            owner._released.wait()  # no answer, ever: the client has to give up
            self.close_connection = True
            return
        if (damage or "").isdigit() or damage is None and owner._count():
            status = int(damage) if damage else owner.status
            error = {"error": {"code": status, "message": "injected by FlakyProxy"}}
            payload = json.dumps(error).encode()
            self._reply(status, [("Content-Type", "application/json")], payload)
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        headers["Host"] = f"{owner.upstream_host}:{owner.upstream_port}"
        conn = http.client.HTTPConnection(owner.upstream_host, owner.upstream_port, timeout=60)
        try:
            conn.request(self.command, self.path, body=body or None, headers=headers)
            response = conn.getresponse()
            data = response.read()
            owner._forwarded()
        finally:
            conn.close()
        if damage == "lost":  # the upstream did it; a reset comes instead of its answer
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            return
        if damage == "flip" and data:
            buf, mid = bytearray(data), len(data) // 2
            for k in {mid, min(mid + 1, len(buf) - 1)}:
                buf[k] ^= 0x01
            data = bytes(buf)
        if damage == "cut":
            self.send_response(response.status)
            for name, value in response.getheaders():
                if name.lower() not in HOP_BY_HOP:
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data[: len(data) // 2])
                self.wfile.flush()
            self.close_connection = True
            return
        self._reply(response.status, response.getheaders(), data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _handle
