"""Counting the epochs of a torch ``DataLoader``'s iterations in its worker processes, and
which ``num_workers`` the latest ran in (what a per-rank dataset state is saved under).

Without ``persistent_workers`` each DataLoader iteration starts new worker processes from the
parent's copy of a :class:`~.torch.SnapshotDataset`, which has not seen the previous
epochs; :class:`EpochCounter` lets the workers count for themselves through a small file
the parent's dataset owns (see its docstring, and the module docstring of :mod:`.torch`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import tempfile
import warnings
import weakref
from collections.abc import Iterator
from typing import Any

try:
    import fcntl
except ImportError:  # Windows: DataLoader workers cannot count epochs (see EpochCounter)
    fcntl = None  # type: ignore[assignment]


class EpochCounter:
    """Numbers the DataLoader iterations that reach a dataset's workers: 0, 1, 2, ...

    The parent's dataset makes it (a private temporary directory, removed when the dataset
    is garbage-collected); worker processes get a copy that names the same directory (fork
    copies it, spawn pickles it) and call :meth:`register` at the start of each pass.

    An iteration is known by ``(base_seed, k)``: the DataLoader iterator draws a new base
    seed for each iteration and every worker of it sees the same one (``seed - id``); ``k``
    counts the earlier registrations of that base seed by the same worker id, which tells
    apart the passes of persistent workers (their base seed never changes) and iterations
    that repeat a seed (a DataLoader ``generator`` seeded the same way each epoch). The
    epoch of a key is its index among the distinct keys, counted from the last
    :meth:`restart`. The state is a small JSON file, replaced atomically under an exclusive
    ``flock`` of a separate lock file, so a worker killed mid-write corrupts nothing.

    Each process that iterates DataLoaders over the dataset or a copy of it (a sweep's
    trials, each given the dataset pickled) counts its own iterations: the state holds one
    count per such process (its workers' parent, its pid and start time), which starts at
    the epoch its copy had. A copy made in the process that owns the directory
    (``copy.deepcopy``) gets a counter of its own.
    """

    KEEP = 64  # distinct keys remembered: a worker that is later still is long stale

    def __init__(self) -> None:
        sweep_stale()  # (before this one's: it is never stale)
        self.dir = tempfile.mkdtemp(prefix=PREFIX)
        self.owner = os.getpid()
        self._finalizer = weakref.finalize(self, _remove_dir, self.dir, self.owner)
        self._write({"processes": {}})
        with open(os.path.join(self.dir, OWNER), "w", encoding="utf-8") as f:
            json.dump(_owner(self.owner), f)
        open(self._lock_path, "wb").close()  # noqa: SIM115 - created empty, never written

    def __getstate__(self) -> dict[str, Any]:
        return {"dir": self.dir, "owner": self.owner}  # a copy names the directory

    def __setstate__(self, state: dict[str, Any]) -> None:
        if state["owner"] == os.getpid():  # copied in the owner's process: a counter of its own
            self.__init__()  # type: ignore[misc]
        else:  # in a worker (spawn) or another process: it does not own it
            self.dir, self.owner = state["dir"], state["owner"]

    @property
    def _lock_path(self) -> str:
        return os.path.join(self.dir, "lock")

    @property
    def _path(self) -> str:
        return os.path.join(self.dir, "epochs.json")

    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict[str, Any]]:
        """The state, locked for this process; written back when the block succeeds."""
        with open(self._lock_path, "rb") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
            with open(self._path, encoding="utf-8") as f:
                state: dict[str, Any] = json.load(f)
            yield state
            self._write(state)

    def _write(self, state: dict[str, Any]) -> None:
        tmp = f"{self._path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(state, f)
        os.replace(tmp, self._path)

    def register(
        self,
        base_seed: int,
        worker: int,
        epoch: int = 0,
        process: int | None = None,
        workers: int | None = None,
        per_pass: int = 1,
    ) -> tuple[int, dict[str, Any] | None]:
        """The epoch of the pass this worker of ``process`` (default: this process's parent,
        the one iterating the DataLoader) is starting, and the state it starts at: the one
        given to the latest :meth:`restart` if this is the first pass since (every worker of
        that pass gets it, whenever it registers), else None (the epoch's beginning).
        ``epoch``: the first, if it is the first iteration of that process the counter sees.
        ``workers``: the DataLoader's ``num_workers``, recorded as the split of that
        process's latest pass (:meth:`last_split`). A pass runs ``per_pass`` epochs (a
        loader's ``epochs``): the next starts that many later (each DataLoader iteration of
        ``epochs=2`` replayed the last epoch of the one before).

        Raises:
            OSError: the directory is gone (the parent's dataset was collected, or a tmp
                cleaner removed it).
            ValueError: the state file is not JSON any more.
        """
        process = os.getppid() if process is None else process
        with self._locked() as whole:
            if workers is not None:  # (also the owner's: a forkserver is workers' parent)
                for p in dict.fromkeys((process, self.owner)):
                    _note_split(whole, p, workers)
            state = _of(whole, process, epoch)
            counts, keys = state["counts"], state["keys"]
            name = f"{base_seed}/{worker}"
            key = [base_seed, counts.get(name, 0)]
            counts[name] = key[1] + 1
            if key not in keys:
                keys.append(key)
            index = state["first"] + keys.index(key)
            if len(keys) > self.KEEP:
                drop = len(keys) - self.KEEP
                del keys[:drop]
                state["first"] += drop
                bases = {str(b) for b, _ in keys}
                state["counts"] = {n: c for n, c in counts.items() if n.split("/")[0] in bases}
        passes = index - int(state["start"])  # (since the latest restart)
        resume = state.get("resume") if passes == 0 else None
        return int(state["epoch"]) + passes * max(1, per_pass), resume

    def restart(
        self, epoch: int, process: int | None = None, resume: dict[str, Any] | None = None
    ) -> None:
        """The next iteration of ``process`` (default: this one) to register is ``epoch``
        (``set_epoch`` in the process iterating the DataLoader), starting at ``resume`` (a
        loader state, JSON; ``load_state_dict``) if given, else at its beginning. So both
        reach persistent workers, and a state is applied once: later passes, and passes
        after a later restart without it, start at their epoch's beginning."""
        with self._locked() as whole:
            state = _of(whole, os.getpid() if process is None else process, epoch)
            state["epoch"] = epoch
            state["start"] = state["first"] + len(state["keys"])
            state["resume"] = resume

    def began_since_restart(self, process: int | None = None) -> bool:
        """Whether a pass of ``process`` (default: this one) has registered since its latest
        :meth:`restart` (a state it gave has been taken).

        Raises:
            OSError, ValueError: as :meth:`register`.
        """
        with self._locked() as whole:
            state = _of(whole, os.getpid() if process is None else process, 0)
            return int(state["first"]) + len(state["keys"]) > int(state["start"])

    def note_split(self, workers: int, process: int | None = None) -> None:
        """Record that ``process`` (default: this one) is starting a pass in ``workers``
        DataLoader workers (0: in the process itself, as a DataLoader without workers)."""
        with self._locked() as whole:
            _note_split(whole, os.getpid() if process is None else process, workers)

    def last_split(self, process: int | None = None) -> int | None:
        """The ``num_workers`` of the latest pass ``process`` (default: this one) started
        over the dataset (None: none seen). A worker records it before its first batch, so
        once the process has a batch of a pass, it is that pass's.

        Raises:
            OSError, ValueError: as :meth:`register`.
        """
        with self._locked() as whole:
            split = whole.get("splits", {}).get(_key(os.getpid() if process is None else process))
        return None if split is None else int(split)


def _key(process: int) -> str:
    """A process, known by its pid and start time: a pid is used again once its process is
    gone."""
    return f"{process}/{_started(process)}"


def _note_split(whole: dict[str, Any], process: int, workers: int) -> None:
    splits = whole.setdefault("splits", {})
    splits.pop(_key(process), None)  # (last: the oldest are the first dropped)
    splits[_key(process)] = workers
    for old in list(splits)[: -EpochCounter.KEEP]:
        del splits[old]


def _of(whole: dict[str, Any], process: int, epoch: int) -> dict[str, Any]:
    """The count of ``process`` in the state (made, from ``epoch``, if it has none)."""
    processes = whole["processes"]
    key = _key(process)
    if key not in processes:
        processes[key] = {"epoch": epoch, "start": 0, "first": 0, "keys": [], "counts": {}}
        for old in list(processes)[: -EpochCounter.KEEP]:  # (a long sweep's trials)
            del processes[old]
    return processes[key]


def _started(pid: int) -> str:
    """When process ``pid`` started, in clock ticks since boot ("" where /proc has not it)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[19].decode()
    except (OSError, IndexError):
        return ""


PREFIX = "snap-epochs-"
OWNER = "owner.json"  # who made the directory: see sweep_stale


def _owner(pid: int) -> dict[str, str]:
    """A process, known across pid reuse and PID namespaces (containers sharing /tmp)."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    return {"host": socket.gethostname(), "pidns": namespace, "key": _key(pid)}


def sweep_stale(tmp: str | None = None) -> list[str]:
    """Remove the counters' directories in ``tmp`` (default: the temporary directory) whose
    owners are gone, and return them. A process ended by a signal (SIGTERM: a preempted or
    cancelled training job) or ``os._exit`` never runs its finalizers: each left one. Only
    this user's, and only those an owner of this host and PID namespace made, by pid and
    start time (a pid is used again); a directory without the owner's file (being made, or
    older) is left alone."""
    tmp = tempfile.gettempdir() if tmp is None else tmp
    here, removed = _owner(os.getpid()), []
    try:
        entries = [e for e in os.scandir(tmp) if e.name.startswith(PREFIX)]
    except OSError:
        return []
    for entry in entries:
        try:
            if not entry.is_dir(follow_symlinks=False) or entry.stat().st_uid != os.getuid():
                continue
            with open(os.path.join(entry.path, OWNER), encoding="utf-8") as f:
                owner = json.load(f)
            pid = int(str(owner["key"]).partition("/")[0])
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        ours = owner.get("host") == here["host"] and owner.get("pidns") == here["pidns"]
        if ours and pid > 0 and _key(pid) != owner["key"]:
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
    return removed


def _remove_dir(path: str, owner: int) -> None:
    # A forked worker inherits the finalizer with its copy of the dataset: only the process
    # that made the directory removes it.
    if os.getpid() == owner:
        shutil.rmtree(path, ignore_errors=True)


def new_counter() -> tuple[EpochCounter | None, str]:
    """A counter, or None and why DataLoader workers will not be able to count epochs."""
    if fcntl is None:
        return None, "no fcntl.flock on this platform"
    try:
        return EpochCounter(), ""
    except OSError as err:
        return None, f"cannot make a temporary directory: {err}"


_warned_cannot_count = False  # per process: each worker warns at most once


def warn_cannot_count(epoch: int, why: str) -> None:
    global _warned_cannot_count
    if _warned_cannot_count:
        return
    _warned_cannot_count = True
    warnings.warn(
        f"SnapshotDataset cannot tell DataLoader iterations apart in its workers ({why}): "
        f"every iteration replays epoch {epoch}'s order. Call dataset.set_epoch(epoch) "
        "before each epoch, or make the DataLoader with persistent_workers=True (their "
        "loaders count epochs)",
        UserWarning,
        stacklevel=3,
    )
