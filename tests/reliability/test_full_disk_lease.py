"""A disk full (or a quota used up) when a create writes its lease, the first file it
writes: the storage's advice said "run the same command again: it resumes", and nothing had
begun. Injected at the open of the lease's file (tests/reliability/test_syscall_faults_writes)."""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

import pytest

import snapshot_cli as snap
from snapshot_cli.errors import StorageError
from tests.reliability.test_syscall_faults_writes import Faults


def f(i: int):  # type: ignore[no-untyped-def]
    yield {"x": i}


@pytest.mark.parametrize(("name", "said"), [("ENOSPC", "the disk is full"),
                                            ("EDQUOT", "the disk quota is used up")])  # fmt: skip
def test_no_room_for_the_first_lease_says_nothing_was_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, said: str
) -> None:
    out = tmp_path / "snap"
    Faults(monkeypatch, tmp_path).inject("open", getattr(errno, name), times=None, part="lease")
    with pytest.raises(StorageError) as caught:
        snap.create(f, str(out), inputs=[1, 2], workers=0)
    runs = re.escape(str(out / "_runs"))  # (the lease's file, or its temporary: as it failed)
    assert re.fullmatch(
        re.escape(f"cannot take the writer lease of {out}, a small file in _runs/ written "
                  "before anything else (")
        + rf"{runs}/\.?lease-00000000\.json[.0-9a-f]*(\.tmp)?"
        + re.escape(f": {os.strerror(getattr(errno, name))} ({name})): {said}; nothing was "
                    "written: free space (or inodes) there, then run the same command again"),
        str(caught.value),
    ), caught.value  # fmt: skip
    assert not out.exists()  # (the directories made for the lease went again)
