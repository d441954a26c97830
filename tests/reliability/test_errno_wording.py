"""Faults a syscall fault-injection probe found and the last session left, injected here at
the Python calls that make them (an ``os`` call, or what snap calls in its place, failing
with an errno at a chosen call):

- access(2) failing otherwise than for a permission (EIO, ENOMEM, ELOOP...): ``os.access``
  says False, and snap gave a chmod for a failing disk;
- a stat failing otherwise than for absence, taken for "not there" by ``os.path.isdir`` and
  ``lexists`` in the checks a create makes before any work: it went on, or advised wrongly;
- an input file's hashing failed for EINTR at its close (or open, or a read): tried again;
- an ``O_EXCL`` create interrupted after it made the file, then EEXIST on its retry: the name
  was taken for another writer's;
- a temporary that could not be removed after a failed link: its error replaced the link's.
"""

from __future__ import annotations

import builtins
import errno
import hashlib
import logging
import os
import time
from pathlib import Path
from typing import Any

import pytest

import snapshot_cli as snap
from snapshot_cli import durable, interrupted, local_files, storage
from snapshot_cli.errors import StorageError
from snapshot_cli.writers import contents, guards, runs
from tests.reliability.test_syscall_faults_writes import Faults

# The kind: what a look at a local path (stat, access) says that is no permission and no
# absence
NOT_A_PERMISSION = ["EIO", "ENOMEM", "ELOOP", "ENAMETOOLONG", "EMFILE", "EOVERFLOW", "ESTALE"]
# Every errno of the kind a storage gives for a call that failed (as the other probes' tests)
ERRNOS = ["EIO", "ENOSPC", "EROFS", "EACCES", "EDQUOT", "ENOMEM", "EMFILE", "EINTR"]
PERMISSION_WORDS = ("may not", "chmod", "permission")


def said_as_storage(text: str, name: str, path: str) -> None:
    """The errno and the path named, no permission advice."""
    assert f"({name})" in text and path in text, text
    assert not [w for w in PERMISSION_WORDS if w in text.lower()], text


