"""Faults at the OS calls of a local ``snap create`` (and ``gc``, ``inspect``, ``head``), found
by a fault-injection probe of snap's system calls, injected here in Python: ``os.<call>``
raising ``OSError(errno)`` at a chosen call about a path inside the snapshot, before or after
the call itself ran (an NFS or FUSE call interrupted once it was done).

- A temporary file that cannot be removed once it was linked into place (the commit, the
  lease) is a warning naming it and ``snap gc``, which removes it; never a failed create.
- EINTR at mkdir, rename, link, unlink, stat, a listing or close changes nothing: the call is
  made again (or, for close, done), whether or not it had happened.
- The error of the call that failed is the one said (a failed look after mkdir's EEXIST;
  a failed read of manifest.json), naming the file it was about (a shard's second descriptor).
- A lease that could not be released after the commit is a warning saying who takes it over.
"""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from fsspec.implementations.local import LocalFileOpener

import snapshot_cli as snap
from snapshot_cli import storage
from snapshot_cli.cli import cli
from snapshot_cli.errors import StorageError
from tests.reliability.test_injected_faults import PIPE, RECORDS

# The kind: every errno a storage gives for a call that failed (EINTR, once tried again as
# long as it lasts, is one of them).
ERRNOS = ["EIO", "ENOSPC", "EROFS", "EACCES", "EDQUOT", "ENOMEM", "EMFILE", "EINTR"]


def _where(name: str, args: tuple[Any, ...]) -> list[str]:
    """The paths a call is about: its path arguments, or a descriptor's file."""
    if name == "close":
        try:
            return [os.readlink(f"/proc/self/fd/{args[0]}")]
        except OSError:
            return []
    return [os.fsdecode(a) for a in args[:2] if isinstance(a, (str, bytes, os.PathLike))]


