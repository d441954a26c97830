"""A file created exclusively (a lease, a manifest's first version) whose temporary file was
never made (its open failed: a read-only filesystem, a name too long, a full disk) is no
temporary "that could not be removed": on a read-only filesystem unlink(2) of a missing name
says EROFS, not ENOENT, and a create growing a snapshot there warned of a file that did not
exist, and told the user to run snap gc (which cannot write there either)."""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from snapshot_cli import interrupted, storage
from snapshot_cli.cli import cli
from snapshot_cli.errors import StorageError
from tests.reliability.test_syscall_faults_writes import ERRNOS, Faults

CODES = [e for e in ERRNOS if e != "EINTR"] + ["ENAMETOOLONG", "ENOTDIR", "ELOOP", "EPERM"]
TEMPORARY = "temporary file"


@pytest.mark.parametrize("removal", ERRNOS)
@pytest.mark.parametrize("name", CODES)
def test_a_temporary_never_made_is_not_warned_of(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
    name: str, removal: str,
) -> None:  # fmt: skip
    faults = Faults(monkeypatch, tmp_path)
    faults.inject("open", getattr(errno, name), times=None, part=".lease")
    faults.inject("unlink", getattr(errno, removal), times=None, part=".lease")
    fs, root = storage.resolve(str(tmp_path))
    with caplog.at_level(logging.WARNING, "snapshot_cli"), pytest.raises(StorageError) as caught:
        storage.create_exclusive(fs, storage.join(root, "lease"), b"mine")
    text = str(caught.value)
    assert f"({name})" in text or os.strerror(getattr(errno, name)).lower() in text.lower(), text
    assert not [r.getMessage() for r in caplog.records if TEMPORARY in r.getMessage()]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("removal", [e for e in ERRNOS if e != "EINTR"])
def test_a_temporary_made_then_not_removed_is_still_warned_of(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
    removal: str,
) -> None:  # fmt: skip
    """Made, then its write failed (a full disk): it is there, and said."""

    def full(fd: int, data: bytes) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(interrupted, "write_all", full)
    Faults(monkeypatch, tmp_path).inject("unlink", getattr(errno, removal), times=None)
    fs, root = storage.resolve(str(tmp_path))
    with caplog.at_level(logging.WARNING, "snapshot_cli"), pytest.raises(StorageError):
        storage.create_exclusive(fs, storage.join(root, "lease"), b"mine")
    (left,) = list(tmp_path.iterdir())
    (said,) = [r.getMessage() for r in caplog.records if TEMPORARY in r.getMessage()]
    assert str(left) in said and os.strerror(getattr(errno, removal)) in said, said


@pytest.mark.parametrize("name", ["EROFS", "EACCES", "ENOSPC", "EIO"])
def test_growing_a_snapshot_that_cannot_be_written_says_only_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """The probe's case, through the command: a snapshot on a read-only filesystem grown."""
    (tmp_path / "p.py").write_text(
        "import os\ndef f(path):\n    yield {'n': os.path.getsize(path)}\n"
    )
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "a.bin").write_bytes(b"a")
    (raw / "b.bin").write_bytes(b"bb")
    out = tmp_path / "s"
    command = ["create", f"{tmp_path}/p.py:f", str(out), "--input", str(raw / "a.bin"),
               "--workers", "0", "--quiet"]  # fmt: skip
    assert CliRunner().invoke(cli, command).exit_code == 0
    before = sorted(p.name for p in (out / "_runs").iterdir())
    faults = Faults(monkeypatch, out)
    for call in ("open", "unlink"):  # (a temporary's: what a read-only filesystem says)
        faults.inject(call, getattr(errno, name), times=None, part="/.lease-")
    done = CliRunner().invoke(cli, [*command, "--input", str(raw / "b.bin")])
    said = os.strerror(getattr(errno, name)).lower()
    assert done.exit_code == 1 and said in done.output.lower(), done.output
    assert TEMPORARY not in done.output and "Traceback" not in done.output, done.output
    assert sorted(p.name for p in (out / "_runs").iterdir()) == before
