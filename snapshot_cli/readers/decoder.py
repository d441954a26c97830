"""A decode process (``main(["", FD])``, started by :mod:`.procs`); see there.

It answers each message on its socket in turn: open the reader set a message names (its
``spec``, sent once), map the shared arrays whose descriptors came with it, decode the jobs
(segments of record batches) into the window with :func:`.decode.decode_segment` (the read
threads' own step, with the same checks), and reply ``("ok", cpu seconds, bytes read)`` or
``("err", exception, traceback)``, each with the reader sets it has open. It exits when the
loader's process closes the socket.
"""

from __future__ import annotations

import mmap
import os
import pickle
import signal
import socket
import sys
import time
import traceback
from collections import OrderedDict
from typing import Any

import numpy as np

from .. import storage
from ..errors import OptionError
from .cache import ShardCache
from .decode import decode_segment
from .procs import KEEP_READERS
from .shard import ShardReaders
from .shm import attach
from .sources import MultiReaders
from .window import Window
from .wire import recv, send


def spec_of(readers: ShardReaders) -> dict[str, Any]:
    """What a decode process needs to open the same shards the same way (picklable:
    filesystems pickle as their options, a cache as its directory and limit). The filesystem
    travels pickled on its own: unpickling makes its client, which must see the loader's
    environment (:func:`follow_environment`) and whose failure is an answer, not an exit."""
    cache = readers.cache
    return {
        "fs": pickle.dumps(readers._fs), "root": readers.root, "shards": readers.shards,
        "schema": readers.schema, "verify": readers.verify, "max_open": readers.max_open,
        "max_bytes": readers.max_bytes, "placement": readers.placement,
        "shuffled": readers.shuffled,
        "cache": None if cache is None else (str(cache.dir), cache.limit, True, cache.option,
                                             cache.started),
    }  # fmt: skip


def readers_spec(readers: Any, schema: Any, columns: list[str]) -> dict[str, Any]:
    """A loader's reader set (a mixture's has parts), for a decode process to open."""
    parts = getattr(readers, "parts", [readers])
    return {
        "parts": [spec_of(p) for p in parts], "schema": schema, "columns": columns,
        "environ": dict(os.environ),
    }  # fmt: skip


def follow_environment(environ: dict[str, str]) -> None:
    """Make this process's environment the loader's process's (as it was when the loader
    first sent its shards here). The process started earlier, for an earlier loader maybe:
    credentials (AWS_ACCESS_KEY_ID...), endpoints or libhdfs's CLASSPATH set since in the
    loader's process (a notebook's ``os.environ[...] = ...``) were missing here, and a read
    that works in the loader's process failed in this one."""
    for name in set(os.environ) - set(environ):
        del os.environ[name]
    os.environ.update(environ)


def from_spec(spec: dict[str, Any]) -> ShardReaders:
    cache = None if spec["cache"] is None else ShardCache(*spec["cache"])
    keys = ("root", "shards", "schema", "verify", "max_open", "max_bytes")
    try:  # unpickled bare: a client made as snap makes them
        fs = storage.fresh_instance(pickle.loads(spec["fs"]))  # noqa: S301 - our parent's
    except Exception as err:  # (checked as the loader was made: what that cannot see)
        raise OptionError(
            f"a decode process cannot make the filesystem of {spec['root']} "
            f"({type(err).__name__}: {err}): its class must be importable in a new Python "
            "process; use processes=0"
        ) from None
    readers = ShardReaders(fs, **{k: spec[k] for k in keys}, cache=cache)
    readers.placement, readers.shuffled = spec["placement"], spec.get("shuffled", False)
    return readers


