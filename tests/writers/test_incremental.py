"""Incremental snapshots: a create over changed inputs computes only the tasks whose inputs
changed, makes a new version, and readers of the old one finish their epoch."""

from __future__ import annotations

import json
import logging
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import snapshot_cli as snap
from snapshot_cli.writers import gc as gc_mod
from tests.conftest import REPO, snap_subprocess

PIPE = """
import os, signal
import numpy as np

def preprocess(path, *, calls=None):
    name = os.path.basename(path)
    if calls:
        with open(calls, "a") as f:
            f.write(name + "\\n")
    die_on = os.environ.get("SNAP_TEST_DIE_ON")  # not a param: it must not change the snapshot
    if die_on and name == die_on and not os.path.exists(die_on_marker(path)):
        open(die_on_marker(path), "w").close()
        os.kill(os.getpid(), signal.SIGKILL)  # a crash in the middle of the create
    with open(path) as f:
        i = int(f.read())
    for k in range(4):
        yield {"i": np.int64(i * 10 + k), "x": np.full(16, i % 7, np.float32)}

def die_on_marker(path):
    return os.path.join(os.path.dirname(os.path.dirname(path)), "died")
"""


class Tree:
    """A directory of numbered input files, a pipeline, and snapshots made from them."""

    def __init__(self, root: Path, n: int) -> None:
        self.root = root
        (root / "in").mkdir(parents=True)
        self.pipe = root / "pipe.py"
        self.pipe.write_text(PIPE)
        self.calls = root / "calls"
        for i in range(n):
            self.write(i)

    def write(self, i: int, value: int | None = None) -> None:
        (self.root / "in" / f"in-{i:05d}.txt").write_text(str(i if value is None else value))

    def remove(self, i: int) -> None:
        (self.root / "in" / f"in-{i:05d}.txt").unlink()

    def create(self, out: str = "s", **kw: object) -> snap.CreateInfo:
        params = {"calls": str(self.calls)}
        return snap.create(f"{self.pipe}:preprocess", str(self.root / out),
                           inputs=str(self.root / "in" / "*.txt"), params=params,
                           workers=0, **kw)  # fmt: skip

    def take_calls(self) -> list[str]:
        text = self.calls.read_text() if self.calls.exists() else ""
        self.calls.unlink(missing_ok=True)
        return sorted(text.split())


def content(path: str, version: int | None = None) -> list[list[int]]:
    """Each shard's records (in order): what a from-scratch create must reproduce."""
    s = snap.open(path, version=version)
    return [s.read_shard(i).column("i").to_pylist() for i in range(len(s.shards))]


@pytest.mark.parametrize("where", ["start", "middle", "end"])
@pytest.mark.parametrize("edit", ["add", "remove", "modify"])
def test_only_the_tasks_of_changed_inputs_run(tmp_path: Path, where: str, edit: str) -> None:
    tree = Tree(tmp_path, 400)
    first = tree.create()
    assert first.version == 1 and len(tree.take_calls()) == 400
    at = {"start": 0, "middle": 200, "end": 399}[where]
    if edit == "add":
        for k in range(3):  # three new inputs sorted next to `at`
            (tmp_path / "in" / f"in-{at:05d}-{k}.txt").write_text(str(1000 + k))
    elif edit == "remove":
        tree.remove(at)
    else:
        tree.write(at, 5000 + at)
    info = tree.create()
    ran = tree.take_calls()
    assert info.version == 2 and not info.reused
    changed = {"add": (3, 0, 0), "remove": (0, 1, 0), "modify": (0, 0, 1)}[edit]
    assert (info.inputs_added, info.inputs_removed, info.inputs_changed) == changed
    computed = info.tasks - info.tasks_reused
    # a deletion rarely changes three tasks: the boundaries within w of it can move (in a
    # simulation of 3,000 deletions over 400 inputs, 8 changed three; see chunking.py)
    low, high = {"add": (1, 4), "remove": (0, 3), "modify": (1, 2)}[edit]
    assert low <= computed <= high, computed
    # only the inputs of those tasks were read: a task holds ~16 inputs here (400 / 32)
    assert len(ran) <= 2 * 16 * 8 and len(ran) < 100, len(ran)
    if edit != "remove":
        assert ran, "the changed input was not computed"
    # a create from scratch over the same inputs (same targets) gives the same shards
    scratch = tree.create("scratch")
    assert scratch.tasks == info.tasks
    assert content(str(tmp_path / "scratch")) == content(str(tmp_path / "s"))


