"""snap inspect: the summary, --shards, --json, unfinished and damaged snapshots."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import pytest

import snapshot_cli as snap
from snapshot_cli.progress import human_bytes, human_count
from tests.commands.conftest import (
    NUM_RECORDS,
    TASKS,
    dead_pid,
    failed_first_create,
    run,
    run_json,
    table,
)
from tests.conftest import snap_subprocess


def test_inspect_human_output(snapshot: Path) -> None:
    code, stdout, stderr = run("inspect", str(snapshot))
    assert code == 0, stderr
    m = snap.open(snapshot).manifest
    lines = stdout.splitlines()
    cut = lines.index("columns:")
    rows = table(lines[:cut])
    assert rows["snapshot"] == str(snapshot)
    assert rows["records"] == str(NUM_RECORDS) == str(m.num_records)
    assert rows["shards"] == f"{TASKS} ({m.num_record_batches} record batches)"
    assert rows["compression"] == "zstd level 1"
    assert rows["fingerprint"] == m.fingerprint[:16]
    assert rows["inputs"] == str(TASKS)
    assert rows["on disk"].startswith(human_bytes(m.bytes))
    records = sorted(s.records for s in m.shards)
    assert rows["per shard"].startswith(
        f"records min {records[0]} / median {human_count((records[2] + records[3]) / 2)} / "
        f"max {records[-1]}"
    )
    end = lines.index("records per shard:")
    columns = table(lines[cut + 1 : end])
    assert columns == {"img": "uint8[3,4,4]", "label": "int64", "tokens": "int32[?]", "text": "str"}
    hist = lines[end + 1 :]  # 1..6 records per shard: one bin per count, one shard in each
    assert [line.split()[0] for line in hist] == [str(n) for n in records]
    assert all(line.split()[-1] == "1" for line in hist)


def test_inspect_json(snapshot: Path) -> None:
    doc = run_json("inspect", str(snapshot))
    m = snap.open(snapshot).manifest
    assert {"num_records", "num_shards", "fingerprint", "compression", "schema", "bytes",
            "uncompressed_bytes", "balance"} <= doc.keys()  # fmt: skip
    assert (doc["num_records"], doc["num_shards"]) == (NUM_RECORDS, TASKS)
    assert doc["fingerprint"] == m.fingerprint and doc["finished"] is True
    assert doc["bytes"] == sum(s.bytes for s in m.shards)
    assert doc["uncompressed_bytes"] == sum(s.uncompressed_bytes for s in m.shards)
    assert doc["compression"] == {"codec": "zstd", "level": 1}
    assert [(c["name"], c["kind"]) for c in doc["schema"]] == [
        ("img", "tensor"), ("label", "scalar"), ("tokens", "ragged"), ("text", "string")
    ]  # fmt: skip
    for key, values in (
        ("records", [s.records for s in m.shards]),
        ("bytes", [s.bytes for s in m.shards]),
    ):
        bal = doc["balance"][key]
        assert bal["min"] <= bal["median"] <= bal["max"]
        assert (bal["min"], bal["max"]) == (min(values), max(values))
    assert sum(b["count"] for b in doc["balance"]["records_histogram"]) == TASKS
    assert "shards" not in doc


def test_inspect_shards_lists_every_shard(snapshot: Path) -> None:
    m = snap.open(snapshot).manifest
    code, stdout, _ = run("inspect", str(snapshot), "--shards")
    assert code == 0
    listed = stdout.splitlines()[stdout.splitlines().index("shards:") + 1 :]
    assert len(listed) == len(m.shards)
    for line, shard in zip(listed, m.shards, strict=True):
        word = "record" if shard.records == 1 else "records"  # (said "1 records")
        assert line.split()[:3] == [shard.path, str(shard.records), word]
        assert line.endswith(f"crc32c {shard.crc32c}")
    doc = run_json("inspect", str(snapshot), "--shards")
    assert [s["path"] for s in doc["shards"]] == [s.path for s in m.shards]
    assert all((snapshot / s["path"]).is_file() for s in doc["shards"])


def test_inspect_as_a_real_process(snapshot: Path) -> None:
    proc = snap_subprocess("inspect", str(snapshot), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["num_records"] == NUM_RECORDS and doc["num_shards"] == TASKS


@pytest.mark.parametrize("writer_alive", [False, True])
def test_inspect_unfinished_snapshot(tmp_path: Path, writer_alive: bool) -> None:
    run_dir = tmp_path / "_runs" / "cafe000001"
    (run_dir / "tasks").mkdir(parents=True)
    plan = [[0, 2], [2, 4], [4, 5]]
    (run_dir / "run.json").write_text(json.dumps(
        {"run": "cafe000001", "plan": plan, "created": time.time() - 30, "pipeline": "p.py:f"}
    ))  # fmt: skip
    for task in (0, 2):
        (run_dir / "tasks" / f"{task:05d}.json").write_text(
            json.dumps({"run": "cafe000001", "task": task})
        )
    # a live process on this host that is not this one (a lease file of this process that
    # it does not hold was left by an interrupted create: dead)
    pid = os.getppid() if writer_alive else dead_pid()
    holder = {"host": socket.gethostname(), "pid": pid, "id": "x", "ttl": 30.0,
              "heartbeat": time.time(), "run": "cafe000001"}  # fmt: skip
    (tmp_path / "_runs" / "lease-00000003.json").write_text(json.dumps(holder))

    code, stdout, stderr = run("inspect", str(tmp_path))
    assert code == 0, stderr
    assert f"{tmp_path}: unfinished snapshot" in stdout
    assert f"run cafe000001: 2/{len(plan)} tasks done" in stdout
    assert f"{socket.gethostname()}:{pid}" in stdout
    assert ("writing" in stdout) == writer_alive
    assert ("not running" in stdout) != writer_alive
    assert ("run the same snap create again" in stdout) != writer_alive

    doc = run_json("inspect", str(tmp_path))
    assert doc["finished"] is False
    assert [(r["run"], r["tasks_done"], r["tasks"]) for r in doc["runs"]] == [
        ("cafe000001", 2, len(plan))
    ]
    assert doc["writer"]["alive"] is writer_alive and doc["writer"]["pid"] == pid
    assert doc["writer"]["run"] == "cafe000001"


def test_inspect_after_gc_removed_an_unfinished_run(tmp_path: Path) -> None:
    out = failed_first_create(tmp_path / "snap")
    code, stdout, _ = run("gc", str(out))
    assert code == 0 and "state of a dead run" in stdout
    # (its lease released: nothing of a snapshot is left, and gc removed that too)
    code, stdout, stderr = run("inspect", str(out))
    assert code == 1 and f"{out} is not a snapshot" in stderr, stderr


@pytest.mark.parametrize(
    "content", ["{garbage", "", "[]", '{"format": "snap"}', "\x00\x01\x02"], ids=repr
)
def test_inspect_damaged_manifest_exits_1_naming_it(snapshot: Path, content: str) -> None:
    (snapshot / "manifest.json").write_text(content)
    code, stdout, stderr = run("inspect", str(snapshot))
    assert code == 1 and stdout == ""
    assert stderr.startswith("snap: error: ") and str(snapshot / "manifest.json") in stderr
    assert "Traceback" not in stderr


def test_inspect_damaged_manifest_is_not_called_unfinished(snapshot: Path) -> None:
    """A leftover run (an interrupted --overwrite) must not hide a damaged manifest.json."""
    run_dir = snapshot / "_runs" / "0ddba11000"
    (run_dir / "tasks").mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"run": "0ddba11000", "plan": [[0, 1]]}))
    (snapshot / "manifest.json").write_text("{garbage")
    code, stdout, stderr = run("inspect", str(snapshot))
    assert "no manifest.json yet" not in stdout  # it is there, only damaged
    assert code == 1 and str(snapshot / "manifest.json") in stderr


def test_inspect_unreadable_manifest(snapshot: Path) -> None:
    manifest = snapshot / "manifest.json"
    manifest.chmod(0)
    try:
        try:
            manifest.read_bytes()
            readable = True  # root (CAP_DAC_OVERRIDE) reads it anyway
        except PermissionError:
            readable = False
        code, stdout, stderr = run("inspect", str(snapshot))
    finally:
        manifest.chmod(0o644)
    assert "Traceback" not in stderr
    if readable:
        assert os.geteuid() == 0
        assert code == 0 and table(stdout.splitlines())["records"] == str(NUM_RECORDS)
    else:
        assert code == 1 and stdout == ""
        assert "permission denied" in stderr and str(manifest) in stderr


@pytest.mark.parametrize("json_too", [[], ["--json"]])
def test_shards_and_versions_together_are_a_usage_error(snapshot: Path, json_too: list) -> None:
    """``--shards --versions`` listed the versions and left ``--shards`` out without a word."""
    code, stdout, stderr = run("inspect", str(snapshot), "--shards", "--versions", *json_too)
    assert code == 2 and stdout == ""
    assert "--shards lists a version's shards, --versions versions: give one" in stderr