class Faults:
    """``os.<name>`` failing at chosen calls about paths under ``root`` whose path holds
    ``part``: the ``nth`` such call and the ``times - 1`` after it (None: every one from the
    ``nth``), ``after`` the real call ran (it happened, then the error came) or instead of it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
        self.monkeypatch, self.root = monkeypatch, str(root)
        self.seen: dict[str, int] = {}
        self.fired: list[tuple[str, str]] = []

    def inject(self, name: str, code: int | None, nth: int = 1, times: int | None = 1,
               after: bool = False, part: str = "") -> None:  # fmt: skip
        real: Callable[..., Any] = getattr(os, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            paths = [p for p in _where(name, args) if p.startswith(self.root) and part in p]
            if not paths:
                return real(*args, **kwargs)
            n = self.seen[name] = self.seen.get(name, 0) + 1
            due = code is not None and n >= nth and (times is None or n < nth + times)
            if not due:
                return real(*args, **kwargs)
            self.fired.append((name, paths[-1]))
            if after or name == "close":  # (close releases the descriptor whatever it says)
                done = real(*args, **kwargs)
                if hasattr(done, "close"):  # (a listing's iterator)
                    done.close()
            assert code is not None
            raise OSError(code, os.strerror(code), *([paths[0]] if name != "close" else []))

        self.monkeypatch.setattr(os, name, call)


class Run:
    def __init__(self, tmp: Path) -> None:
        tmp.mkdir(parents=True, exist_ok=True)
        self.pipe = tmp / "pipe.py"
        self.pipe.write_text(PIPE)
        self.out = tmp / "out"

    def command(self, *args: str) -> Result:
        return CliRunner().invoke(cli, list(args))

    def create(self, *extra: str) -> Result:
        return self.command("create", f"{self.pipe}:preprocess", str(self.out), "--inputs-from",
                            f"{self.pipe}:items", "--workers", "0", "--inputs-per-task", "2",
                            *extra)  # fmt: skip

    def records(self) -> list[int]:
        return sorted(int(i) for b in snap.open(str(self.out)).loader(4) for i in b["i"])

    def shards(self) -> list[str]:
        return sorted(f"shards/{p.name}" for p in (self.out / "shards").iterdir())

    def listed(self) -> list[str]:
        """The shards manifest.json lists."""
        return sorted(
            s["path"] for s in json.loads((self.out / "manifest.json").read_text())["shards"]
        )

    def temporaries(self) -> list[Path]:
        return sorted(p for p in self.out.rglob("*") if p.name.endswith(".tmp"))


@pytest.fixture
def run(tmp_path: Path) -> Run:
    return Run(tmp_path)


def errors_of(res: Result) -> list[str]:
    return [line for line in res.output.splitlines() if line.startswith("snap: error:")]


# --- F1: a temporary file left after its link (the commit, the lease) --------------------------


@pytest.mark.parametrize("which", [".manifest.json.", ".lease-"])
@pytest.mark.parametrize("error", ERRNOS)
def test_a_temporary_that_cannot_go_after_its_link_is_a_warning_naming_it_and_gc(
    run: Run, monkeypatch: pytest.MonkeyPatch, which: str, error: str
) -> None:
    faults = Faults(monkeypatch, run.out)
    faults.inject("unlink", getattr(errno, error), times=None, part=which)
    res = run.create()
    assert faults.fired, "the fault never fired"
    assert res.exit_code == 0, res.output
    assert not errors_of(res)
    left = run.temporaries()
    assert [p.name[: len(which)] for p in left] == [which]  # (this one only)
    warning = [line for line in res.output.splitlines() if str(left[0]) in line]
    assert len(warning) == 1 and "snap gc" in warning[0], res.output
    assert os.strerror(getattr(errno, error)) in warning[0]
    monkeypatch.undo()
    assert run.records() == RECORDS
    assert run.command("verify", str(run.out)).exit_code == 0
    gc = run.command("gc", str(run.out))
    assert gc.exit_code == 0, gc.output
    assert run.temporaries() == []  # gc removed it
    assert run.create().exit_code == 0  # up to date


def test_a_temporary_that_cannot_go_before_its_link_fails_the_create_as_before(
    run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    faults = Faults(monkeypatch, run.out)
    faults.inject("link", errno.EIO, part="manifest.json")
    res = run.create()
    assert res.exit_code == 1 and "manifest.json" in errors_of(res)[0], res.output
    assert run.temporaries() == [] and not (run.out / "manifest.json").exists()


# --- F3: EINTR, before or after the call happened ---------------------------------------------

CALLS = ["mkdir", "replace", "link", "unlink", "scandir", "stat", "lstat", "close"]


def count_calls(run: Run, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How many calls of each of :data:`CALLS` a create makes about its OUTPUT."""
    faults = Faults(monkeypatch, run.out)
    for name in CALLS:
        faults.inject(name, None)
    assert run.create().exit_code == 0
    monkeypatch.undo()
    return faults.seen


@pytest.fixture(scope="module")
def calls(tmp_path_factory: pytest.TempPathFactory) -> dict[str, int]:
    with pytest.MonkeyPatch.context() as monkeypatch:
        return count_calls(Run(tmp_path_factory.mktemp("count")), monkeypatch)


# EINTR before the call happened or after it, by turns from an offset drawn for each run (runs
# of the suite together give every call both; both at each took 95 s of the suite's worker
# time). SNAP_EINTR_OFFSET=k fixes the offset; a failure names it.
OFFSET = int(os.environ.get("SNAP_EINTR_OFFSET", random.randrange(2)))


@pytest.mark.parametrize("name", CALLS)
def test_eintr_at_any_call_of_create_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, calls: dict[str, int], name: str
) -> None:
    assert calls.get(name), f"a create makes no {name} call about its OUTPUT"
    for nth in range(1, calls[name] + 1):  # (every one)
        run = Run(tmp_path / f"{nth}")
        faults = Faults(monkeypatch, run.out)
        after = (nth + OFFSET) % 2 == 1
        faults.inject(name, errno.EINTR, nth=nth, after=after)
        res = run.create()
        where = (name, nth, "after" if after else "before", f"SNAP_EINTR_OFFSET={OFFSET}")
        assert faults.fired, where
        assert res.exit_code == 0, (where, faults.fired, res.output)
        assert "snap: warning" not in res.output, res.output
        monkeypatch.undo()
        assert run.temporaries() == []
        assert run.records() == RECORDS


