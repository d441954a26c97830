"""gc on directories it must not empty, and the commands on a snapshot someone else edited:
gc removes only files of snap's own names, inside the snapshot, of a directory that is one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import snapshot_cli as snap
from snapshot_cli.cli import cli

SNAP = str(Path(sys.executable).with_name("snap"))


def preprocess(i: int):  # type: ignore[no-untyped-def]
    yield {"x": np.full(4, i, np.int64)}


def made(path: Path, overwrite: int = 0) -> Path:
    for k in range(1 + overwrite):
        snap.create(preprocess, str(path), inputs_from=lambda k=k: list(range(3 + k)),
                    workers=0, overwrite=k > 0)  # fmt: skip
    return path


def gc(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(cli, ["gc", *args])
    return res.exit_code, res.output


def files(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*")}


@pytest.mark.parametrize(
    "others",
    [{"shards/train-000000.tar": "data", "README.md": "hi"},  # a WebDataset folder
     {"_runs/experiment1/results.csv": "loss,1.0"},  # someone's runs
     {"shards/.x.tmp": "a", "_versions/v00000001.json": "{}", ".y.tmp": "b"}],
)  # fmt: skip
def test_gc_refuses_a_directory_that_is_no_snapshot(tmp_path: Path, others: dict[str, str]) -> None:
    """gc removed every file under shards/ or _runs/ of a folder with no manifest.json."""
    for rel, text in others.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    before = files(tmp_path)
    for dry in ([], ["--dry-run"]):
        code, out = gc(str(tmp_path), *dry)
        assert code == 1 and "is not a snapshot" in out and "gc removes nothing" in out, out
        assert files(tmp_path) == before  # (not even a lease written)


@pytest.mark.parametrize("linked", ["shards", "_runs", "_versions"])
def test_gc_removes_nothing_through_a_linked_directory(tmp_path: Path, linked: str) -> None:
    """gc deleted a user's files in the directory a snapshot's _runs (shards, _versions)
    linked to."""
    s = made(tmp_path / "s", overwrite=1)
    mine = tmp_path / "mine"
    os.rename(s / linked, mine)
    (mine / "notes.txt").write_text("important")
    (mine / "0123abcd").mkdir()  # (a name snap could give a run)
    (mine / "0123abcd" / "todo.txt").write_text("important")
    (s / linked).symlink_to(mine)
    before = files(mine)
    code, out = gc(str(s), "--retention", "0")
    assert code == 1 and f"{s / linked} is a link to {mine}" in out, out
    assert files(mine) == before


def test_gc_leaves_files_of_names_snap_never_gives(tmp_path: Path) -> None:
    s = made(tmp_path / "s")
    own = files(s)
    strays = ["shards/photo.jpg", "shards/notes", "_runs/notes.txt", "_runs/My Run", ".env.tmp"]
    for rel in strays:
        (s / rel).write_text("mine")
    (s / "shards" / "0123abcdef-00007-0000.arrow").write_text("a stopped run's shard")
    code, out = gc(str(s))
    assert code == 0, out
    assert "0123abcdef-00007-0000.arrow" in out  # snap's own garbage still goes
    leases = {f for f in files(s) if f.startswith("_runs/lease-")}  # (gc's own, the next)
    assert files(s) - leases == {f for f in own if not f.startswith("_runs/lease-")} | set(strays)


def test_gc_stops_where_the_manifest_and_its_copy_disagree(tmp_path: Path) -> None:
    """A manifest.json edited to drop a shard: gc removed the shard its copy in _versions/
    still listed."""
    s = made(tmp_path / "s")
    doc = json.loads((s / "manifest.json").read_text())
    dropped = doc["shards"].pop()["path"]
    for key in doc["totals"]:  # (as one would who knew the format: the totals agree)
        doc["totals"][key] = (
            len(doc["shards"]) if key == "shards" else sum(e[key] for e in doc["shards"])
        )
    (s / "manifest.json").write_text(json.dumps(doc))
    code, out = gc(str(s), "--retention", "0")
    assert code == 1 and "list other shards" in out and "gc removes nothing" in out, out
    assert (s / dropped).exists()


def test_gc_stops_where_the_manifest_was_edited_otherwise(tmp_path: Path) -> None:
    """A manifest.json edited in a shard's record count only (its shards the copy's):
    ``snap verify`` said "snap gc removes nothing until they agree", and gc went on,
    removing an older version's files (a probe). Any edit is refused, as verify says."""
    s = made(tmp_path / "s")
    before = files(s)
    doc = json.loads((s / "manifest.json").read_text())
    doc["shards"][0]["records"] += 1
    doc["shards"][0]["batch_rows"] = [[doc["shards"][0]["records"], 1]]
    doc["totals"]["records"] += 1  # (self-consistent: read as any manifest is)
    (s / "manifest.json").write_text(json.dumps(doc))
    code, out = gc(str(s), "--retention", "0")
    assert code == 1 and " differ (one was changed after the commit)" in out, out
    assert "gc removes nothing until they agree" in out
    leases = {f for f in files(s) if f.startswith("_runs/lease-")}
    assert files(s) - leases == {f for f in before if not f.startswith("_runs/lease-")}