class AccessFails:
    """access(2) failing with ``code`` for paths holding ``part``, from the ``nth`` such call
    on (``times`` of them): ``os.access`` then says False (what the code before saw), the call
    that keeps the errno raises it (``local_files._access``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, code: int, part: str, nth: int = 1,
                 times: int | None = None) -> None:  # fmt: skip
        self.code, self.part, self.nth, self.times, self.seen = code, part, nth, times, 0
        real_access, real_errno = os.access, getattr(local_files, "_access", None)

        def due(path: Any) -> bool:
            if self.part not in os.fsdecode(path):
                return False
            self.seen += 1
            last = None if self.times is None else self.nth + self.times - 1
            return self.seen >= self.nth and (last is None or self.seen <= last)

        def access(path: Any, mode: int, *args: Any, **kwargs: Any) -> bool:
            return False if due(path) else real_access(path, mode, *args, **kwargs)

        def keeping(path: str, mode: int) -> None:
            if due(path):
                raise OSError(self.code, os.strerror(self.code), path)
            assert real_errno is not None
            real_errno(path, mode)

        monkeypatch.setattr(os, "access", access)
        if real_errno is not None:
            monkeypatch.setattr(local_files, "_access", keeping)


@pytest.fixture
def snapshot(tmp_path: Path) -> Path:
    out = tmp_path / "s"
    snap.create(lambda i: [{"x": i}], str(out), inputs=range(3), workers=0, progress=False)
    return out


# --- 1: access(2) -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", NOT_A_PERMISSION)
@pytest.mark.parametrize("where", ["", "shards", "_versions", "_runs"])
def test_a_failing_access_check_before_a_create_is_the_storage_s(
    snapshot: Path, monkeypatch: pytest.MonkeyPatch, name: str, where: str
) -> None:
    """guards.refuse_unwritable (every create, before its lease) at each directory."""
    directory = str(snapshot / where) if where else str(snapshot)
    AccessFails(monkeypatch, getattr(errno, name), directory, times=1)
    fs, root = storage.resolve(str(snapshot))
    with pytest.raises(StorageError) as caught:
        guards.refuse_unwritable(fs, root, str(snapshot))
    said_as_storage(str(caught.value), name, directory)


@pytest.mark.parametrize("name", ["EACCES", "EPERM"])
def test_a_refused_access_check_is_still_a_permission(
    snapshot: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    AccessFails(monkeypatch, getattr(errno, name), str(snapshot / "shards"), times=1)
    fs, root = storage.resolve(str(snapshot))
    with pytest.raises(StorageError, match=r"may not write .*/shards .*chmod -R u\+rwX"):
        guards.refuse_unwritable(fs, root, str(snapshot))


def test_a_read_only_filesystem_is_no_permission_and_eintr_is_tried_again(
    snapshot: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    AccessFails(monkeypatch, errno.EROFS, str(snapshot), times=1)
    assert not local_files.denies_write(str(snapshot))  # (the write's own error says so)
    AccessFails(monkeypatch, errno.EINTR, str(snapshot), times=interrupted.TRIES - 1)
    assert not local_files.denies_write(str(snapshot))
    AccessFails(monkeypatch, errno.EINTR, str(snapshot), times=interrupted.TRIES)
    with pytest.raises(InterruptedError):  # (a storm of signals: the call fails, as before)
        local_files.denies_write(str(snapshot))


@pytest.mark.parametrize("name", NOT_A_PERMISSION)
@pytest.mark.parametrize("nth", [1, 2, 3])
def test_a_denied_read_is_told_no_chmod_from_a_failing_access_check(
    snapshot: Path, monkeypatch: pytest.MonkeyPatch, name: str, nth: int
) -> None:
    """read_hint (what every denied read adds: the directory this user may not enter, with
    its chmod) at each of the access checks of the directories above a shard: one that
    failed was said as "this user may not enter" that directory."""
    shard = str(next((snapshot / "shards").iterdir()))
    denied = OSError(errno.EACCES, os.strerror(errno.EACCES), shard)
    AccessFails(monkeypatch, getattr(errno, name), "/", nth=nth, times=1)
    assert local_files.read_hint(shard) is None
    assert "may not enter" not in str(storage.fault(denied, shard, reading=True))
    AccessFails(monkeypatch, errno.EACCES, "/", nth=nth, times=1)
    assert "may not enter" in (local_files.read_hint(shard) or "")  # (a refusal: said)


# --- 2: a stat that fails is not absence --------------------------------------------------------


@pytest.mark.parametrize("name", NOT_A_PERMISSION)
@pytest.mark.parametrize("where", ["", "shards", "_versions", "_runs"])
def test_a_failing_stat_before_a_create_is_the_storage_s(
    snapshot: Path, monkeypatch: pytest.MonkeyPatch, name: str, where: str
) -> None:
    """guards.refuse_unwritable: a directory whose stat failed was taken for one not there,
    and the create went on."""
    directory = snapshot / where if where else snapshot
    fs, root = storage.resolve(str(snapshot))
    Faults(monkeypatch, directory).inject("stat", getattr(errno, name), times=None)
    with pytest.raises(StorageError) as caught:
        guards.refuse_unwritable(fs, root, str(snapshot))
    said_as_storage(str(caught.value), name, str(directory))


@pytest.mark.parametrize("name", NOT_A_PERMISSION)
@pytest.mark.parametrize("where", ["", "shards", "_versions", "tasks"])
def test_a_failing_stat_before_a_resumed_run_is_the_storage_s(
    snapshot: Path, monkeypatch: pytest.MonkeyPatch, name: str, where: str
) -> None:
    """runs.refuse_unwritable, resuming a run: each directory it looks at."""
    run = "0123456789"
    (snapshot / "_runs" / run / "tasks").mkdir(parents=True)
    tasks = snapshot / "_runs" / run / "tasks"
    directory = tasks if where == "tasks" else snapshot / where if where else snapshot
    fs, root = storage.resolve(str(snapshot))
    monkeypatch.setattr(os, "stat", _exactly(os.stat, str(directory), getattr(errno, name)))
    with pytest.raises(StorageError) as caught:
        runs.refuse_unwritable(fs, root, run)
    said_as_storage(str(caught.value), name, str(directory))


def _exactly(real: Any, path: str, code: int) -> Any:
    """``os.stat`` failing with ``code`` for ``path`` itself only (not what is below it)."""

    def stat(what: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(what, (str, bytes, os.PathLike)) and os.fsdecode(what).rstrip("/") == path:
            raise OSError(code, os.strerror(code), path)
        return real(what, *args, **kwargs)

    return stat


@pytest.mark.parametrize("name", NOT_A_PERMISSION)
@pytest.mark.parametrize("where", ["shards", "_runs", "_versions", "manifest.json"])
def test_a_failing_look_for_a_link_out_of_the_output_is_no_absence(
    snapshot: Path, monkeypatch: pytest.MonkeyPatch, name: str, where: str
) -> None:
    """guards.check_output's look for a link out of OUTPUT (lexists)."""
    path = str(snapshot / where)
    monkeypatch.setattr(os, "lstat", _exactly(os.lstat, path, getattr(errno, name)))
    fs, root = storage.resolve(str(snapshot))
    with pytest.raises(OSError) as caught:
        guards.check_output(fs, root)
    assert caught.value.errno == getattr(errno, name) and caught.value.filename == path


