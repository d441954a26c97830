"""Messages between the loader and its decode processes (:mod:`.procs`): pickles framed by
length over a Unix stream socket, with file descriptors attached (SCM_RIGHTS)."""

from __future__ import annotations

import os
import pickle
import socket
import struct
from typing import Any

_HEADER = struct.Struct("<QI")  # message bytes, descriptors attached
MAX_FDS = 200  # descriptors per message (the kernel's limit is 253)


class ProtocolError(RuntimeError):
    """A message arrived without the descriptors its header announced."""


def send(sock: socket.socket, obj: Any, fds: list[int] | tuple[int, ...] = ()) -> None:
    """Send ``obj`` with descriptors ``fds``, the header and the body in one call: a message
    the socket takes whole (the main thread's, where a Ctrl-C lands, are small: what to
    unmap, a question) is never cut by an interrupt, which lands before it or after it (sent
    in two, one landing between them had the decode process read the next message's header
    as this one's body, and die)."""
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    parts = [_HEADER.pack(len(data), len(fds)), data]
    sent = socket.send_fds(sock, parts, list(fds)) if fds else sock.sendmsg(parts)
    if sent < _HEADER.size + len(data):  # (a large message: a read thread's, never a signal's)
        sock.sendall(b"".join(parts)[sent:])


def recv(sock: socket.socket) -> tuple[Any, list[int]]:
    """The next message and the descriptors sent with it; EOFError if the peer closed."""
    head, fds, _, _ = socket.recv_fds(sock, _HEADER.size, MAX_FDS)
    if not head:
        raise EOFError
    head += _exact(sock, _HEADER.size - len(head))
    n, nfds = _HEADER.unpack(head)
    if len(fds) != nfds:
        for fd in fds:
            os.close(fd)
        raise ProtocolError(f"expected {nfds} descriptors with a message, got {len(fds)}")
    return pickle.loads(_exact(sock, n)), fds


def _exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            raise EOFError
        got += k
    return bytes(buf)
