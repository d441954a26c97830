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
"""

from __future__ import annotations

import http.client
import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType

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

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
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
        if owner._count():
            error = {"error": {"code": owner.status, "message": "injected by FlakyProxy"}}
            payload = json.dumps(error).encode()
            self._reply(owner.status, [("Content-Type", "application/json")], payload)
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        headers["Host"] = f"{owner.upstream_host}:{owner.upstream_port}"
        conn = http.client.HTTPConnection(owner.upstream_host, owner.upstream_port, timeout=60)
        try:
            conn.request(self.command, self.path, body=body or None, headers=headers)
            response = conn.getresponse()
            data = response.read()
            owner._forwarded()
            self._reply(response.status, response.getheaders(), data)
        finally:
            conn.close()

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _handle
