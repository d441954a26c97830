"""Incremental snapshots: a create over changed inputs computes only the tasks whose inputs
changed, makes a new version, and readers of the old one finish their epoch."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np
import pytest

import snapshot_cli as snap
from snapshot_cli.writers import gc as gc_mod
from tests.conftest import snap_subprocess
from tests.writers.incremental_tree import PIPE, Tree, content


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
    with pytest.raises(snap.SnapshotExistsError, match="different pipeline code.*overwrite=True"):
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
    assert " 84 records " in text and " records " in text.splitlines()[1]


def test_versions_of_one_record_say_record(tmp_path: Path) -> None:
    """It said "1 records"."""
    out = str(tmp_path / "s")
    snap.create(lambda i: [{"i": i}], out, inputs=[0], workers=0)
    text = snap_subprocess("inspect", out, "--versions").stdout
    assert " 1 record  " in text and "1 records" not in text, text