def test_nothing_changed_is_up_to_date_and_a_new_file_costs_one_task(tmp_path: Path) -> None:
    tree = Tree(tmp_path, 40)
    tree.create()
    tree.take_calls()
    assert tree.create().reused and tree.take_calls() == []
    tree.write(40)  # a new last file
    info = tree.create()
    assert info.inputs_added == 1 and info.tasks - info.tasks_reused <= 2
    assert "in-00040.txt" in tree.take_calls()


def test_a_lost_task_table_is_said_only_where_tasks_are_planned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Without its task table, an up-to-date create reads its (touched) inputs again and is
    up to date: it said "every task is computed again" and computed none. A grow says it,
    and that every input counts as added against that version."""
    tree = Tree(tmp_path, 4)
    tree.create()
    tree.take_calls()
    for f in (tmp_path / "in").iterdir():  # new times, the same bytes: read to compare
        os.utime(f, (1e9, 1e9))
    (tmp_path / "s" / "_versions" / "v00000001.tasks.json").unlink()
    with caplog.at_level(logging.WARNING, logger="snapshot_cli"):
        assert tree.create().reused and tree.take_calls() == []
    assert "task table" not in caplog.text, caplog.text
    tree.write(4)
    with caplog.at_level(logging.WARNING, logger="snapshot_cli"):
        info = tree.create()
    assert info.version == 2 and len(tree.take_calls()) == 5
    assert caplog.text.count("cannot use the task table of version 1") == 1, caplog.text
    assert "every input counts as added against it" in caplog.text


def test_dry_run_says_what_it_would_do_and_does_nothing(tmp_path: Path) -> None:
    tree = Tree(tmp_path, 30)
    tree.create()
    tree.take_calls()
    tree.write(3, 333)
    tree.remove(7)
    res = snap_subprocess("create", f"{tree.pipe}:preprocess", str(tmp_path / "s"), "--input",
                          str(tmp_path / "in" / "*.txt"), "--param", f"calls={tree.calls}",
                          "--workers", "0", "--dry-run", "--json")  # fmt: skip
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["dry_run"] and doc["version"] == 2
    assert (doc["inputs_added"], doc["inputs_removed"], doc["inputs_changed"]) == (0, 1, 1)
    assert doc["tasks"] - doc["tasks_reused"] in (1, 2, 3)
    assert "would reuse" in res.stderr and "would compute" in res.stderr  # the plan, said
    assert "reusing" not in res.stderr and "computing" not in res.stderr  # (as if it did)
    assert tree.take_calls() == [] and snap.open(str(tmp_path / "s")).version == 1
    text = snap_subprocess("create", f"{tree.pipe}:preprocess", str(tmp_path / "s"), "--input",
                           str(tmp_path / "in" / "*.txt"), "--param", f"calls={tree.calls}",
                           "--workers", "0", "--dry-run")  # fmt: skip
    assert "would become version 2" in text.stdout and "nothing done" in text.stdout


def test_a_dry_run_of_an_up_to_date_snapshot_says_it_is_one(tmp_path: Path) -> None:
    """`--dry-run --json` on an up-to-date snapshot printed `"dry_run": false`."""
    tree = Tree(tmp_path, 5)
    tree.create()
    res = snap_subprocess("create", f"{tree.pipe}:preprocess", str(tmp_path / "s"), "--input",
                          str(tmp_path / "in" / "*.txt"), "--param", f"calls={tree.calls}",
                          "--workers", "0", "--dry-run", "--json")  # fmt: skip
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert (doc["dry_run"], doc["reused"], doc["version"]) == (True, True, 1), doc
    text = snap_subprocess("create", f"{tree.pipe}:preprocess", str(tmp_path / "s"), "--input",
                           str(tmp_path / "in" / "*.txt"), "--param", f"calls={tree.calls}",
                           "--workers", "0", "--dry-run")  # fmt: skip
    # (it said "would become version 1: 0 of 0 tasks to compute, 0 reused")
    said = f"dry run: {tmp_path / 's'} is up to date (version 1): nothing would be computed"
    assert text.stdout.startswith(said), text.stdout
    res = snap_subprocess("create", f"{tree.pipe}:preprocess", str(tmp_path / "s"), "--input",
                          str(tmp_path / "in" / "*.txt"), "--param", f"calls={tree.calls}",
                          "--workers", "0", "--compression", "lz4")  # fmt: skip
    assert "compressed with zstd level 1, not lz4;" in res.stderr, res.stderr  # (not dicts)
    assert "snap: note: the existing snapshot is compressed" in res.stderr  # (not "warning:")


def test_the_plan_said_before_work_compares_only_with_a_version_that_exists(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tree = Tree(tmp_path, 6)
    with caplog.at_level(logging.INFO, logger="snapshot_cli"):
        tree.create()
    (first,) = [r.getMessage() for r in caplog.records if "computing" in r.getMessage()]
    assert first.endswith("version 1: computing 6 tasks over 6 inputs (6 B)"), first
    caplog.clear()
    tree.write(2, 22)
    with caplog.at_level(logging.INFO, logger="snapshot_cli"):
        tree.create()
    (second,) = [r.getMessage() for r in caplog.records if "computing" in r.getMessage()]
    assert (
        "version 2: reusing 5 of 6 tasks" in second
        and "against version 1: 0 inputs added, 0 removed, 1 changed" in second
        and "computing 1 task over 1 input (" in second  # (not "1 tasks over 1 inputs")
    ), second


def test_a_code_change_still_needs_overwrite_and_overwrite_keeps_the_old_version(
    tmp_path: Path,
) -> None:
    tree = Tree(tmp_path, 20)
    tree.create()
    tree.pipe.write_text(PIPE + "\n# an edit\n")
    tree.write(2, 22)
    with pytest.raises(snap.SnapshotExistsError, match="different pipeline code.*--overwrite"):
        tree.create()
    info = tree.create(overwrite=True)
    assert info.version == 2 and info.tasks_reused == 0 and info.inputs_changed == 1
    old = snap.open(str(tmp_path / "s"), version=1)
    assert sorted(int(i) for b in old.loader(8) for i in b["i"]) == sorted(
        i * 10 + k for i in range(20) for k in range(4)
    )  # the replaced version's shards are kept for its readers


def test_a_reader_of_the_old_version_finishes_its_epoch(tmp_path: Path) -> None:
    """A loader opened on version 1 is in the middle of an epoch when version 2 is committed
    and snap gc runs (default retention): it delivers every record of version 1."""
    tree = Tree(tmp_path, 64)
    tree.create(shard_size="2KiB")
    loader = snap.open(str(tmp_path / "s")).loader(16, shuffle_buffer=32, prefetch=1,
                                                   num_parallel_reads=1)  # fmt: skip
    it = iter(loader)
    seen = [int(i) for _ in range(3) for i in next(it)["i"]]
    for i in range(0, 64, 2):
        tree.write(i, 7000 + i)  # half the inputs change: most shards are replaced
    info = tree.create(shard_size="2KiB")
    assert info.version == 2
    report = gc_mod.gc(str(tmp_path / "s"))
    assert not [g for g in report.garbage if g.kind == "shard"]  # within the retention
    seen += [int(i) for b in it for i in b["i"]]
    assert sorted(seen) == sorted(i * 10 + k for i in range(64) for k in range(4))


def test_gc_after_the_retention_removes_exactly_the_unreferenced_shards(tmp_path: Path) -> None:
    tree = Tree(tmp_path, 64)
    tree.create(shard_size="2KiB")
    v1 = {s.path for s in snap.open(str(tmp_path / "s")).shards}
    for i in range(0, 64, 3):
        tree.write(i, 9000 + i)
    tree.create(shard_size="2KiB")
    v2 = {s.path for s in snap.open(str(tmp_path / "s")).shards}
    shards = tmp_path / "s" / "shards"
    assert {f"shards/{p.name}" for p in shards.iterdir()} == v1 | v2
    dry = gc_mod.gc(str(tmp_path / "s"), dry_run=True, retention="1h")
    assert [g for g in dry.garbage if g.kind == "shard"] == []
    report = gc_mod.gc(str(tmp_path / "s"), retention=0)
    gone = {g.path for g in report.garbage if g.kind == "shard"}
    assert gone == v1 - v2 and gone  # exactly those only version 1 had
    assert {f"shards/{p.name}" for p in shards.iterdir()} == v2
    assert {g.path for g in report.garbage if g.kind == "version"} == {
        "_versions/v00000001.json", "_versions/v00000001.tasks.json"
    }  # fmt: skip
    with pytest.raises(snap.ManifestError, match="keeps no version 1: it keeps \\[2\\]"):
        snap.open(str(tmp_path / "s"), version=1)
    for never in (3, 0, -1):  # never made: not gc's doing ("keeps no version 3 ... snap gc")
        with pytest.raises(snap.ManifestError, match=f"has no version {never}: its versions "
                           "count from 1 to its latest, 2"):  # fmt: skip
            snap.open(str(tmp_path / "s"), version=never)
    assert snap.open(str(tmp_path / "s"), version=np.int64(2)).num_records == 64 * 4
    for bad in ("2", 2.0, True):  # an argument, not the snapshot, is wrong
        with pytest.raises(snap.OptionError, match=r"version must be an integer \(1, 2"):
            snap.open(str(tmp_path / "s"), version=bad)
    assert snap.open(str(tmp_path / "s")).num_records == 64 * 4
    res = snap_subprocess("verify", str(tmp_path / "s"))
    assert res.returncode == 0, res.stdout


def test_inspect_versions(tmp_path: Path) -> None:
    tree = Tree(tmp_path, 20)
    tree.create()
    tree.write(20)
    tree.create()
    res = snap_subprocess("inspect", str(tmp_path / "s"), "--versions", "--json")
    assert res.returncode == 0, res.stderr
    versions = json.loads(res.stdout)["versions"]
    assert [v["version"] for v in versions] == [1, 2] and versions[1]["current"]
    assert versions[1]["changes"]["inputs_added"] == 1 and versions[1]["records"] == 84
    text = snap_subprocess("inspect", str(tmp_path / "s"), "--versions").stdout
    assert "v2" in text and "(current)" in text and "+1 -0 ~0" in text


@pytest.mark.slow
def test_kill_9_in_an_incremental_create_resumes(tmp_path: Path) -> None:
    """The pipeline kills its process (SIGKILL) on a changed input, in the middle of an
    incremental create with worker processes; the same command again finishes it, computing
    only what was left, and the result is what a create from scratch gives."""
    tree = Tree(tmp_path, 120)
    tree.create()
    tree.take_calls()
    for i in (5, 60, 61, 119):
        tree.write(i, 3000 + i)
    cmd = [sys.executable, "-m", "snapshot_cli", "create", f"{tree.pipe}:preprocess",
           str(tmp_path / "s"), "--input", str(tmp_path / "in" / "*.txt"), "--param",
           f"calls={tree.calls}", "--workers", "2"]  # fmt: skip
    env = {**os.environ, "SNAP_TEST_DIE_ON": "in-00061.txt"}
    killed = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    assert killed.returncode != 0 and (tmp_path / "died").exists()
    assert snap.open(str(tmp_path / "s")).version == 1  # nothing half-made is visible
    again = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    assert again.returncode == 0, again.stderr
    s = snap.open(str(tmp_path / "s"))
    assert s.version == 2
    ran = tree.take_calls()
    assert len(ran) < 120 and "in-00061.txt" in ran
    expected = sorted((3000 + i if i in (5, 60, 61, 119) else i) * 10 + k
                      for i in range(120) for k in range(4))  # fmt: skip
    assert sorted(int(i) for b in s.loader(32) for i in b["i"]) == expected


@pytest.mark.parametrize("damage", ["missing", "changed bytes", "not json"])
def test_a_damaged_task_table_means_computing_every_task(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The last version's task table gone or damaged (its crc32c no longer matches): the
    next create over changed inputs says once which file it cannot use, computes every task,
    and commits records equal to a from-scratch create."""
    tree = Tree(tmp_path, 60)
    first = tree.create()
    tree.take_calls()
    table = tmp_path / "s" / snap.open(str(tmp_path / "s")).manifest.history.tasks
    if damage == "missing":
        table.unlink()
    elif damage == "changed bytes":
        table.write_bytes(table.read_bytes().replace(b"in-00001", b"in-00002", 1))
    else:
        table.write_bytes(b"\xff not json")
    tree.write(60)
    with caplog.at_level("WARNING", logger="snapshot_cli"):
        info = tree.create()
    warned = [r.getMessage() for r in caplog.records if "task table" in r.getMessage()]
    assert len(warned) == 1 and "every task is computed again" in warned[0], warned
    assert info.version == first.version + 1 and info.tasks_reused == 0
    assert len(tree.take_calls()) == 61
    assert tree.create("scratch").tasks == info.tasks
    assert content(str(tmp_path / "scratch")) == content(str(tmp_path / "s"))