def run_snap(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SNAP, *args], capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize("where", ["_versions/v00000001.json", "_runs/lease-00000000.json",
                                   "run.json"])  # fmt: skip
def test_a_fifo_among_a_snapshots_files_is_not_opened(tmp_path: Path, where: str) -> None:
    """A FIFO there hung `snap inspect` and `snap gc` for good (opening it waits for a
    writer)."""
    s = made(tmp_path / "s", overwrite=1)
    if where == "run.json":  # (an unfinished snapshot's run state)
        (s / "manifest.json").unlink()
        shutil.rmtree(s / "_versions")  # (kept, they made it a lost manifest, not unfinished)
        run = s / "_runs" / "0123abcdef"
        run.mkdir(parents=True)
        where = "_runs/0123abcdef/run.json"
    (s / where).unlink(missing_ok=True)
    os.mkfifo(s / where)
    # (gc last: it may leave nothing, where any command after it says "not a snapshot")
    for args in (["inspect", str(s)], ["inspect", str(s), "--versions"],
                 ["gc", str(s), "--dry-run"], ["gc", str(s)]):  # fmt: skip
        res = run_snap(*args)  # (timeout: the hang)
        assert "Traceback" not in res.stderr, (args, res.stderr)
        if res.returncode:
            assert "not a regular file" in res.stderr, (args, res.stderr)


@pytest.mark.parametrize(
    "state",
    [{"created": "yesterday"}, {"plan": 5}, {"created": 1e308}, {"plan": [[0, "a"]]},
     {"plan": [[3, 1]]}, {"created": None}],
)  # fmt: skip
def test_a_hand_edited_run_state_is_skipped_as_unreadable(
    tmp_path: Path, state: dict[str, object]
) -> None:
    """`snap inspect` of an unfinished snapshot: "unexpected TypeError ... a bug in snap"."""
    s = tmp_path / "s"
    run = s / "_runs" / "abc123"
    run.mkdir(parents=True)
    doc = {"run": "abc123", "fingerprint": "00", "pipeline": "p.py:f", "created": 1.0,
           "plan": [[0, 1]], **state}  # fmt: skip
    (run / "run.json").write_text(json.dumps(doc))
    (s / "_runs" / "lease-00000000.json").write_text("{}")
    res = CliRunner().invoke(cli, ["inspect", str(s)])
    assert "bug in snap" not in res.output and not isinstance(res.exception, TypeError)
    assert res.exit_code == 0 and "unfinished" in res.output, res.output
    assert "abc123" not in res.output  # (skipped)


CONTROLS = [chr(c) for c in (*range(0x20), *range(0x7F, 0xA0)) if c not in (9, 10)]


