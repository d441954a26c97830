"""snap verify: a fresh snapshot checks out; a flipped byte, a cut or deleted shard is named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import numpy as np
import pytest

import snapshot_cli as snap
from tests.commands.conftest import (
    NUM_RECORDS,
    TASKS,
    make_snapshot,
    run,
    run_json,
    written_order,
)
from tests.conftest import snap_subprocess


def shard_files(path: Path) -> list[Path]:
    return [path / s.path for s in snap.open(path).shards]


def flip_middle_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def check_only_victim_named(text: str, shards: list[Path], victim: Path) -> None:
    assert victim.name in text
    others = [s.name for s in shards if s != victim and s.name in text]
    assert others == [], f"intact shards named as damaged: {others}"


def test_verify_fresh_snapshot_is_ok(snapshot: Path) -> None:
    code, stdout, stderr = run("verify", str(snapshot))
    assert code == 0, stderr
    assert f"{snapshot}: ok ({TASKS} shards; checks: {TASKS} full;" in stdout
    assert "DAMAGED" not in stdout
    doc = run_json("verify", str(snapshot))
    m = snap.open(snapshot).manifest
    assert doc["ok"] is True and doc["damaged"] == [] and doc["num_damaged"] == 0
    assert doc["checks"] == {"full": TASKS} and doc["bytes_checked"] == m.bytes
    assert [s["path"] for s in doc["shards"]] == [s.path for s in m.shards]
    assert all(s["ok"] for s in doc["shards"])


def test_verify_names_exactly_the_shard_with_a_flipped_byte(snapshot: Path) -> None:
    shards = shard_files(snapshot)
    assert len(shards) >= 4
    victim = shards[len(shards) // 2]
    flip_middle_byte(victim)

    code, stdout, stderr = run("verify", str(snapshot))
    assert code == 1, stderr
    damaged = [line for line in stdout.splitlines() if line.startswith("DAMAGED")]
    assert len(damaged) == 1 and f"{victim}: crc32c" in damaged[0]
    check_only_victim_named(stdout, shards, victim)
    assert f"1 of {len(shards)} shards damaged" in stdout
    # the same size: a create of the same snapshot cannot tell; deleted, its task is redone
    assert stdout.splitlines()[-1].startswith("  delete the damaged shards and run the same "
                                              "snap create again")  # fmt: skip

    proc = snap_subprocess("verify", str(snapshot), "--json")  # also as a real process
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["ok"] is False and doc["num_damaged"] == 1
    [bad] = doc["damaged"]
    assert bad["url"] == str(victim) and bad["path"] == str(victim.relative_to(snapshot))
    assert bad["problem"].startswith("crc32c ") and bad["lost"] is False and bad["ok"] is False
    assert [s["path"] for s in doc["shards"] if not s["ok"]] == [bad["path"]]

    # --fast compares sizes only here (local files report no crc32c), and says so.
    code, stdout, _ = run("verify", str(snapshot), "--fast")
    assert code == 0 and "compared sizes only" in stdout
    notes = run_json("verify", str(snapshot), "--fast")["notes"]  # (a script sees it too)
    assert [n for n in notes if "compared sizes only" in n] == [notes[0]], notes

    # The loader refuses the damaged shard, by name, instead of returning its records.
    with (
        pytest.raises(snap.CorruptShardError) as err,
        snap.open(snapshot).loader(batch_size=4) as loader,
    ):
        for _ in loader:
            pass
    assert victim.name in str(err.value)
    check_only_victim_named(str(err.value), shards, victim)

    victim.unlink()  # as verify says: then the same create computes its task again
    make_snapshot(snapshot)
    assert run("verify", str(snapshot))[0] == 0 and snap.open(snapshot).version == 2
    assert len(written_order(snapshot)) == NUM_RECORDS


@pytest.mark.parametrize("fast", [False, True])
def test_verify_reports_a_truncated_shard_with_its_size(snapshot: Path, fast: bool) -> None:
    shards = shard_files(snapshot)
    victim = shards[1]
    size = victim.stat().st_size
    victim.write_bytes(victim.read_bytes()[: size * 2 // 3])
    args = ("verify", str(snapshot), *(["--fast"] if fast else []))
    code, stdout, _ = run(*args)
    assert code == 1
    assert f"{victim}: has {size * 2 // 3} bytes, the manifest says {size}" in stdout
    check_only_victim_named(stdout, shards, victim)
    doc = run_json(*args, code=1)
    assert [(d["path"], d["lost"]) for d in doc["damaged"]] == [
        (str(victim.relative_to(snapshot)), True)
    ]
    assert doc["checks"] == ({"size": len(shards)} if fast else {"full": len(shards)})
    # (its checksum is not read: a cut-short shard was counted as read in full)
    others = sum(s.stat().st_size for s in shards if s != victim)
    assert doc["bytes_checked"] == (0 if fast else others)
    assert "run the same snap create again: it computes the tasks of shards missing" in stdout


@pytest.mark.parametrize("fast", [False, True])
def test_verify_reports_a_deleted_shard_as_missing(snapshot: Path, fast: bool) -> None:
    shards = shard_files(snapshot)
    victim = shards[-1]
    victim.unlink()
    args = ("verify", str(snapshot), *(["--fast"] if fast else []))
    code, stdout, _ = run(*args)
    assert code == 1 and f"{victim}: missing" in stdout
    check_only_victim_named(stdout, shards, victim)
    doc = run_json(*args, code=1)
    assert [(d["path"], d["problem"], d["lost"]) for d in doc["damaged"]] == [
        (str(victim.relative_to(snapshot)), "missing", True)
    ]
    assert [s["lost"] for s in doc["shards"]] == [s == victim for s in shards]
    assert "run the same snap create again: it computes the tasks of shards missing" in stdout
    make_snapshot(snapshot)  # as it says: the lost shard's task is computed again
    assert run("verify", str(snapshot))[0] == 0 and snap.open(snapshot).version == 2
    assert len(written_order(snapshot)) == NUM_RECORDS


def test_verify_fast_on_local_storage_checks_sizes(snapshot: Path) -> None:
    code, stdout, stderr = run("verify", str(snapshot), "--fast")
    assert code == 0, stderr
    assert "ok" in stdout and "compared sizes only" in stdout
    doc = run_json("verify", str(snapshot), "--fast")
    assert doc["ok"] is True and doc["fast"] is True
    assert doc["checks"] == {"size": TASKS} and doc["bytes_checked"] == 0


@pytest.mark.parametrize(
    ("checks", "noted"),
    [
        ([("storage-crc32c", True)] * 9 + [("size", False)], False),  # a shard missing
        ([("size", True)] * 3, True),  # a storage without crc32c
        ([("storage-crc32c", True), ("size", True), ("size", False)], True),
    ],  # fmt: skip
)
def test_fast_says_sizes_only_where_the_storage_gave_no_crc32c(
    checks: list[tuple[str, bool]], noted: bool
) -> None:
    """A GCS snapshot with one shard deleted: "checks: 1 size, 9 storage-crc32c" and "this
    storage reports no crc32c": the missing shard had been checked by its size alone."""
    from snapshot_cli.readers.verify_report import MISSING, ShardCheck, sizes_only

    shards = [ShardCheck(f"s{i}", f"gs://b/s/shards/s{i}", 1, 1, check, None if ok else MISSING)
              for i, (check, ok) in enumerate(checks)]  # fmt: skip
    assert any("reports no crc32c" in note for note in sizes_only(shards)) == noted


