"""The writer lease: at most one ``snap create`` writes a snapshot at a time.

Leases are files ``_runs/lease-<epoch>.json`` created with an exclusive create, so two
writers can never both win the same epoch. The holder rewrites its file every
``ttl / 6`` seconds (heartbeat). A lease is dead when it was released, or, on the same host
and in the same PID namespace, when its process no longer exists or is a zombie (so a
``kill -9``'d writer is taken over at once locally); else when its heartbeat stops. One look
(``inspect``, ``gc``) compares the heartbeat's time with this clock; a writer waiting to
take over also watches it change, by its own monotonic clock, so that a holder's clock that
is behind or ahead neither loses it the lease nor keeps a dead one (:func:`is_alive`). A
taker creates the next epoch; a holder that sees a higher epoch than its own has lost the
lease: it stops and must not commit (and the shards it writes meanwhile have names of its
own, ``layout.shard_path``). A holder whose lease file (or run) is gone had OUTPUT moved or
deleted under it (:mod:`.moved`): it stops too, and never writes the lease at the old path.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

from fsspec import AbstractFileSystem

from .. import layout, retry, storage
from ..errors import LeaseError, SnapError
from . import moved
from .lease_files import LeaseInfo as LeaseInfo
from .lease_files import absent_error as absent_error
from .lease_files import current as current
from .lease_files import epochs as _epochs
from .lease_files import number as _number
from .lease_files import read_at
from .lease_files import released as released
from .options import DEFAULT_LEASE_TTL, MAX_LEASE_TTL

DEFAULT_TTL = DEFAULT_LEASE_TTL
log = logging.getLogger("snapshot_cli")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """Whether ``pid`` exited and waits for its parent to reap it (a script that killed a
    ``snap create`` it started and never waited for it): ``kill(pid, 0)`` still finds it."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    end = stat.rfind(b")")  # (the name before it may hold anything, spaces too)
    return stat[end + 2 : end + 3] == b"Z"


def _pid_namespace() -> str | None:
    """This process's PID namespace (``pid:[4026531836]``): containers sharing a host name
    (host networking) number their processes each on their own."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


PID_NAMESPACE = _pid_namespace()
# A lease's heartbeat as this process last saw it, and since when (monotonic): a holder
# writes a new one every ttl / 6 whatever its clock says.
_watched: dict[str, tuple[Any, float]] = {}


def silent_for(info: LeaseInfo) -> float:
    """Seconds this process has seen ``info``'s heartbeat unchanged (0 at the first look)."""
    key, beat, now = (
        f"{info.epoch}:{info.holder.get('id')}",
        info.holder.get("heartbeat"),
        time.monotonic(),
    )
    seen = _watched.get(key)
    if seen is None or seen[0] != beat:
        _watched[key] = (beat, now)
        return 0.0
    return now - seen[1]


# Leases this process released, also when the storage refused to record it (a full or
# read-only disk): a create retried in the same process (a notebook) need not wait the ttl.
_released_here: set[str] = set()
# Leases this process holds, by id (None while its file is being created). A lease file of
# this process that is not here was left by a create interrupted (Ctrl-C) between writing
# it and holding it: it is dead, and a create retried in a notebook takes it at once.
_held_here: dict[str, Lease | None] = {}


def is_alive(info: LeaseInfo, now: float | None = None, silent: float | None = None) -> bool:
    """Whether the lease's holder may still be writing. A lease file that is empty, damaged
    or of another shape is dead: its writer died writing it, or never wrote one. ``silent``
    (a writer waiting to take over: :func:`silent_for`): dead once the heartbeat was seen
    unchanged for ``ttl``, or for ``ttl / 3`` where its time is also ``ttl`` old here."""
    h = info.holder
    if h.get("released") or (isinstance(h.get("id"), str) and h["id"] in _released_here):
        return False
    pid = h.get("pid")
    same_host = h.get("host") == socket.gethostname() and type(pid) is int and 0 < pid < 2**22
    same_host = same_host and h.get("pidns", PID_NAMESPACE) == PID_NAMESPACE
    if same_host and not _pid_alive(pid):  # type: ignore[arg-type]
        return False
    if same_host and pid == os.getpid() and str(h.get("id")) not in _held_here:
        return False  # (str: an id of any JSON type, from a hand-edited file)
    heartbeat, ttl = _number(h.get("heartbeat")), _number(h.get("ttl", DEFAULT_TTL))
    if heartbeat is None or ttl is None:
        return False
    now = time.time() if now is None else now
    by_clock = now - heartbeat < ttl
    return by_clock if silent is None else silent < ttl and (by_clock or silent < ttl / 3)