@pytest.mark.parametrize("damage", ["deleted", "cut short", "every shard deleted"])
def test_a_rerun_computes_again_only_the_tasks_of_lost_shards(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A snapshot whose shards were deleted or cut short was "up to date": the same create
    said "nothing to do" and left it damaged. It now computes those tasks again."""
    tree = Tree(tmp_path, 12)
    tree.create(inputs_per_task=2)
    tree.take_calls()
    whole = content(str(tmp_path / "s"))
    shards = snap.open(tmp_path / "s").shards
    victims = shards if damage == "every shard deleted" else [shards[2]]
    for entry in victims:
        path = tmp_path / "s" / entry.path
        if damage == "cut short":
            path.write_bytes(path.read_bytes()[:-10])
        else:
            path.unlink()
    dry = tree.create(inputs_per_task=2, dry_run=True)
    assert dry.dry_run and dry.tasks - dry.tasks_reused == len(victims)
    caplog.clear()  # (the dry run said it too)
    with caplog.at_level(logging.WARNING, logger="snapshot_cli"):
        info = tree.create(inputs_per_task=2)
    assert not info.reused and info.version == 2 and info.tasks_reused == 6 - len(victims)
    said = f"of version 1 missing or cut short ({victims[0].path}"
    assert said in caplog.text and "computing their tasks again" in caplog.text
    assert caplog.text.count("missing or cut short") == 1  # (asked twice: said once)
    redone = [f"in-{i:05d}.txt" for k in range(6) for i in (2 * k, 2 * k + 1)
              if shards[k] in victims]  # fmt: skip
    assert tree.take_calls() == sorted(redone)
    assert content(str(tmp_path / "s")) == whole
    assert snap.open(tmp_path / "s").version == 2
    assert tree.create(inputs_per_task=2).reused  # and now it is up to date


def made_before_versions(manifest: Path, **changes: object) -> None:
    """``manifest`` as snap wrote it before versions (format 2: no history), ``changes``
    made to it."""
    doc = json.loads(manifest.read_text())
    del doc["history"]
    doc["format_version"] = 2
    manifest.write_text(json.dumps({**doc, **changes}))


def test_a_lost_shard_of_a_snapshot_made_before_versions_says_overwrite(tmp_path: Path) -> None:
    tree = Tree(tmp_path, 4)
    tree.create()
    made_before_versions(tmp_path / "s" / "manifest.json")
    (tmp_path / "s" / snap.open(tmp_path / "s").shards[0].path).unlink()
    with pytest.raises(snap.SnapshotExistsError) as caught:
        tree.create()
    assert "is up to date but 1 shard of it is missing or cut short" in str(caught.value)
    assert "pass --overwrite" in str(caught.value)
    assert tree.create(overwrite=True).num_records == 16


def test_a_grow_keeps_the_snapshots_compression(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A grow with --compression lz4 wrote the new shards in lz4 beside zstd ones, and the
    manifest (so `snap inspect`) said lz4 of them all."""

    def prep(i: int):  # type: ignore[no-untyped-def]
        yield {"i": np.int64(i), "v": np.arange(100, dtype=np.int64)}

    out = str(tmp_path / "s")
    snap.create(prep, out, inputs=[1, 2, 3, 4], workers=0, inputs_per_task=1)
    with caplog.at_level("WARNING", logger="snapshot_cli"):
        info = snap.create(prep, out, inputs=[1, 2, 3, 4, 5], workers=0, inputs_per_task=1,
                           compression="lz4")  # fmt: skip
    assert info.version == 2 and info.tasks_reused == 4
    assert "growing keeps the snapshot's compression, zstd level 1" in caplog.text
    s = snap.open(out)
    assert s.manifest.compression == {"codec": "zstd", "level": 1}
    for entry in s.shards:  # (each file's own buffers: zstd's frames, not lz4's)
        data = Path(out, entry.path).read_bytes()
        assert b"\x28\xb5\x2f\xfd" in data, entry.path
    assert sorted(int(i) for b in s.loader(5) for i in b["i"]) == [1, 2, 3, 4, 5]
    again = snap.create(prep, out, inputs=[1, 2, 3, 4, 5, 6], workers=0, inputs_per_task=1,
                        compression="lz4", overwrite=True)  # fmt: skip
    assert snap.open(out).manifest.compression == {"codec": "lz4", "level": None}
    assert again.tasks_reused == 0


def test_a_snapshot_made_before_versions_of_other_inputs_says_why_overwrite(
    tmp_path: Path,
) -> None:
    """Such a snapshot's inputs cannot be compared (0.1.0 recorded files by size and time):
    the message said "of other inputs" also where nothing had changed."""
    tree = Tree(tmp_path, 4)
    tree.create()
    manifest = tmp_path / "s" / "manifest.json"
    doc = json.loads(manifest.read_text())
    doc["fingerprint_parts"]["inputs"] = "0" * 64  # as 0.1.0 hashed [url, size, mtime]
    doc["pipeline"]["inputs"].pop("stat", None)  # (0.1.0 recorded none)
    made_before_versions(manifest, fingerprint="1" * 64, fingerprint_parts=doc["fingerprint_parts"],
                         pipeline=doc["pipeline"])  # fmt: skip
    with pytest.raises(snap.SnapshotExistsError) as caught:
        tree.create()
    said = str(caught.value)
    assert "before snapshots had versions" in said and "cannot compare" in said, said
    assert "pass --overwrite" in said


def test_a_grow_or_rerun_not_asking_for_a_codec_keeps_the_snapshots_quietly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A nightly grow of an lz4 snapshot without --compression was told every night that
    "zstd level 1 applies to a snapshot made anew"; asking for one still says it."""

    def prep(i: int):  # type: ignore[no-untyped-def]
        yield {"i": np.int64(i)}

    out = str(tmp_path / "s")
    snap.create(prep, out, inputs=[1, 2], workers=0, inputs_per_task=1, compression="lz4")
    with caplog.at_level("WARNING", logger="snapshot_cli"):
        grown = snap.create(prep, out, inputs=[1, 2, 3], workers=0, inputs_per_task=1)
        again = snap.create(prep, out, inputs=[1, 2, 3], workers=0, inputs_per_task=1)
    assert grown.version == 2 and again.reused and "note:" not in caplog.text
    assert snap.open(out).manifest.compression == {"codec": "lz4", "level": None}
    for codec, level in (("zstd", 1), ("none", None)):  # (zstd, no level: the default)
        caplog.clear()
        with caplog.at_level("WARNING", logger="snapshot_cli"):
            snap.create(prep, out, inputs=[1, 2, 3], workers=0, inputs_per_task=1,
                        compression=codec, level=level)  # fmt: skip
        said = "not zstd" if codec == "zstd" else "not none"
        assert "note: the existing snapshot is compressed with lz4" in caplog.text, codec
        assert said in caplog.text


def test_a_grow_given_another_task_size_keeps_the_snapshots_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``--inputs-per-task 16`` on a grow of one added input computed every task again
    without a word (0 of 63 reused); ``--overwrite`` regroups (and, not given one, chooses
    the task size afresh: a snapshot begun with 50 inputs kept 1 input a task for good)."""

    def prep(i: int):  # type: ignore[no-untyped-def]
        yield {"i": np.int64(i)}

    out = str(tmp_path / "s")
    first = snap.create(prep, out, inputs=list(range(8)), workers=0)  # (1 input a task: few)
    assert first.tasks == 8
    with caplog.at_level("WARNING", logger="snapshot_cli"):
        grown = snap.create(prep, out, inputs=list(range(9)), workers=0, inputs_per_task=4)
    assert grown.tasks_reused >= 7 and grown.tasks - grown.tasks_reused <= 2
    assert (
        "growing keeps the snapshot's grouping of inputs into tasks (content-defined" in caplog.text
    )
    assert "inputs_per_task=4 would compute every task again: pass overwrite=True" in caplog.text
    regrouped = snap.create(prep, out, inputs=list(range(9)), workers=0, inputs_per_task=4,
                            overwrite=True)  # fmt: skip
    assert regrouped.tasks == 3 and regrouped.tasks_reused == 0  # (4 + 4 + 1)
    many = list(range(2000))
    snap.create(prep, out, inputs=many, workers=0, inputs_per_task=1, overwrite=True)
    fresh = snap.create(prep, out, inputs=many, workers=0, overwrite=True)
    assert fresh.tasks < 300  # chosen afresh for 2,000 inputs, not 1 a task
    assert sorted(int(b["i"][0]) for b in snap.open(out).loader(1)) == many


def test_a_by_value_code_change_across_python_versions_says_so() -> None:
    """A lambda's fingerprint is its bytecode, which each Python version makes otherwise: a
    snapshot made under another version was "different pipeline code" blaming globals."""
    from snapshot_cli.writers.incremental import said_changed

    older = said_changed(["code"], True, {}, {}, "", "3.9.18")
    assert "made under Python 3.9.18, this is 3." in older and "a def keeps" in older
    same = said_changed(["code"], True, {}, {}, "", platform.python_version())
    assert "made under Python" not in same and "globals" in same
    assert "made under" not in said_changed(["code"], False, {}, {}, "", "3.9.18")  # (a file)