def test_an_edited_manifest_is_not_answered_by_deleting_intact_shards(snapshot: Path) -> None:
    """A crc32c edited in manifest.json made an intact shard DAMAGED, and the closing line
    said to delete the damaged shards (a storage probe): with manifest.json unlike its copy
    in _versions/, it says to put the copy back first."""
    manifest = snapshot / "manifest.json"
    doc = json.loads(manifest.read_text())
    doc["shards"][0]["crc32c"] = "00000000"
    manifest.write_text(json.dumps(doc))
    code, stdout, _ = run("verify", str(snapshot))
    assert code == 1 and "differs from" in stdout
    assert "manifest.json was edited (above): put its copy back" in stdout
    assert "delete the damaged shards" not in stdout
    (snapshot / "manifest.json").write_bytes((snapshot / "_versions/v00000001.json").read_bytes())
    code, stdout, _ = run("verify", str(snapshot))
    assert code == 0, stdout


def test_the_progress_of_fast_counts_no_bytes_it_did_not_read(snapshot: Path) -> None:
    """--fast's progress line said "6.2 MiB  217.5 MiB/s" and its report "0 B read"."""
    from snapshot_cli.progress import human_bytes

    lines = {}
    for how in ([], ["--fast"]):
        code, _, stderr = run("verify", str(snapshot), *how)
        assert code == 0, stderr
        lines[bool(how)] = [x for x in stderr.splitlines() if x.startswith("snap: shards")][-1]
    whole = human_bytes(snap.open(snapshot).manifest.bytes)
    assert f"  {whole}  " in lines[False], lines
    assert f"records {NUM_RECORDS}  0 B  " in lines[True], lines


