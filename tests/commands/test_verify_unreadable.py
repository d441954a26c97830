"""``snap verify`` checks every shard when the storage fails some of them: each unreadable
shard listed with its cause (never called damaged), the damaged ones as before, then one
``snap: error:`` line and exit 1. It stopped at the first unreadable shard, so a snapshot of
1,000 shards took a run per failing one. A failure that is no shard's (every shard alike, or
:data:`~snapshot_cli.readers.verify.STOP_AFTER` in a row; out of memory or open files) is
still one line, nothing on stdout."""

from __future__ import annotations

import errno
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import snapshot_cli as snap
from snapshot_cli.readers import verify as verify_mod
from tests.commands.conftest import TASKS, invoke

# The kind: what a storage says to a read of one shard (ENOMEM and EMFILE are the process's:
# see test_a_shortage_of_the_process_stops_verify_at_once)
PER_SHARD = ["EIO", "ENOSPC", "EROFS", "EACCES", "EDQUOT", "ESTALE", "EINTR", "ENXIO"]
WRITERS_WORDS = ("OUTPUT", "remount", "free space", "it resumes")


def shard_paths(snapshot: Path) -> list[str]:
    return [str(snapshot / s.path) for s in snap.open(snapshot).shards]


def failing_opens(
    monkeypatch: pytest.MonkeyPatch, codes: dict[str, int]
) -> Callable[[], dict[str, int]]:
    """``os.open`` of each path in ``codes`` fails with its errno, every time (a bad sector,
    a file the storage refuses); returns the count of opens tried, by path."""
    real, tried = os.open, dict.fromkeys(codes, 0)

    def opening(path: Any, *args: Any, **kwargs: Any) -> int:
        name = os.path.abspath(os.fsdecode(path)) if isinstance(path, (str, bytes)) else ""
        if name in codes:
            tried[name] += 1
            raise OSError(codes[name], os.strerror(codes[name]), name)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", opening)
    return lambda: tried