# --- 3: an input's hashing interrupted ----------------------------------------------------------


class Interrupting:
    """``open`` of ``target`` (as Python opens it for hashing): its ``site`` (open, read,
    close) fails with ``code`` at the ``nth`` call there, and the ``times - 1`` after it."""

    def __init__(self, target: str, site: str, nth: int, code: int, times: int = 1) -> None:
        self.target, self.site, self.nth, self.code, self.times = target, site, nth, code, times
        self.calls = 0

    def hit(self, site: str) -> None:
        if site != self.site:
            return
        self.calls += 1
        if self.nth <= self.calls < self.nth + self.times:
            raise OSError(self.code, os.strerror(self.code), self.target)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        real = builtins.open

        def opening(file: Any, *args: Any, **kwargs: Any) -> Any:
            if not isinstance(file, str) or os.path.abspath(file) != self.target:
                return real(file, *args, **kwargs)
            self.hit("open")
            return _File(real(file, *args, **kwargs), self)

        monkeypatch.setattr(builtins, "open", opening)


class _File:
    def __init__(self, file: Any, faults: Interrupting) -> None:
        self.file, self.faults = file, faults

    def read(self, n: int = -1) -> bytes:
        self.faults.hit("read")
        return bytes(self.file.read(n))

    def __enter__(self) -> _File:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.file.close()  # (released, then what went wrong is said)
        self.faults.hit("close")


@pytest.fixture
def inputs(tmp_path: Path) -> list[tuple[str, int]]:
    files = []
    for i in range(3):
        path = tmp_path / f"in-{i}.bin"
        path.write_bytes(os.urandom(1000 + i))
        files.append((str(path), 1000 + i))
    return files


def sha256(path: str) -> str:
    return "sha256=" + hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.mark.parametrize(
    ("site", "nth", "times"),
    [("open", 1, 1), ("read", 1, 1), ("read", 2, 1), ("close", 1, 1), ("close", 1, 3)],
)
def test_an_input_s_hashing_interrupted_is_read_again(
    inputs: list[tuple[str, int]], monkeypatch: pytest.MonkeyPatch, site: str, nth: int,
    times: int,
) -> None:  # fmt: skip
    target = inputs[1][0]
    faults = Interrupting(target, site, nth, errno.EINTR, times)
    faults.install(monkeypatch)
    got = contents.hash_files(inputs)
    assert faults.calls >= nth + times, faults.calls  # (it fired, and the call came again)
    assert got == {path: sha256(path) for path, _ in inputs}