def test_a_version_replaced_while_verify_ran_is_not_called_damaged(tmp_path: Path) -> None:
    """verify opened version 1; meanwhile an --overwrite committed version 2 and gc
    (--retention 0) removed version 1's shards: verify called the intact snapshot damaged and
    said "run the same snap create again" (a probe). It says the version was replaced, and
    to run verify again; the snapshot as it now is checks out."""
    from snapshot_cli import render
    from snapshot_cli.readers.verify import verify
    from snapshot_cli.writers.gc import gc

    def preprocess(i: int, *, per: int = 1) -> Any:
        for k in range(per):
            yield {"id": np.int64(i * 10 + k)}

    url = str(tmp_path / "s")
    snap.create(preprocess, url, inputs=range(6), workers=0, inputs_per_task=1)
    opened = snap.open(url)  # (verify's, before the replace)
    snap.create(preprocess, url, inputs=range(6), workers=0, inputs_per_task=1,
                params={"per": 2}, overwrite=True)  # fmt: skip
    assert gc(url, retention=0).garbage
    report = verify(opened)
    assert report.replaced_by == 2 and not report.ok and len(report.damaged) == 6
    doc = report.to_json()
    assert doc["replaced_by"] == 2 and doc["problems"] == []
    said = "\n".join(click.unstyle(line) for line in render.verify_lines(doc))
    assert f"{url}: 6 of 6 shards gone, replaced by version 2 meanwhile (" in said
    assert "note: version 1 was replaced by version 2 while verify ran" in said
    assert "run snap verify again" in said and "snap create" not in said
    assert "DAMAGED" not in said and said.count("GONE  ") == 6
    assert verify(snap.open(url)).ok


@pytest.mark.parametrize("fast", [False, True])
def test_a_missing_shard_got_no_check(snapshot: Path, fast: bool) -> None:
    """``checks`` counts the shards that got a check: a missing one got none (a probe: "2 of
    20 shards damaged (20 shards; checks: 20 full")."""
    shards = shard_files(snapshot)
    shards[1].unlink()
    doc = run_json("verify", str(snapshot), *["--fast"] * fast, code=1)
    assert doc["checks"] == {"size" if fast else "full": len(shards) - 1}, doc["checks"]
    assert [d["problem"] for d in doc["damaged"]] == ["missing"]


def test_the_progress_counts_the_records_of_shards_read_only(snapshot: Path) -> None:
    """With the storage gone mid-verify, the progress climbed as if every shard were read:
    "shards 32/50  records 128  781.3 MiB" of shards that had failed (a probe). A shard that
    could not be read counts as a shard checked, not as records or bytes read."""
    whole = snap_subprocess("verify", str(snapshot), timeout=120)
    shards = shard_files(snapshot)
    lost = shards[0]
    entry = next(e for e in snap.open(snapshot).shards if lost.name in e.path)
    lost.unlink()
    done = snap_subprocess("verify", str(snapshot), timeout=120)
    assert whole.returncode == 0 and done.returncode == 1, done.stderr
    last = [line for line in done.stderr.splitlines() if line.startswith("snap: shards")][-1]
    assert f"shards {len(shards)}/{len(shards)}  records {NUM_RECORDS - entry.records}  " in last