def flip_middle_byte(path: str) -> None:
    data = bytearray(Path(path).read_bytes())
    data[len(data) // 2] ^= 0xFF
    Path(path).write_bytes(bytes(data))


def errors(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("snap: error:")]


@pytest.mark.parametrize("threads", ["1", "4"])
@pytest.mark.parametrize("name", PER_SHARD)
def test_every_unreadable_and_damaged_shard_is_named_in_one_run(
    snapshot: Path, monkeypatch: pytest.MonkeyPatch, name: str, threads: str
) -> None:
    shards = shard_paths(snapshot)
    unreadable, damaged = [shards[1], shards[4]], shards[2]
    flip_middle_byte(damaged)
    failing_opens(monkeypatch, dict.fromkeys(unreadable, getattr(errno, name)))
    res = invoke("verify", str(snapshot), "--threads", threads, "--quiet")
    assert res.exit_code == 1, res.output
    listed = [line for line in res.stdout.splitlines() if line.startswith("UNREADABLE")]
    assert [next(s for s in shards if s in line) for line in listed] == unreadable, res.stdout
    for line in listed:
        assert f"({name})" in line and not [w for w in WRITERS_WORDS if w in line], line
    assert [line for line in res.stdout.splitlines() if line.startswith("DAMAGED")] == [
        f"DAMAGED  {damaged}: " + line.split(": ", 1)[1]
        for line in res.stdout.splitlines()
        if line.startswith(f"DAMAGED  {damaged}")
    ]
    assert sum(line.startswith("DAMAGED") for line in res.stdout.splitlines()) == 1
    assert f"{snapshot}: 1 of {TASKS} shards damaged, 2 could not be read" in res.stdout
    (line,) = errors(res.stderr)
    assert f"2 of {TASKS} shards of {snapshot} could not be read" in line, line
    assert unreadable[0] in line and f"({name})" in line, line
    assert "delete" not in line and "DAMAGED" not in line, line


@pytest.mark.parametrize("name", PER_SHARD)
def test_the_json_document_lists_the_unreadable_apart_from_the_damaged(
    snapshot: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    shards = shard_paths(snapshot)
    flip_middle_byte(shards[0])
    failing_opens(monkeypatch, {shards[3]: getattr(errno, name)})
    res = invoke("verify", str(snapshot), "--json")
    assert res.exit_code == 1, res.output
    doc = json.loads(res.stdout)
    assert doc["ok"] is False and doc["num_damaged"] == 1 and doc["num_unreadable"] == 1
    assert [d["url"] for d in doc["damaged"]] == [shards[0]]  # (what a script would delete)
    (gone,) = doc["unreadable"]
    assert gone["url"] == shards[3] and gone["unreadable"] is True and gone["cause"] == name
    assert gone["problem"].startswith(f"{shards[3]}: ") and f"({name})" in gone["problem"]
    by_url = {s["url"]: s for s in doc["shards"]}
    assert [u for u, s in by_url.items() if s["unreadable"]] == [shards[3]]
    assert [u for u, s in by_url.items() if s["ok"]] == [shards[i] for i in (1, 2, 4, 5)]
    assert doc["bytes_checked"] == sum(s.bytes for s in snap.open(snapshot).shards) - gone["bytes"]
    (line,) = errors(res.stderr)  # (one shard: its own answer, as head and the loader say it)
    assert line == f"snap: error: {gone['problem']}"


def test_each_unreadable_shard_keeps_its_own_cause(
    snapshot: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shards = shard_paths(snapshot)
    codes = {shards[0]: errno.EIO, shards[2]: errno.EACCES, shards[5]: errno.ESTALE}
    failing_opens(monkeypatch, codes)
    res = invoke("verify", str(snapshot), "--threads", "2")
    assert res.exit_code == 1, res.output
    listed = [line for line in res.stdout.splitlines() if line.startswith("UNREADABLE")]
    assert len(listed) == 3, res.stdout
    for line, (path, code) in zip(listed, codes.items(), strict=True):
        assert line.startswith(f"UNREADABLE  {path}: ") and errno.errorcode[code] in line, line
    assert "DAMAGED" not in res.output and "delete" not in res.output
    assert len(errors(res.stderr)) == 1


@pytest.mark.parametrize("name", [*PER_SHARD, "ENOMEM", "EMFILE"])
def test_every_shard_failing_alike_is_one_line(
    snapshot: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """A storage that fails every shard the same way (a directory this user may not enter,
    a dead disk): one line naming the first shard and the cause, nothing on stdout."""
    shards = shard_paths(snapshot)
    failing_opens(monkeypatch, dict.fromkeys(shards, getattr(errno, name)))
    res = invoke("verify", str(snapshot), "--threads", "3")
    assert res.exit_code == 1 and res.stdout == "", res.output
    (line,) = errors(res.stderr)
    assert f"({name})" in line or "out of memory" in line, line
    assert any(s in line for s in shards) and "DAMAGED" not in line, line


def test_a_storage_failing_shard_after_shard_stops_verify(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More shards than STOP_AFTER, all failing alike: verify stops after STOP_AFTER in a row
    (an unreachable storage retried at each of 1,000 shards took hours), one line."""
    out = tmp_path / "s"
    snap.create(lambda i: [{"x": i}], str(out), inputs=range(12), workers=0, inputs_per_task=1,
                progress=False)  # fmt: skip
    monkeypatch.setattr(verify_mod, "STOP_AFTER", 4)
    shards = shard_paths(out)
    tried = failing_opens(monkeypatch, dict.fromkeys(shards[1:], errno.EIO))
    res = invoke("verify", str(out), "--threads", "1")
    assert res.exit_code == 1 and res.stdout == "", res.output
    (line,) = errors(res.stderr)
    assert line.startswith(f"snap: error: {shards[1]}: Input/output error (EIO); "), line
    stopped = re.search(r"the 3 shards checked next failed alike: verify stopped, (\d+) of 12 "
                        "shards not checked", line)  # fmt: skip
    # (at most 7: the 4 and the first are checked; how many more the pool's thread checked
    # meanwhile, each failing at once, is a matter of timing)
    assert stopped is not None and int(stopped[1]) <= 7, line
    read = sum(1 for n in tried().values() if n)
    # none started after the stop: the unchecked are unread, but for the one the thread ran
    assert read >= 4 and read + int(stopped[1]) <= 12, tried()


@pytest.mark.parametrize("name", ["ENOMEM", "EMFILE", "ENFILE"])
def test_a_shortage_of_the_process_stops_verify_at_once(
    snapshot: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """Out of memory or of open files is the process's, not the shard's: one line, at once,
    with the process's advice (every other shard would fail alike, or pass by luck)."""
    shards = shard_paths(snapshot)
    tried = failing_opens(monkeypatch, {shards[0]: getattr(errno, name)})
    res = invoke("verify", str(snapshot), "--threads", "1")
    assert res.exit_code == 1 and res.stdout == "", res.output
    (line,) = errors(res.stderr)
    assert shards[0] in line and "DAMAGED" not in line, line
    assert ("memory" if name == "ENOMEM" else "open files") in line, line
    # (out of descriptors, the open is made once more after a garbage collection: limits.py)
    assert tried()[shards[0]] == (1 if name == "ENOMEM" else 2)


def test_quiet_and_text_say_the_same_and_the_library_reports(
    snapshot: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shards = shard_paths(snapshot)
    failing_opens(monkeypatch, {shards[1]: errno.EIO, shards[3]: errno.EIO})
    quiet, loud = (invoke("verify", str(snapshot), *extra) for extra in (["--quiet"], []))
    assert quiet.exit_code == loud.exit_code == 1
    assert errors(quiet.stderr) == errors(loud.stderr) and len(errors(quiet.stderr)) == 1
    strip = [line for line in quiet.stdout.splitlines() if " read in " not in line]
    assert strip == [line for line in loud.stdout.splitlines() if " read in " not in line]
    report = verify_mod.verify(snap.open(snapshot), threads=2)
    assert not report.ok and report.damaged == []
    assert [s.url for s in report.unreadable] == [shards[1], shards[3]]
    assert {s.cause for s in report.unreadable} == {"EIO"}


@pytest.mark.parametrize("name", PER_SHARD)
def test_a_shard_file_that_cannot_be_read_is_one_line(
    snapshot: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """A shard given alone (or a snapshot of one shard): its own answer, as before."""
    shard = shard_paths(snapshot)[2]
    failing_opens(monkeypatch, {shard: getattr(errno, name)})
    res = invoke("verify", shard)
    assert res.exit_code == 1 and res.stdout == "", res.output
    (line,) = errors(res.stderr)
    assert line.startswith(f"snap: error: {shard}: ") and f"({name})" in line, line
    assert "failed alike" not in line, line