class Lease:
    """A held lease with a heartbeat thread. Use :func:`acquire`; close with :meth:`release`."""

    def __init__(self, fs: AbstractFileSystem, root: str, epoch: int, holder: dict[str, Any]):
        self.fs, self.root, self.epoch, self.holder = fs, root, epoch, holder
        self.owner = threading.get_ident()  # the thread of the create (or gc) that holds it
        self._stop = threading.Event()
        self._lost: str | None = None
        self._gone = False  # its file went with OUTPUT (moved or deleted): see _loss
        self._checked = False  # check() made its last look: the commit removes run state
        self._released = False  # (release() lets go once)
        self._lock = threading.Lock()  # one write or look at a time (HDFS: see _loss)
        _held_here[holder["id"]] = self
        self._thread = threading.Thread(target=self._beat, name=f"snap-lease-{epoch}", daemon=True)
        self._thread.start()

    def set_run(self, run: str) -> None:
        self.holder["run"] = run
        with self._lock:
            if self._lost is None:  # (a lease gone with OUTPUT is not written again)
                self._write()

    def _write(self) -> None:
        self.holder["heartbeat"] = time.time()
        data = json.dumps(self.holder).encode()
        storage.write_atomic(self.fs, layout.lease_path(self.root, self.epoch), data)

    def _beat(self) -> None:
        # (bounded as create's lease_ttl is: Event.wait of 1e300 s raised in this thread)
        interval = min(float(self.holder["ttl"]), MAX_LEASE_TTL) / 6
        while not self._stop.wait(interval):
            if _held_here.get(self.holder["id"]) is not self:  # abandoned: see try_acquire
                return
            if not self.beat():
                return

    def beat(self) -> bool:
        """One heartbeat (the thread's, every ``ttl / 6``): if the lease is still this writer's,
        write it again. False once it is lost: taken over, or gone with OUTPUT (moved or
        deleted meanwhile; then nothing is written, which would make the old path again)."""
        with self._lock:
            if self._lost is not None:
                return False
            try:
                self._lost = self._loss()
                if self._lost is None:
                    self._write()
            except Exception as err:  # a failed heartbeat only matters if it lasts: see check()
                if time.time() - float(self.holder["heartbeat"]) > float(self.holder["ttl"]):
                    said = str(err) if isinstance(err, SnapError) else retry.said(err)
                    self._lost = (  # (it said the error's repr: StorageError("...\"..."))
                        f"its heartbeat failed for longer than the lease's ttl "
                        f"({float(self.holder['ttl']):g} s): {said}; once the storage answers, "
                        "the same command resumes the run"
                    )
            if self._gone and self.holder.get("run"):  # (a create's: its workers may be long)
                log.warning(
                    "the writer lease of %s is gone (OUTPUT moved or deleted?): this create "
                    "stops once the tasks running now end",
                    storage.to_url(self.fs, self.root),
                )
        return self._lost is None

    def _loss(self) -> str | None:
        """Why this writer no longer holds the lease, from one look at ``_runs/``; None if
        it does. Its own file missing (or, until :meth:`check`, its run's ``run.json``: a
        heartbeat that wrote just as OUTPUT was moved made the lease file again) means OUTPUT
        went away: ``_gone``. (Under the lock: HDFS shows a file being replaced as missing.)"""
        newest, mine = current(self.fs, self.root), self.holder["id"]
        if newest is not None and (
            newest.epoch > self.epoch or newest.holder.get("id", mine) != mine
        ):
            return f"taken over by {newest.describe()}"
        run, there = self.holder.get("run"), newest is not None and newest.epoch == self.epoch
        if there and (not run or self._checked or storage.exists(self.fs, self._run_file)):
            return None
        said = moved.gone(self.fs, self.root, self.epoch, run, there)
        self._gone = True
        return said

    @property
    def _run_file(self) -> str:
        return layout.run_file(self.root, str(self.holder.get("run")))

    def check(self) -> None:
        """Raise LeaseError if this writer lost the lease (it must not commit then): taken
        over, or gone with OUTPUT. The last look before the commit, which removes the run's
        state: after it, only the lease file tells."""
        with self._lock:
            if self._lost is None:
                self._lost = self._loss()
            self._checked = True
        self.stop_if_lost()

    def stop_if_lost(self) -> None:
        """LeaseError if the heartbeat found the lease taken over or gone (nothing read): a
        writer that lost it stops computing and writing at once, not at its commit."""
        if self._lost is not None and self._gone:
            raise LeaseError(self._lost)
        if self._lost is not None:
            raise LeaseError(
                f"this writer lost the lease of {storage.to_url(self.fs, self.root)}: "
                f"{self._lost}; nothing was committed by it"
            )

    def release(self, remove: bool = False) -> None:
        """Stop the heartbeat and mark the lease released (the next writer need not wait);
        once. ``remove``: then delete its file, and ``_runs/`` if that leaves it empty (a
        create that made OUTPUT and failed before its run, gc of a snapshot holding nothing
        else: no lease-only directory is left, which inspect called an unfinished snapshot)."""
        if self._released:
            return
        _held_here.pop(self.holder["id"], None)  # first: a dead lease here, whatever follows
        self._released = True
        self._stop.set()
        self._thread.join()
        with self._lock, contextlib.suppress(Exception):  # (not written where OUTPUT was)
            self._lost = self._lost or self._loss()
        if self._gone and isinstance(run := self.holder.get("run"), str):
            _gone_in[self.owner] = str(self._lost)  # (the create's error: see released_after)
            moved.remove_left_behind(self.fs, self.root, run, self.epoch, self.holder["id"])
        if self._lost is None:
            _released_here.add(self.holder["id"])
            self.holder["released"] = True
            try:
                self._write()
            except OSError as err:  # a full disk still deletes; else it is said
                try:
                    storage.remove(self.fs, layout.lease_path(self.root, self.epoch))
                except OSError:
                    self._say_unreleased(err)
                return
            with contextlib.suppress(OSError):  # tidying only: never hide the real error
                for epoch in _epochs(self.fs, self.root):
                    if epoch < self.epoch or (remove and epoch == self.epoch):
                        storage.remove(self.fs, layout.lease_path(self.root, epoch))
                if remove and storage.is_local(self.fs):  # (only if empty: a taker's stays)
                    os.rmdir(layout.runs_dir(self.root))

    def _say_unreleased(self, err: OSError) -> None:
        """Warn that the lease file still names this (ending) writer, and who takes it over."""
        cause = err.__cause__ if isinstance(err.__cause__, OSError) else err
        log.warning("could not release the writer lease %s (%s): the next snap create or gc "
                    "on this host takes it over at once, elsewhere after its ttl (%gs)",
                    storage.to_url(self.fs, layout.lease_path(self.root, self.epoch)),
                    cause.strerror or cause, float(self.holder["ttl"]))  # fmt: skip

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