def test_a_storm_of_signals_fails_the_hashing(
    inputs: list[tuple[str, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    target = inputs[0][0]
    Interrupting(target, "close", 1, errno.EINTR, times=interrupted.TRIES).install(monkeypatch)
    with pytest.raises(StorageError, match=r"\(EINTR\)") as caught:
        contents.hash_files(inputs)
    assert target in str(caught.value)


@pytest.mark.parametrize("site", ["open", "read", "close"])
@pytest.mark.parametrize("name", [e for e in ERRNOS if e != "EINTR"])
def test_an_input_s_hashing_that_fails_otherwise_is_said(
    inputs: list[tuple[str, int]], monkeypatch: pytest.MonkeyPatch, site: str, name: str
) -> None:
    target = inputs[2][0]
    faults = Interrupting(target, site, 1, getattr(errno, name))
    faults.install(monkeypatch)
    with pytest.raises(StorageError) as caught:
        contents.hash_files(inputs)
    assert target in str(caught.value) and faults.calls == 1  # (not tried again)


# --- 4: an exclusive create interrupted after it made the file ----------------------------------


def opens_then_fails(monkeypatch: pytest.MonkeyPatch, code: int) -> list[str]:
    """``os.open`` with O_EXCL makes the file, then fails (a signal, on NFS or FUSE) with
    ``code``: EINTR (tried again here), or EEXIST (Python's own retry of the interrupted
    open, PEP 475); the files it made."""
    real, made = os.open, []

    def opening(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & os.O_EXCL and not made:
            os.close(real(path, flags, *args, **kwargs))
            made.append(os.fsdecode(path))
            raise OSError(code, os.strerror(code), path)
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", opening)
    monkeypatch.setattr(durable, "EMPTY_WAIT_S", 0, raising=False)  # (the wait for a writer)
    return made


@pytest.mark.parametrize("code", [errno.EINTR, errno.EEXIST], ids=["EINTR", "EEXIST"])
def test_an_interrupted_exclusive_create_is_no_name_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    made = opens_then_fails(monkeypatch, code)
    path = str(tmp_path / "lease")
    with pytest.raises(StorageError) as caught:
        durable.create_in_place(path, b"mine")
    text = str(caught.value)
    assert text.startswith(f"{path} exists but is empty: a create of it was interrupted"), text
    assert f"remove it (rm {path})" in text
    assert made == [path] and Path(path).read_bytes() == b""


def test_another_writer_s_file_is_still_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bytes in it, at once or while it is looked at again: another writer's (False)."""
    path = tmp_path / "lease"
    path.write_bytes(b"theirs")
    assert durable.create_in_place(str(path), b"mine") is False
    path.write_bytes(b"")
    looks: list[float] = []

    def writes(seconds: float) -> None:  # (the other writer writes while this one waits)
        looks.append(seconds)
        if len(looks) == 3:
            path.write_bytes(b"theirs")

    monkeypatch.setattr(time, "sleep", writes)
    assert durable.create_in_place(str(path), b"mine") is False
    assert len(looks) == 3 and path.read_bytes() == b"theirs"


@pytest.mark.parametrize("name", ERRNOS)
def test_a_close_after_the_bytes_are_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """close's EINTR is done (the descriptor released, the bytes synced); any other errno of
    close (NFS says a write's failure there) removes the file and is raised."""
    path = tmp_path / "lease"
    Faults(monkeypatch, tmp_path).inject("close", getattr(errno, name), part="lease")
    if name == "EINTR":
        assert durable.create_in_place(str(path), b"mine") is True
        assert path.read_bytes() == b"mine"
        return
    with pytest.raises(OSError) as caught:
        durable.create_in_place(str(path), b"mine")
    assert caught.value.errno == getattr(errno, name) and not path.exists()


# --- 5: a failed link's error is the one said ---------------------------------------------------


@pytest.mark.parametrize("removal", ERRNOS)
@pytest.mark.parametrize("link", [e for e in ERRNOS if e != "EINTR"])
def test_a_failed_link_is_said_whatever_its_temporary_s_removal_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
    removal: str, link: str,
) -> None:  # fmt: skip
    fs, root = storage.resolve(str(tmp_path))
    path = storage.join(root, "lease")
    faults = Faults(monkeypatch, tmp_path)
    faults.inject("link", getattr(errno, link), times=None, part="lease")
    faults.inject("unlink", getattr(errno, removal), times=None, part=".lease")
    with caplog.at_level(logging.WARNING, "snapshot_cli"), pytest.raises(StorageError) as caught:
        storage.create_exclusive(fs, path, b"mine")
    text = str(caught.value)
    assert os.strerror(getattr(errno, link)) in text and path in text, text
    assert os.strerror(getattr(errno, removal)) not in text.replace(
        os.strerror(getattr(errno, link)), ""
    ), text
    (left,) = [p for p in tmp_path.iterdir() if p.name != "lease"]
    (warning,) = [r.getMessage() for r in caplog.records if str(left) in r.getMessage()]
    assert f"{path} was not made" in warning and "snap gc" in warning, warning
    assert os.strerror(getattr(errno, removal)) in warning, warning


@pytest.mark.parametrize("removal", ERRNOS)
def test_a_failed_write_of_the_temporary_is_said_whatever_its_removal_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
    removal: str,
) -> None:  # fmt: skip
    """The other call site: the temporary's write (a full disk), then its removal."""

    def full(path: str, data: bytes) -> None:
        Path(path).write_bytes(data[:1])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)

    monkeypatch.setattr(interrupted, "write_synced", full)
    Faults(monkeypatch, tmp_path).inject("unlink", getattr(errno, removal), times=None)
    fs, root = storage.resolve(str(tmp_path))
    with caplog.at_level(logging.WARNING, "snapshot_cli"), pytest.raises(StorageError) as caught:
        storage.create_exclusive(fs, storage.join(root, "lease"), b"mine")
    assert "(ENOSPC)" in str(caught.value), caught.value
    assert any(os.strerror(getattr(errno, removal)) in r.getMessage() for r in caplog.records)