@pytest.fixture(scope="module")
def twice(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A snapshot of two versions (the first's shards garbage once retention is 0) and a
    shard no version has: each test takes copies (:func:`made_twice`)."""
    run = Run(tmp_path_factory.mktemp("twice"))
    assert run.create().exit_code == 0
    assert run.create("--param", "tag=1", "--overwrite").exit_code == 0
    (run.out / "shards" / "0123456789-00000-0000-00000000.arrow").write_bytes(b"x")
    return run.out


def made_twice(twice: Path, tmp: Path) -> Run:
    """A copy of :func:`twice`'s snapshot (its files' times kept) in ``tmp``."""
    run = Run(tmp)
    shutil.copytree(twice, run.out, copy_function=shutil.copy2)
    return run


@pytest.mark.parametrize("name", CALLS)
def test_eintr_at_any_call_of_gc_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, twice: Path, name: str
) -> None:
    run = made_twice(twice, tmp_path / "count")
    faults = Faults(monkeypatch, run.out)
    faults.inject(name, None)
    assert run.command("gc", str(run.out), "--retention", "0").exit_code == 0
    monkeypatch.undo()
    assert run.shards() == run.listed()  # (what gc leaves: the current version's)
    assert faults.seen.get(name), f"gc makes no {name} call about the snapshot"
    for nth in range(1, faults.seen[name] + 1):
        run = made_twice(twice, tmp_path / f"{nth}")
        faults = Faults(monkeypatch, run.out)
        faults.inject(name, errno.EINTR, nth=nth, after=nth % 2 == 0)
        res = run.command("gc", str(run.out), "--retention", "0")
        monkeypatch.undo()
        assert faults.fired and res.exit_code == 0, (name, nth, faults.fired, res.output)
        assert "snap: warning" not in res.output, res.output
        assert run.shards() == run.listed()
        assert run.records() == RECORDS


def test_eintr_that_lasts_is_the_error_it_is(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    faults = Faults(monkeypatch, run.out)
    faults.inject("mkdir", errno.EINTR, times=None)
    res = run.create()
    assert res.exit_code == 1, res.output
    assert len(faults.fired) == 8  # (interrupted.TRIES)
    assert str(run.out) in errors_of(res)[0] and "Interrupted" in errors_of(res)[0]


@pytest.mark.parametrize("after", [False, True], ids=["before", "after"])
def test_eintr_closing_a_shard_is_done(
    run: Run, monkeypatch: pytest.MonkeyPatch, after: bool
) -> None:
    """The first descriptor of a shard (fsspec's file, written through): close's EINTR."""
    real, fired = LocalFileOpener.close, []

    def close(self: LocalFileOpener) -> None:
        if not fired and self.path.endswith(".arrow") and "w" in self.mode:
            fired.append(self.path)
            if after:
                real(self)
            raise InterruptedError(errno.EINTR, os.strerror(errno.EINTR))
        real(self)

    monkeypatch.setattr(LocalFileOpener, "close", close)
    res = run.create()
    assert fired and res.exit_code == 0, res.output
    monkeypatch.undo()
    assert run.records() == RECORDS
    assert run.command("verify", str(run.out)).exit_code == 0


# --- F4: the storage's own error, not another --------------------------------------------------


@pytest.mark.parametrize("via", ["makedirs", "write_atomic", "create_exclusive"])
@pytest.mark.parametrize("error", [e for e in ERRNOS if e != "EINTR"])
def test_a_failed_look_after_mkdir_says_its_own_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, via: str, error: str
) -> None:
    directory = tmp_path / "out" / "_runs"
    directory.mkdir(parents=True)
    fs, path = storage.resolve(str(directory))
    faults = Faults(monkeypatch, directory)
    faults.inject("stat", getattr(errno, error), times=None, part="_runs")
    with pytest.raises(StorageError) as caught:
        if via == "makedirs":
            storage.makedirs(fs, path)
        elif via == "write_atomic":
            storage.write_atomic(fs, storage.join(path, "f.json"), b"{}")
        else:
            storage.create_exclusive(fs, storage.join(path, "f.json"), b"{}")
    said = str(caught.value)
    assert "EEXIST" not in said and "File exists" not in said, said
    assert os.strerror(getattr(errno, error)) in said and str(directory) in said, said


def test_a_file_where_a_directory_should_be_is_still_said(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    fs, path = storage.resolve(str(tmp_path / "f"))
    with pytest.raises((StorageError, FileExistsError)):
        storage.makedirs(fs, path)


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Run:
    run = Run(tmp_path_factory.mktemp("made"))
    assert run.create().exit_code == 0
    return run


@pytest.mark.parametrize("command", ["inspect", "head"])
@pytest.mark.parametrize("name", ["open", "read", "close"])
@pytest.mark.parametrize("error", ERRNOS)
def test_a_failed_read_of_the_manifest_says_the_storage_error(
    made: Run, monkeypatch: pytest.MonkeyPatch, command: str, name: str, error: str
) -> None:
    faults = Faults(monkeypatch, made.out)
    if name == "read":  # (a read names no path: the descriptor's file)
        real_read = os.read

        def read(fd: int, n: int) -> bytes:
            if os.readlink(f"/proc/self/fd/{fd}").endswith("manifest.json") and not faults.fired:
                faults.fired.append(("read", "manifest.json"))
                code = getattr(errno, error)
                raise OSError(code, os.strerror(code))
            return real_read(fd, n)

        monkeypatch.setattr(os, "read", read)
    else:
        faults.inject(name, getattr(errno, error), part="manifest.json")
    res = made.command(command, str(made.out))
    assert faults.fired, "the manifest was not read by os calls"
    if error == "EINTR":
        assert res.exit_code == 0, res.output
        return
    assert res.exit_code == 1, res.output
    line = errors_of(res)[0]
    assert "manifest.json" in line and "UnsupportedOperation" not in line, line
    assert os.strerror(getattr(errno, error)).lower() in line.lower(), line


# --- F7: the shard a failed close was about -----------------------------------------------------


@pytest.mark.parametrize("error", [e for e in ERRNOS if e != "EINTR"])
def test_a_failed_close_of_a_shards_second_descriptor_names_the_shard(
    run: Run, monkeypatch: pytest.MonkeyPatch, error: str
) -> None:
    faults = Faults(monkeypatch, run.out)
    faults.inject("close", getattr(errno, error), part="/shards/")  # (the writeback's, first)
    res = run.create()
    assert faults.fired and faults.fired[0][1].endswith(".arrow"), faults.fired
    assert res.exit_code == 1, res.output
    line = errors_of(res)[0]
    assert faults.fired[0][1] in line, line
    assert os.strerror(getattr(errno, error)).lower() in line.lower(), line
    monkeypatch.undo()
    assert run.create().exit_code == 0
    assert run.records() == RECORDS


def test_eintr_closing_a_shards_second_descriptor_is_done(
    run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    faults = Faults(monkeypatch, run.out)
    faults.inject("close", errno.EINTR, times=None, part="/shards/")
    res = run.create()
    assert len(faults.fired) > 3 and res.exit_code == 0, res.output
    monkeypatch.undo()
    assert run.records() == RECORDS


# --- the lease, released after the commit ------------------------------------------------------


@pytest.fixture
def lease_writes(run: Run, monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """How many times a create writes its lease whole (os.replace): the last is its release."""
    faults = Faults(monkeypatch, run.out)
    faults.inject("replace", None, part="/lease-")
    assert run.create().exit_code == 0
    monkeypatch.undo()
    yield faults.seen["replace"]


@pytest.mark.parametrize("error", ERRNOS)
def test_a_lease_that_cannot_be_released_after_the_commit_is_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lease_writes: int, error: str
) -> None:
    run = Run(tmp_path / "again")
    faults = Faults(monkeypatch, run.out)
    code = getattr(errno, error)
    faults.inject("replace", code, nth=lease_writes, times=None, part="/lease-")
    faults.inject("unlink", code, times=None, part="/lease-")  # (nor deleted)
    res = run.create()
    assert faults.fired, "the fault never fired"
    assert res.exit_code == 0, res.output
    warning = [line for line in res.output.splitlines() if "release the writer lease" in line]
    assert len(warning) == 1 and "takes it over" in warning[0], res.output
    assert str(run.out) in warning[0]
    monkeypatch.undo()
    assert run.records() == RECORDS
    again = run.create("--param", "tag=1", "--overwrite")  # (not up to date: takes the lease)
    assert again.exit_code == 0, again.output