class Decoder:
    def __init__(self) -> None:
        self.readers: OrderedDict[int, tuple[Any, Any, list[str]]] = OrderedDict()
        self.maps: dict[int, tuple[mmap.mmap, np.ndarray]] = {}

    def handle(self, msg: dict[str, Any], fds: list[int]) -> tuple[Any, ...] | None:
        """Do what ``msg`` says → the reply (None: a message with no jobs has none)."""
        for i in msg.get("free", ()):
            self._unmap(i)
        for key in msg.get("forget", ()):  # its loader closed, or is gone
            entry = self.readers.pop(key, None)
            if entry is not None:
                entry[0].close()
        if "jobs" not in msg:
            return ("keys", self.keys()) if msg.get("ask") else None
        for i, fd in zip(msg.get("fds", ()), fds, strict=True):
            nbytes = next(a[1] for a in msg["window"]["arrays"].values() if a[0] == i)
            m = attach(fd, nbytes)
            self.maps[i] = (m, np.frombuffer(m, np.uint8))
        key = msg["key"]
        if "spec" in msg:
            self._open(key, msg["spec"])
        if key not in self.readers:
            raise RuntimeError(f"reader set {key} was never sent to this process")
        self.readers.move_to_end(key)
        readers, schema, columns = self.readers[key]
        window = self._window(msg["window"], schema, columns)
        cpu, before = time.process_time(), readers.bytes_read
        for offset, shard, batch, rows, start, stop, check in msg["jobs"].tolist():
            decode_segment(readers, window, columns, offset, shard, batch, rows, start, stop,
                           None if check else False)  # fmt: skip
        readers.release()  # this chunk's mapped pages leave RSS (they stay in the page cache)
        return ("ok", time.process_time() - cpu, readers.bytes_read - before, self.keys())

    def close(self) -> None:
        """Close every reader set (its shard files) and drop the shared arrays' maps."""
        while self.readers:
            self.readers.popitem()[1][0].close()
        self.maps.clear()

    def keys(self) -> list[int]:
        """The reader sets open here (every answer lists them: the loader's side follows)."""
        return list(self.readers)

    def _open(self, key: int, spec: dict[str, Any]) -> None:
        follow_environment(spec["environ"])
        parts = [from_spec(s) for s in spec["parts"]]
        readers = parts[0] if len(parts) == 1 else MultiReaders(parts)
        if key in self.readers:
            self.readers.pop(key)[0].close()
        self.readers[key] = (readers, spec["schema"], list(spec["columns"]))
        while len(self.readers) > KEEP_READERS:
            _, (old, _, _) = self.readers.popitem(last=False)
            old.close()

    def _window(self, desc: dict[str, Any], schema: Any, columns: list[str]) -> Window:
        rows, storage, slots = desc["rows"], {}, None
        for name, (i, _, dtype, shape) in desc["arrays"].items():
            dt = np.dtype(dtype)
            count = int(np.prod(shape, dtype=np.int64))
            array = self.maps[i][1][: count * dt.itemsize].view(dt).reshape(shape)
            if name == "\0slots":
                slots = array[:rows]
            else:
                storage[name] = array
        window = Window(schema, [c for c in columns if c in storage], rows, storage)
        window.slot_of = slots
        return window

    def _unmap(self, i: int) -> None:
        # The map is unmapped once nothing refers to it (no window of this process does:
        # each lives for one message).
        self.maps.pop(i, None)


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the loader's process
    decoder = Decoder()
    # Closed on the way out, as are its shard files and maps (an unclosed socket was a
    # ResourceWarning at exit, and an "Exception ignored" under PYTHONWARNINGS=error).
    with socket.socket(fileno=int(argv[-1])) as sock:
        try:
            send(sock, ("ready",))
            serve(sock, decoder)
        except (EOFError, ConnectionError):  # the loader's process closed it, or died
            pass
        finally:
            decoder.close()
    return 0


def serve(sock: socket.socket, decoder: Decoder) -> None:
    while True:
        msg, fds = recv(sock)
        try:
            reply = decoder.handle(msg, fds)
        except Exception as err:  # reaches the loader, raised in the read thread
            trace = traceback.format_exc()
            try:
                send(sock, ("err", err, trace, decoder.keys()))
                continue
            except Exception:  # the error does not pickle: its text does
                reply = ("err", f"{type(err).__name__}: {err}", trace, decoder.keys())
        if reply is not None:
            send(sock, reply)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