@pytest.mark.parametrize("key", ["spec", "created", "host"])
def test_no_control_character_of_a_snapshots_metadata_reaches_the_terminal(
    tmp_path: Path, key: str
) -> None:
    """A manifest's pipeline name (or its date, a lease's host) carrying "\\x1b]0;pwned\\x07"
    (OSC: the terminal's title; OSC 52 writes the clipboard) was printed as it was."""
    s = made(tmp_path / "s")
    evil = "x" + "".join(CONTROLS[1:]) + "\x1b]52;c;ZWNobyBoaQ==\x07y"  # (a NUL is refused)
    if key == "host":  # (an unfinished snapshot's writer)
        (s / "manifest.json").unlink()
        shutil.rmtree(s / "_versions")  # (kept, they made it a lost manifest, not unfinished)
        lease = s / "_runs" / "lease-00000009.json"
        lease.write_text(json.dumps({"host": evil, "pid": 1, "heartbeat": 0.0}))
        args = ["inspect", str(s)]
    else:
        doc = json.loads((s / "manifest.json").read_text())
        if key == "spec":
            doc["pipeline"]["spec"] = evil
        else:
            doc["created"] = evil
        (s / "manifest.json").write_text(json.dumps(doc))
        args = ["inspect", str(s)]
    res = run_snap(*args)
    shown = res.stdout + res.stderr
    assert not set(shown) & set(CONTROLS), repr(shown)
    assert "\\x1b]52;c;" in shown or key == "created", shown  # (shown escaped, not dropped)


def test_verify_fast_refuses_what_the_loader_refuses(tmp_path: Path) -> None:
    """A shard linked to a file outside the snapshot: `snap verify --fast` said ok, the loader
    and head refused it."""
    s = made(tmp_path / "s")
    entry = snap.open(str(s)).shards[0]
    outside = tmp_path / "elsewhere.arrow"
    os.rename(s / entry.path, outside)
    (s / entry.path).symlink_to(outside)
    for fast in ([], ["--fast"]):
        res = CliRunner().invoke(cli, ["verify", str(s), *fast])
        assert res.exit_code == 1 and "outside the snapshot" in res.output, (fast, res.output)


def test_a_shard_that_is_a_link_loop_is_named_as_one(tmp_path: Path) -> None:
    """head and bench said "ELOOP; the storage failed, not necessarily the snapshot: check
    the disk", verify stopped on one error instead of listing the shard."""
    s = made(tmp_path / "s")
    entry = snap.open(str(s)).shards[0]
    (s / entry.path).unlink()
    (s / entry.path).symlink_to(s / entry.path)
    for args in (["head", str(s)], ["verify", str(s)], ["verify", str(s), "--fast"],
                 ["bench", str(s), "--epochs", "1"]):  # fmt: skip
        res = CliRunner().invoke(cli, args)
        assert res.exit_code == 1 and "a link in a loop" in res.output, (args, res.output)
        assert "the storage failed" not in res.output


@pytest.mark.parametrize("where", ["_runs/0123456789abcdef", "_versions", "."])
def test_gc_keeps_a_listed_shard_wherever_in_the_snapshot_it_is(tmp_path: Path, where: str) -> None:
    """docs/format.md §3.10: a manifest may list a shard anywhere inside the snapshot (another
    tool's writer). One in a directory of a run's name was removed with that "dead run", one
    named like a temporary or a version's file as such: the current version damaged."""
    s = made(tmp_path / "s")
    first = snap.open(str(s)).shards[0].path
    moved = f"{where}/v00000009.json" if where == "_versions" else f"{where}/part.arrow"
    if where == ".":  # (the name of a manifest's temporary file)
        moved = ".manifest.json.0123456789abcdef0123456789abcdef.tmp"
    (s / moved).parent.mkdir(parents=True, exist_ok=True)
    os.replace(s / first, s / moved)
    for name in ("manifest.json", "_versions/v00000001.json"):  # (the two agree: gc checks)
        doc = json.loads((s / name).read_text())
        doc["shards"][0]["path"] = moved
        (s / name).write_text(json.dumps(doc, indent=1))
    code, said = gc(str(s), "--retention", "0")
    assert code == 0, said
    assert (s / moved).exists(), said
    assert CliRunner().invoke(cli, ["verify", str(s)]).exit_code == 0
    assert sum(len(b["x"]) for b in snap.open(str(s)).loader(2)) == 3
