"""snap inspect, head and verify given one shard file (the path an error or ``inspect --shards``
printed): that shard alone, as the newest kept version listing it describes it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

import snapshot_cli as snap
from snapshot_cli.readers.not_found import ShardGiven
from tests.commands.conftest import TASKS, run, run_json, table, written_order


def shard_file(path: Path, i: int) -> Path:
    return path / snap.open(path).shards[i].path


def test_inspect_a_shard_shows_its_entry_place_and_the_task_that_wrote_it(
    snapshot: Path,
) -> None:
    m = snap.open(snapshot).manifest
    first = 0
    for i, entry in enumerate(m.shards):
        doc = run_json("inspect", str(snapshot / entry.path))
        assert doc["path"] == str(snapshot / entry.path) and doc["shard"] == entry.path
        assert (doc["snapshot"], doc["version"], doc["current_version"]) == (str(snapshot), 1, 1)
        assert (doc["index"], doc["num_shards"], doc["first_record"]) == (i, TASKS, first)
        assert (doc["records"], doc["bytes"], doc["crc32c"]) == (
            entry.records, entry.bytes, entry.crc32c
        )  # fmt: skip
        assert doc["task"]["inputs"] == [str(i)] and doc["task"]["shards"] == [entry.path]
        assert [c["name"] for c in doc["schema"]] == ["img", "label", "tokens", "text"]
        first += entry.records
    code, stdout, stderr = run("inspect", str(snapshot / m.shards[2].path))
    assert code == 0, stderr
    rows = table(stdout.splitlines())
    assert rows["shard"] == str(snapshot / m.shards[2].path)
    assert rows["snapshot"] == f"{snapshot} (version 1, shard index 2 of {TASKS})"
    assert rows["records"] == "3 (records 3 to 5 of the version, in the order written)"
    assert rows["crc32c"] == m.shards[2].crc32c and rows["inputs"] == "2"
    assert rows["img"] == "uint8[3,4,4]" and rows["tokens"] == "int32[?]"


@pytest.mark.parametrize("i", range(TASKS))
def test_head_of_a_shard_shows_its_own_records(snapshot: Path, i: int) -> None:
    start = i * (i + 1) // 2  # shard i holds records start .. start + i (see make_records)
    doc = run_json("head", str(shard_file(snapshot, i)), "-n", "100")
    assert doc["num_records"] == i + 1 and doc["shard"] == str(shard_file(snapshot, i))
    assert [r["label"] for r in doc["records"]] == list(range(start, start + i + 1))
    whole = written_order(snapshot)
    assert [r["label"] for r in doc["records"]] == [int(r["label"]) for r in whole][start:][: i + 1]
    code, stdout, _ = run("head", str(shard_file(snapshot, i)), "-n", "1")
    assert code == 0 and stdout.splitlines()[-1] == (
        f"(1 of {i + 1} record{'s' if i else ''} of {shard_file(snapshot, i)})"
    )


def test_verify_a_shard_checks_it_alone(snapshot: Path) -> None:
    victim, intact = shard_file(snapshot, 3), shard_file(snapshot, 4)
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    doc = run_json("verify", str(victim), code=1)
    assert doc["shard"] == str(victim) and doc["num_shards"] == 1
    assert [d["path"] for d in doc["damaged"]] == [f"shards/{victim.name}"]
    code, stdout, _ = run("verify", str(intact))
    assert code == 0 and stdout.startswith(f"{intact}: ok (1 shard;")
    assert run_json("verify", str(intact))["bytes_checked"] == intact.stat().st_size


def test_a_missing_shard_listed_by_the_manifest_is_reported_missing(snapshot: Path) -> None:
    gone = shard_file(snapshot, 1)
    gone.unlink()
    doc = run_json("verify", str(gone), code=1)
    assert doc["damaged"][0]["problem"] == "missing" and doc["bytes_checked"] == 0
    code, _, stderr = run("head", str(gone))
    assert code == 1 and f"shard {gone} is missing" in stderr
    assert run_json("inspect", str(gone))["records"] == 2  # the manifest still describes it


def test_a_shard_of_a_replaced_version_is_found_in_that_version(tmp_path: Path) -> None:
    inputs = tmp_path / "in"
    inputs.mkdir()
    for k in range(3):
        (inputs / f"{k}.txt").write_text(str(k))

    def preprocess(path: str) -> Any:
        yield {"n": int(Path(path).read_text())}

    out = tmp_path / "s"
    snap.create(preprocess, str(out), inputs=str(inputs / "*.txt"), workers=0, inputs_per_task=1)
    old = out / snap.open(out).shards[0].path
    (inputs / "0.txt").write_text("9")
    snap.create(preprocess, str(out), inputs=str(inputs / "*.txt"), workers=0, inputs_per_task=1)
    assert snap.open(out).version == 2 and f"shards/{old.name}" not in {
        s.path for s in snap.open(out).shards
    }
    doc = run_json("inspect", str(old))
    assert (doc["version"], doc["current_version"], doc["index"]) == (1, 2, 0)
    assert doc["task"]["inputs"] == [str(inputs / "0.txt")]
    code, stdout, _ = run("inspect", str(old))
    # (not "replaced by" the current version: versions between may have had it)
    assert (
        code == 0 and "(version 1, shard index 0 of 3; the snapshot is at version 2 now)" in stdout
    )
    assert [r["n"] for r in run_json("head", str(old))["records"]] == [0]  # the old record


def test_a_shard_file_no_version_lists_is_named_as_such(snapshot: Path) -> None:
    stray = snapshot / "shards" / "0123456789-00099-0000.arrow"
    stray.write_bytes(shard_file(snapshot, 0).read_bytes())
    for command in ("inspect", "head", "verify"):
        code, stdout, stderr = run(command, str(stray))
        assert code == 1 and stdout == "" and "Traceback" not in stderr
        assert f"{stray} is in the shards of {snapshot}, but no version it keeps lists it" in stderr
        assert f"snap gc {snapshot} removes" in stderr
    code, stdout, _ = run("gc", str(snapshot), "--dry-run")  # as the message says
    assert code == 0 and f"would remove shards/{stray.name}  (" in stdout
    assert stdout.splitlines()[-1].startswith(f"{snapshot}: would remove 1 item, ")
    stray.unlink()
    code, _, stderr = run("inspect", str(stray))
    assert code == 1 and f"{stray} does not exist, and no version of {snapshot} lists it" in stderr


@pytest.mark.parametrize("name", ["notes.txt", "0123456789-00099-0000.arrow.bak", ".hidden"])
def test_a_file_of_another_kind_in_the_shards_is_not_called_a_shard(
    snapshot: Path, name: str
) -> None:
    """A user's notes.txt in shards/ was "a snap create wrote it that has not committed
    (... snap gc removes what a stopped one left)": gc keeps it, as any name snap does not
    give (a probe); bench called it "a shard of the snapshot"."""
    other = snapshot / "shards" / name
    other.write_text("my notes")
    for command in ("inspect", "head", "verify", "bench"):
        code, stdout, stderr = run(command, str(other))
        assert code == 1 and stdout == "" and "Traceback" not in stderr
        assert "not a shard snap wrote" in stderr, stderr
        assert "has not committed" not in stderr and "is a shard" not in stderr, stderr
    code, stdout, _ = run("gc", str(snapshot), "--dry-run")  # (it keeps it, as said)
    assert code == 0 and name not in stdout, stdout
    assert other.read_text() == "my notes"


def test_the_loader_and_bench_still_refuse_a_shard(snapshot: Path) -> None:
    """(gc's refusal is in test_common: it says so before reading anything.)"""
    shard = shard_file(snapshot, 0)
    code, stdout, stderr = run("bench", str(shard), "--epochs", "1")
    assert code == 1 and stdout == ""
    assert f"{shard} is a shard of the snapshot {snapshot}: give the snapshot's directory" in stderr
    with pytest.raises(ShardGiven) as caught:
        snap.open(shard)
    assert isinstance(caught.value, snap.ManifestError)
    missing = shard.parent / "nothere.arrow"  # (it said a missing one "is a shard")
    code, _, stderr = run("bench", str(missing), "--epochs", "1")
    assert code == 1 and f"{missing} does not exist (it would be a shard of the snapshot" in stderr


def test_a_shard_of_a_snapshot_made_before_versions_has_no_task(snapshot: Path) -> None:
    """Format 2 (no versions, no task table): the shard is shown without its task."""
    manifest = snapshot / "manifest.json"
    doc = json.loads(manifest.read_text())
    del doc["history"]
    doc["format_version"] = 2
    manifest.write_text(json.dumps(doc))
    shard = shard_file(snapshot, 1)
    shown = run_json("inspect", str(shard))
    assert shown["task"] is None and (shown["version"], shown["current_version"]) == (1, 1)
    code, stdout, _ = run("inspect", str(shard))
    rows = table(stdout.splitlines())
    assert code == 0 and "task" not in rows and "inputs" not in rows
    assert rows["records"] == "2 (records 1 to 2 of the version, in the order written)"


@pytest.mark.parametrize("where", ["local", "memory"])
def test_a_snapshots_own_directory_given_names_the_snapshot(
    tmp_path: Path, memfs: Any, where: str
) -> None:
    root = str(tmp_path / "s") if where == "local" else "memory://inside/s"
    assert snap.create(lambda i: iter([{"i": i}]), root, inputs=[1, 2], workers=0).num_records == 2
    for inner in ("shards", "_versions", "_runs"):
        for given in (f"{root}/{inner}", f"{root}/{inner}/"):
            with pytest.raises(snap.ManifestError) as err:
                snap.open(given)
            said = str(err.value)
            assert f"; it is the {inner}/ directory of the snapshot " in said, said
            assert "a folder of Arrow files" not in said, said  # (it said both: a probe)
            named = said.rsplit("of the snapshot ", 1)[1].removesuffix(": give that")
            assert snap.open(named).num_records == 2  # what it names is the snapshot
            for command in ("inspect", "head", "verify", "bench", "gc"):
                code, _, stderr = run(command, given)
                assert code == 1 and f"it is the {inner}/ directory" in stderr, (command, stderr)


def test_a_shard_of_a_snapshot_never_committed_is_said_to_be_one(tmp_path: Path) -> None:
    """A create stopped before its first commit: `snap inspect SHARD` said "is a file, not a
    snapshot"."""
    from click.testing import CliRunner

    from snapshot_cli.cli import cli

    out = tmp_path / "snap"
    (out / "shards").mkdir(parents=True)
    (out / "_runs" / "0123abcdef").mkdir(parents=True)
    shard = out / "shards" / "0123abcdef-00000-0000.arrow"
    shard.write_bytes(b"ARROW1")
    for command in ("inspect", "head", "verify"):
        res = CliRunner().invoke(cli, [command, str(shard)])
        assert res.exit_code == 1, res.output
        assert "which no snap create has committed yet" in res.output, res.output
        assert f"snap gc {out}" in res.output


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _to_a_device(path: Path) -> None:
    path.symlink_to(os.devnull)


def _loop(path: Path) -> None:
    path.symlink_to(path.name)


@pytest.mark.parametrize("make", [_fifo, _to_a_device, _loop], ids=["fifo", "device", "loop"])
def test_a_shard_that_is_no_file_is_named_as_the_snapshot_s_shard(
    snapshot: Path, make: Any
) -> None:
    """A shard's path that is a FIFO, a device or a link in a loop was taken for a snapshot
    directory: "<shard>/manifest.json: Not a directory (ENOTDIR)". It is that snapshot's
    shard: inspect shows its entry, head and verify say what it is, as for the snapshot."""
    shard = shard_file(snapshot, 1)
    shard.unlink()
    make(shard)
    code, stdout, stderr = run("inspect", str(shard))
    assert code == 0 and table(stdout.splitlines())["shard"] == str(shard), stderr
    for command in ("head", "verify"):
        code, stdout, stderr = run(command, str(shard))
        said = stdout + stderr
        assert code == 1 and "Traceback" not in said, said
        assert any(w in said for w in ("not a regular file", "in a loop", "outside the")), said
        assert "manifest.json" not in said and "ENOTDIR" not in said, said


@pytest.mark.parametrize("command", ["inspect", "head", "verify", "gc", "bench"])
def test_a_fifo_given_as_a_snapshot_is_no_snapshot(tmp_path: Path, command: str) -> None:
    os.mkfifo(tmp_path / "pipe")
    code, _, stderr = run(command, str(tmp_path / "pipe"))
    assert code == 1 and "is a file, not a snapshot" in stderr, stderr