# Why a create's lease, released by the thread (by id) that took it, was gone (OUTPUT moved
# or deleted): the failed write that followed (a missing parent directory) is not the cause.
_gone_in: dict[int, str] = {}


@contextlib.contextmanager
def released_after() -> Iterator[None]:
    """Release on the way out the leases this thread took inside and still holds: a second
    chance where an interrupt (Ctrl-C) skipped a lease's own release, which would leave its
    heartbeat telling every other writer to wait. A storage error raised inside after the
    OUTPUT of a lease taken there went away is a LeaseError saying that, from the error."""
    before, me = set(_held_here), threading.get_ident()
    _gone_in.pop(me, None)
    try:
        yield
    except Exception as err:
        gone = _gone_in.pop(me, None)
        if gone is None or not isinstance(err, OSError):  # (a storage error, not the code's)
            raise
        raise LeaseError(gone) from err
    finally:
        for key, lease in list(_held_here.items()):
            if key not in before and lease is not None and lease.owner == threading.get_ident():
                lease.release()


def try_acquire(
    fs: AbstractFileSystem, root: str, ttl: float = DEFAULT_TTL, watch: bool = False
) -> Lease | LeaseInfo:
    """Take the lease if nobody holds it; else return the live holder's :class:`LeaseInfo`.
    ``watch``: called again and again while waiting (see :func:`is_alive`)."""
    newest = current(fs, root)
    silent = silent_for(newest) if watch and newest is not None else None
    if newest is not None and is_alive(newest, silent=silent):
        stale = _held_here.get(str(newest.holder.get("id")))
        this_process = newest.holder.get("pid") == os.getpid()  # (a forked child has a copy)
        if stale is None or stale.owner != threading.get_ident() or not this_process:
            return newest
        # Held by this thread, which is not using it: an earlier create (or gc) of this
        # thread was interrupted before it let go (a Ctrl-C in a notebook). Let go of it now
        # rather than wait for its heartbeat forever.
        stale.release()
    epoch = 0 if newest is None else newest.epoch + 1
    key = uuid.uuid4().hex
    holder: dict[str, Any] = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "pidns": PID_NAMESPACE,
        "id": key,
        "ttl": ttl,
        "heartbeat": time.time(),
        "run": None,
    }
    _held_here[key] = None  # (another thread of this process must not take it)
    try:
        if not storage.create_exclusive(
            fs, layout.lease_path(root, epoch), json.dumps(holder).encode()
        ):
            # Taken, or ours: a retried create whose first try landed (its answer lost)
            # finds the file it wrote. Read by its name: a listing may predate it.
            taken = read_at(fs, root, epoch)
            if taken is None or taken.holder.get("id") != key:
                _held_here.pop(key, None)
                return taken if taken is not None else LeaseInfo(epoch, {}, absent=True)
        return Lease(fs, root, epoch, holder)
    except BaseException:  # an interrupt, or a failed write: the file (if any) is dead
        _held_here.pop(key, None)
        raise
