"""Incremental snapshots met damaged or old: a create killed in the middle, a lost or damaged
task table, lost shards, and snapshots made before versions existed."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

import snapshot_cli as snap
from tests.conftest import REPO
from tests.writers.incremental_tree import Tree, content


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


@pytest.mark.parametrize("damage", ["deleted", "cut short", "longer", "every shard deleted"])
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
        elif damage == "longer":  # (echo junk >> shard: was said to be "cut short")
            path.write_bytes(path.read_bytes() + b"junk\n")
        else:
            path.unlink()
    dry = tree.create(inputs_per_task=2, dry_run=True)
    assert dry.dry_run and dry.tasks - dry.tasks_reused == len(victims)
    caplog.clear()  # (the dry run said it too)
    with caplog.at_level(logging.WARNING, logger="snapshot_cli"):
        info = tree.create(inputs_per_task=2)
    assert not info.reused and info.version == 2 and info.tasks_reused == 6 - len(victims)
    what = (
        "missing, cut short or longer than written"
        if damage == "longer"
        else ("missing or cut short")
    )
    said = f"of version 1 {what} ({victims[0].path}"
    assert said in caplog.text and "computing their tasks again" in caplog.text
    assert caplog.text.count(what) == 1  # (asked twice: said once)
    redone = [f"in-{i:05d}.txt" for k in range(6) for i in (2 * k, 2 * k + 1)
              if shards[k] in victims]  # fmt: skip
    assert tree.take_calls() == sorted(redone)
    assert content(str(tmp_path / "s")) == whole
    assert snap.open(tmp_path / "s").version == 2
    assert tree.create(inputs_per_task=2).reused  # and now it is up to date


def test_a_shard_linked_out_of_the_snapshot_is_computed_again_one_inside_is_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A shard moved to another disk and replaced by a link to it: the create said "up to
    date" while every reader refuses such a link (readers read only inside a snapshot). Up
    to date now means readable: its task is computed again, and said why. A link that stays
    inside the snapshot is read, and kept."""
    tree = Tree(tmp_path, 12)
    tree.create(inputs_per_task=2)
    tree.take_calls()
    whole = content(str(tmp_path / "s"))
    shards = snap.open(tmp_path / "s").shards
    inside, outside = tmp_path / "s" / shards[1].path, tmp_path / "s" / shards[3].path
    (tmp_path / "s" / "kept").mkdir()
    inside.rename(tmp_path / "s" / "kept" / "one.arrow")
    inside.symlink_to(tmp_path / "s" / "kept" / "one.arrow")
    (tmp_path / "elsewhere").mkdir()
    outside.rename(tmp_path / "elsewhere" / "three.arrow")
    outside.symlink_to(tmp_path / "elsewhere" / "three.arrow")
    with caplog.at_level(logging.WARNING, logger="snapshot_cli"):
        info = tree.create(inputs_per_task=2)
    there = tmp_path / "elsewhere" / "three.arrow"
    said = (f"1 shard of version 1 missing, cut short or refused by readers ({shards[3].path} "
            f"is a link out of the snapshot, to {there})")  # fmt: skip
    assert said in caplog.text and "computing their tasks again" in caplog.text
    assert info.version == 2 and info.tasks_reused == 5
    assert tree.take_calls() == ["in-00006.txt", "in-00007.txt"]
    assert content(str(tmp_path / "s")) == whole  # (readable: read through the loader)
    assert tree.create(inputs_per_task=2).reused


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
    assert "pass overwrite=True" in str(caught.value)
    assert tree.create(overwrite=True).num_records == 16


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
    assert "pass overwrite=True" in said


@pytest.mark.parametrize("grow", [False, True])
def test_a_dry_run_counts_what_an_interrupted_run_finished(tmp_path: Path, grow: bool) -> None:
    """After a create that died midway, ``--dry-run`` planned every task as if none were
    done, while the real run then resumed most of them: it now plans the run it would
    resume, and says how many of its tasks are done (first creates and grows alike)."""
    tree = Tree(tmp_path, 24)
    if grow:
        tree.create(inputs_per_task=1)
        for i in range(24, 40):
            tree.write(i)
    cmd = [sys.executable, "-m", "snapshot_cli", "create", f"{tree.pipe}:preprocess",
           str(tmp_path / "s"), "--input", str(tmp_path / "in" / "*.txt"),
           "--inputs-per-task", "1", "--workers", "1", "--json", "--param",
           f"calls={tree.calls}"]  # fmt: skip
    env = {**os.environ, "SNAP_TEST_DIE_ON": "in-00030.txt" if grow else "in-00016.txt"}
    killed = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    assert killed.returncode != 0 and (tmp_path / "died").exists(), killed.stderr
    dry = subprocess.run([*cmd, "--dry-run"], cwd=REPO, capture_output=True, text=True,
                         timeout=300)  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    real = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert real.returncode == 0, real.stderr
    planned, done = json.loads(dry.stdout), json.loads(real.stdout)
    assert planned["dry_run"] and planned["tasks_resumed"] == done["tasks_resumed"] > 0
    assert (planned["tasks"], planned["tasks_reused"]) == (done["tasks"], done["tasks_reused"])
    assert f"would resume run {done['run']}: {done['tasks_resumed']} of" in dry.stderr
