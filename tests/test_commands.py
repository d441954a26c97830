"""The inspection and upkeep commands (inspect, verify, head, bench, gc) through CliRunner, and
each once as a real process."""

from __future__ import annotations

import json
import math
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner, Result

import snapshot_cli as snap
from snapshot_cli import report
from snapshot_cli.cli import cli
from snapshot_cli.progress import human_bytes, human_count
from tests.conftest import REPO, snap_subprocess, wait_for

TASKS = 6  # input k yields k + 1 records: 6 shards of 1..6 records, 21 records in all
NUM_RECORDS = TASKS * (TASKS + 1) // 2
TEXT_PAD = 150  # every text value is longer than the 60 characters head shows


def image(i: int) -> np.ndarray:
    return (np.arange(48).reshape(3, 4, 4) + i).astype(np.uint8)


def text(i: int) -> str:
    return f"record {i} " + "z" * TEXT_PAD


@snap.ragged("tokens")
def make_records(k: int) -> Iterator[dict[str, Any]]:
    """Input ``k``'s records; ``label`` is the record's index in the order written."""
    start = k * (k + 1) // 2
    for j in range(k + 1):
        i = start + j
        yield {
            "img": image(i),
            "label": i,
            "tokens": np.arange(i % 4 + 1, dtype=np.int32),
            "text": text(i),
        }


def make_snapshot(path: Path) -> Path:
    snap.create(make_records, path, workers=0, inputs_from=lambda: list(range(TASKS)),
                inputs_per_task=1)  # fmt: skip
    return path


@pytest.fixture
def snapshot(tmp_path: Path) -> Path:
    return make_snapshot(tmp_path / "snap")


def invoke(*args: str) -> Result:
    result = CliRunner().invoke(cli, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception  # a bug, not an error the CLI reports: show its traceback
    return result


def run(*args: str) -> tuple[int, str, str]:
    result = invoke(*args)
    return result.exit_code, result.stdout, result.stderr


def run_json(*args: str, code: int = 0) -> dict[str, Any]:
    got, stdout, stderr = run(*args, "--json")
    assert got == code, stderr
    return json.loads(stdout)


def shard_files(path: Path) -> list[Path]:
    return [path / s.path for s in snap.open(path).shards]


def table(lines: list[str]) -> dict[str, str]:
    """``key  value`` rows (keys padded, two spaces at least) → dict."""
    rows = {}
    for line in lines:
        parts = re.split(r"\s{2,}", line.strip(), maxsplit=1)
        if len(parts) == 2:
            rows[parts[0]] = parts[1]
    return rows


def written_order(path: Path) -> list[dict[str, Any]]:
    """Every record of the snapshot, in the order written, as the library reads them."""
    out = []
    for batch in snap.open(path).iter_batches():
        n = len(batch["label"])
        out += [{k: v[r] for k, v in batch.items()} for r in range(n)]
    return out


def no_nan(text: str) -> Any:
    def refuse(constant: str) -> Any:
        raise AssertionError(f"{constant} in JSON output")

    return json.loads(text, parse_constant=refuse)


def dead_pid() -> int:
    """A pid no process has: the kernel hands out pids below pid_max only."""
    return int(Path("/proc/sys/kernel/pid_max").read_text())


# --- inspect --------------------------------------------------------------------------------


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
        assert line.split()[:3] == [shard.path, str(shard.records), "records"]
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
    pid = os.getpid() if writer_alive else dead_pid()
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
    def preprocess(i: int) -> Any:
        if i == 3:
            raise ValueError("stop half-way")
        yield {"i": i}

    out = tmp_path / "snap"
    with pytest.raises(snap.PipelineError):
        snap.create(preprocess, str(out), inputs=[1, 2, 3, 4], workers=0, inputs_per_task=1)
    code, stdout, _ = run("gc", str(out))
    assert code == 0 and "state of a dead run" in stdout
    code, stdout, stderr = run("inspect", str(out))
    assert code == 0, stderr
    assert "unfinished snapshot" in stdout and "no run state left" in stdout
    doc = run_json("inspect", str(out))
    assert doc["finished"] is False and doc["runs"] == []


@pytest.mark.parametrize("command", ["inspect", "verify", "head", "bench", "gc"])
@pytest.mark.parametrize("where", ["empty", "missing"])
def test_not_a_snapshot_exits_1_without_traceback(tmp_path: Path, command: str, where: str) -> None:
    path = tmp_path / "nothing"
    if where == "empty":
        path.mkdir()
    code, stdout, stderr = run(command, str(path))
    assert code == 1
    assert stderr.startswith("snap: error: ") and str(path) in stderr
    assert "is not a snapshot" in stderr or (command == "gc" and "does not exist" in stderr)
    assert "Traceback" not in stderr and stdout == ""


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


@pytest.mark.parametrize("command", ["inspect", "verify", "head", "gc"])
def test_manifest_that_cannot_be_read_exits_1_naming_it(snapshot: Path, command: str) -> None:
    """A failure root gets too: manifest.json is a directory."""
    manifest = snapshot / "manifest.json"
    manifest.unlink()
    manifest.mkdir()
    code, stdout, stderr = run(command, str(snapshot))
    assert code == 1 and stdout == ""
    assert stderr.startswith("snap: error: ") and str(manifest) in stderr
    assert "Traceback" not in stderr


# --- verify ---------------------------------------------------------------------------------


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

    proc = snap_subprocess("verify", str(snapshot), "--json")  # also as a real process
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["ok"] is False and doc["num_damaged"] == 1
    [bad] = doc["damaged"]
    assert bad["url"] == str(victim) and bad["path"] == str(victim.relative_to(snapshot))
    assert bad["problem"].startswith("crc32c ")
    assert [s["path"] for s in doc["shards"] if not s["ok"]] == [bad["path"]]

    # --fast compares sizes only here (local files report no crc32c), and says so.
    code, stdout, _ = run("verify", str(snapshot), "--fast")
    assert code == 0 and "compared sizes only" in stdout

    # The loader refuses the damaged shard, by name, instead of returning its records.
    with (
        pytest.raises(snap.CorruptShardError) as err,
        snap.open(snapshot).loader(batch_size=4) as loader,
    ):
        for _ in loader:
            pass
    assert victim.name in str(err.value)
    check_only_victim_named(str(err.value), shards, victim)


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
    assert [d["path"] for d in doc["damaged"]] == [str(victim.relative_to(snapshot))]
    assert doc["checks"] == ({"size": len(shards)} if fast else {"full": len(shards)})


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
    assert [(d["path"], d["problem"]) for d in doc["damaged"]] == [
        (str(victim.relative_to(snapshot)), "missing")
    ]


def test_verify_fast_on_local_storage_checks_sizes(snapshot: Path) -> None:
    code, stdout, stderr = run("verify", str(snapshot), "--fast")
    assert code == 0, stderr
    assert "ok" in stdout and "compared sizes only" in stdout
    doc = run_json("verify", str(snapshot), "--fast")
    assert doc["ok"] is True and doc["fast"] is True
    assert doc["checks"] == {"size": TASKS} and doc["bytes_checked"] == 0


# --- head -----------------------------------------------------------------------------------


def records_of(stdout: str) -> list[dict[str, str]]:
    """``record N:`` blocks of snap head → [{column: shown value}]."""
    out: list[dict[str, str]] = []
    for line in stdout.splitlines():
        if re.fullmatch(r"record \d+:", line):
            assert line == f"record {len(out)}:"
            out.append({})
        elif line.startswith("  ") and out:
            key, value = re.split(r"\s{2,}", line.strip(), maxsplit=1)
            out[-1][key] = value
    return out


def test_head_shows_the_first_records_in_written_order(snapshot: Path) -> None:
    first = written_order(snapshot)[:3]
    code, stdout, stderr = run("head", str(snapshot), "-n", "3")
    assert code == 0, stderr
    shown = records_of(stdout)
    assert len(shown) == 3
    assert [int(r["label"]) for r in shown] == [int(r["label"]) for r in first] == [0, 1, 2]
    for rec, want in zip(shown, first, strict=True):
        i = int(want["label"])
        img = image(i)
        assert rec["img"].startswith(f"uint8[3,4,4]  min {img.min()} max {img.max()} mean ")
        assert rec["img"].endswith(", ".join(str(v) for v in img.reshape(-1)[:6]) + ", …]")
        assert rec["tokens"].startswith(f"int32[{len(want['tokens'])}]")
        start = text(i)[: report.TEXT_LIMIT - 1] + "…"
        assert rec["text"] == f"str[{len(text(i))}] {start!r}"
    assert stdout.splitlines()[-1] == f"(3 of {NUM_RECORDS} records)"


def test_head_json(snapshot: Path) -> None:
    first = written_order(snapshot)[:3]
    doc = no_nan(run("head", str(snapshot), "-n", "3", "--json")[1])
    assert doc["num_records"] == NUM_RECORDS and doc["path"] == str(snapshot)
    assert len(doc["records"]) == 3
    for rec, want in zip(doc["records"], first, strict=True):
        i = int(want["label"])
        assert rec["label"] == i
        assert rec["img"] == {
            "dtype": "uint8",
            "shape": [3, 4, 4],
            "min": int(image(i).min()),
            "max": int(image(i).max()),
            "mean": round(float(image(i).mean()), 6),
            "first": image(i).reshape(-1)[:6].tolist(),
        }
        assert rec["tokens"]["dtype"] == "int32"
        assert rec["tokens"]["first"] == list(range(i % 4 + 1))
        assert rec["text"]["type"] == "str" and rec["text"]["length"] == len(text(i))
        assert text(i).startswith(rec["text"]["start"].rstrip("…"))


def test_head_zero_and_more_than_there_are(snapshot: Path) -> None:
    code, stdout, _ = run("head", str(snapshot), "-n", "0")
    assert code == 0 and "record" not in stdout.replace(f"of {NUM_RECORDS} records", "")
    assert stdout.strip() == f"(0 of {NUM_RECORDS} records)"
    assert run_json("head", str(snapshot), "-n", "0")["records"] == []
    doc = run_json("head", str(snapshot), "-n", str(NUM_RECORDS + 10))
    assert [r["label"] for r in doc["records"]] == list(range(NUM_RECORDS))


def test_head_columns(snapshot: Path) -> None:
    code, stdout, _ = run("head", str(snapshot), "-n", "4", "--columns", "label")
    assert code == 0
    assert records_of(stdout) == [{"label": str(i)} for i in range(4)]
    assert "uint8" not in stdout and "str[" not in stdout
    doc = run_json("head", str(snapshot), "-n", "2", "--columns", "text,label")
    assert [list(r) for r in doc["records"]] == [["text", "label"]] * 2


def test_head_unknown_column_exits_1_naming_it(snapshot: Path) -> None:
    code, stdout, stderr = run("head", str(snapshot), "--columns", "label,nope")
    assert code == 1 and stdout == ""
    assert "'nope'" in stderr and "Traceback" not in stderr


def test_head_as_a_real_process(snapshot: Path) -> None:
    proc = snap_subprocess("head", str(snapshot), "-n", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    assert [r["label"] for r in json.loads(proc.stdout)["records"]] == [0, 1]


def test_head_float_arrays_with_nan_and_inf(tmp_path: Path) -> None:
    values = [np.array([0.5, np.nan, 2.0], np.float32), np.array([1.0, np.inf], np.float32)]

    def gen() -> Iterator[dict[str, Any]]:
        for i, v in enumerate(values):
            yield {"x": v, "id": i}

    path = tmp_path / "nan"
    snap.create(gen, path, workers=0)
    code, stdout, stderr = run("head", str(path))
    assert code == 0, stderr
    shown = records_of(stdout)
    assert [r["id"] for r in shown] == ["0", "1"]
    assert shown[0]["x"].startswith("float32[3]") and "nan" in shown[0]["x"]
    assert shown[1]["x"].startswith("float32[2]") and "inf" in shown[1]["x"]
    doc = no_nan(run("head", str(path), "--json")[1])  # strict JSON: no NaN literal
    means = [r["x"]["mean"] for r in doc["records"]]
    assert means == [pytest.approx(float(np.mean(v[np.isfinite(v)]))) for v in values]


# --- bench ----------------------------------------------------------------------------------


def test_bench_json_counts_every_record_of_every_epoch(snapshot: Path) -> None:
    doc = run_json("bench", str(snapshot), "--epochs", "2", "--batch-size", "8")
    per_epoch_batches = math.ceil(NUM_RECORDS / 8)  # drop_last is False
    assert doc["records"] == 2 * NUM_RECORDS
    assert doc["batches"] == 2 * per_epoch_batches
    assert (doc["epochs"], doc["batch_size"], doc["step_ms"]) == (2, 8, 0.0)
    assert [e["epoch"] for e in doc["per_epoch"]] == [0, 1]
    assert all(e["seconds"] > 0 and e["records_per_s"] > 0 for e in doc["per_epoch"])
    assert {"window_rows", "parallel_reads", "prefetch"} <= doc["settings"].keys()
    assert all(isinstance(v, int) and v >= 1 for v in doc["settings"].values())
    assert doc["options"]["shuffle"] is True and doc["trace"] is None
    assert 0 <= doc["input_bound_pct"] <= 100
    assert {"read_decode", "gather", "map"} <= doc["stage_seconds"].keys()


def test_bench_no_shuffle(snapshot: Path) -> None:
    code, stdout, stderr = run("bench", str(snapshot), "--no-shuffle", "--batch-size", "5")
    assert code == 0, stderr
    rows = table(stdout.splitlines())
    batches = 2 * math.ceil(NUM_RECORDS / 5)
    assert rows["replayed"].startswith(f"{2 * NUM_RECORDS} records in {batches} batches of 5")
    assert len(re.findall(r"^  epoch \d: ", stdout, re.MULTILINE)) == 2
    doc = run_json("bench", str(snapshot), "--no-shuffle", "--epochs", "1")
    assert doc["options"]["shuffle"] is False and doc["records"] == NUM_RECORDS


def test_bench_trace_names_the_loader_threads(snapshot: Path, tmp_path: Path) -> None:
    trace = tmp_path / "trace.json"
    # Three epochs: every epoch's loader threads are new ones.
    doc = run_json("bench", str(snapshot), "--epochs", "3", "--batch-size", "4", "--trace",
                   str(trace))  # fmt: skip
    assert doc["trace"] == str(trace)
    events = json.loads(trace.read_text())["traceEvents"]
    assert doc["trace_events"] == sum(e["ph"] == "X" for e in events)
    names = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    spans = [e for e in events if e["ph"] == "X"]
    assert {e["tid"] for e in spans} <= names.keys()  # every thread that ran a span is named
    reads = [e for e in spans if e["name"] == "read+decode"]
    gathers = [e for e in spans if e["name"] == "gather batch"]
    assert len(gathers) == doc["batches"] == 3 * math.ceil(NUM_RECORDS / 4)
    assert len(reads) >= 3 * TASKS  # every record batch decoded once per epoch at least
    assert all(names[e["tid"]].startswith("snap-") for e in reads + gathers)
    # Each stage on the thread that runs it (not a name left over from an earlier thread).
    assert {names[e["tid"]] for e in gathers} == {"snap-batch"}
    assert all(names[e["tid"]].startswith("snap-read") for e in reads)
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in spans)

    code, stdout, _ = run("bench", str(snapshot), "--epochs", "1", "--trace", str(trace))
    assert code == 0 and f"trace: {trace} (" in stdout


def test_bench_step_ms_measures_input_bound_share(snapshot: Path) -> None:
    doc = run_json("bench", str(snapshot), "--epochs", "1", "--batch-size", "4", "--step-ms", "2")
    assert doc["step_ms"] == 2.0
    assert 0 <= doc["input_bound_pct"] <= 100
    # Each batch took one 2 ms step at least (seconds are rounded to 0.1 ms).
    assert doc["seconds"] + 1e-4 >= doc["batches"] * 0.002
    code, stdout, _ = run("bench", str(snapshot), "--epochs", "1", "--step-ms", "2")
    assert code == 0 and "(simulated step 2 ms)" in stdout


@pytest.mark.parametrize("value", ["zero", "0", "-3"])
def test_bench_bad_prefetch_names_the_option(snapshot: Path, value: str) -> None:
    code, stdout, stderr = run("bench", str(snapshot), "--prefetch", value)
    assert code in (1, 2) and stdout == ""
    assert "--prefetch" in stderr and repr(value) in stderr and "Traceback" not in stderr


def test_bench_as_a_real_process(snapshot: Path) -> None:
    proc = snap_subprocess("bench", str(snapshot), "--epochs", "1", "--batch-size", "8", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["records"] == NUM_RECORDS and doc["batches"] == math.ceil(NUM_RECORDS / 8)


# --- gc -------------------------------------------------------------------------------------

DEAD_RUN = "deadbeef00"


def plant_dead_run(path: Path) -> set[str]:
    """State a dead writer leaves behind; returns the paths gc should remove."""
    run_dir = path / "_runs" / DEAD_RUN
    (run_dir / "tasks").mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps(
        {"run": DEAD_RUN, "fingerprint": "0" * 64, "plan": [[0, 1], [1, 2]], "created": 0}
    ))  # fmt: skip
    (run_dir / "tasks" / "00000.json").write_text(json.dumps({"run": DEAD_RUN, "task": 0}))
    (path / "shards" / f"{DEAD_RUN}-00000-0000.arrow").write_bytes(b"partial shard" * 100)
    return {f"_runs/{DEAD_RUN}", f"shards/{DEAD_RUN}-00000-0000.arrow"}


def leases(path: Path) -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text()) for p in (path / "_runs").glob("lease-*.json")}


def tree(path: Path) -> dict[str, int]:
    return {str(p.relative_to(path)): p.stat().st_size for p in path.rglob("*") if p.is_file()}


def test_gc_removes_what_a_dead_writer_left(snapshot: Path) -> None:
    expected = plant_dead_run(snapshot)
    temp = f".manifest.json.{'ab' * 16}.tmp"  # an atomic write that died before its rename
    (snapshot / temp).write_text("{")
    expected.add(temp)
    epoch = 1 + max(int(name[6:14]) for name in leases(snapshot))
    dead_lease = f"lease-{epoch:08d}.json"
    (snapshot / "_runs" / dead_lease).write_text(json.dumps(
        {"host": socket.gethostname(), "pid": dead_pid(), "id": "dead", "ttl": 30.0,
         "heartbeat": time.time(), "run": DEAD_RUN}
    ))  # fmt: skip
    before = tree(snapshot)

    code, stdout, stderr = run("gc", str(snapshot), "--dry-run")
    assert code == 0, stderr
    for rel in expected:
        assert f"would remove {rel}  (" in stdout
    assert "note:" not in stdout  # the writer is dead: nothing is kept for it
    assert stdout.splitlines()[-1].startswith(f"{snapshot}: would remove {len(expected)} items")
    doc = run_json("gc", str(snapshot), "--dry-run")
    assert {g["path"] for g in doc["would_remove"]} == expected and doc["writer"] is None
    assert doc["bytes"] == sum(g["bytes"] for g in doc["would_remove"]) > 0
    assert tree(snapshot) == before  # a dry run removes nothing

    doc = run_json("gc", str(snapshot))
    assert doc["dry_run"] is False and {g["path"] for g in doc["removed"]} == expected
    assert {g["kind"] for g in doc["removed"]} == {"run", "shard", "temporary"}
    assert doc["kept_runs"] == [] and doc["writer"] is None
    after = tree(snapshot)
    assert not any(name.startswith(tuple(expected)) for name in after)
    assert dead_lease not in leases(snapshot)
    assert all(h.get("released") for h in leases(snapshot).values())  # nobody holds it now
    m = snap.open(snapshot).manifest
    assert all(s.path in after and after[s.path] == s.bytes for s in m.shards)
    assert sorted(n for n in after if n.startswith("shards/")) == sorted(s.path for s in m.shards)

    # The snapshot still replays completely, and checks out.
    assert [int(r["label"]) for r in written_order(snapshot)] == list(range(NUM_RECORDS))
    assert run("verify", str(snapshot))[0] == 0
    code, stdout, _ = run("gc", str(snapshot))
    assert code == 0 and stdout.strip() == f"{snapshot}: nothing to remove"


LIVE_PIPE = """
import os, time
import numpy as np

def preprocess(path, *, gate, block, tag):
    with open(path) as f:
        i = int(f.read())
    for j in range(4):
        yield {"x": np.full(256, i * 10 + j, np.int32), "id": i * 10 + j, "tag": tag}
        if i == block and j == 1:
            while not os.path.exists(gate):  # the writer is blocked here, mid-shard
                time.sleep(0.01)
"""
LIVE_INPUTS = 4
LIVE_BLOCK = 2


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a test starts; killed when it ends, failed or not."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_gc_keeps_a_live_writers_run(
    tmp_path: Path,
    write_pipeline: Callable[..., str],
    processes: list[subprocess.Popen[bytes]],
) -> None:
    spec = write_pipeline(LIVE_PIPE)
    (tmp_path / "in").mkdir()
    for i in range(LIVE_INPUTS):
        (tmp_path / "in" / f"{i}.txt").write_text(str(i))
    out, gate = tmp_path / "snap", tmp_path / "gate"
    common = [spec, str(out), "--input", str(tmp_path / "in" / "*.txt"), "--param",
              f"gate={json.dumps(str(gate))}", "--workers", "0", "--inputs-per-task", "1",
              "--batch-rows", "1", "--quiet"]  # fmt: skip
    # An old committed snapshot made with other params: the live run replaces it.
    code, _, stderr = run("create", *common, "--param", "block=-1", "--param", "tag=old")
    assert code == 0, stderr
    old_shards = {s.path for s in snap.open(out).shards}

    log, result = tmp_path / "create.err", tmp_path / "create.json"
    with open(log, "wb") as err, open(result, "wb") as stdout:
        proc = subprocess.Popen(
            [sys.executable, "-m", "snapshot_cli", "create", *common, "--param",
             f"block={LIVE_BLOCK}", "--param", "tag=new", "--overwrite", "--json"],
            cwd=REPO, stdout=stdout, stderr=err,
        )  # fmt: skip
    processes.append(proc)

    def live_run() -> str | None:
        for holder in leases(out).values():
            if holder.get("pid") == proc.pid and holder.get("run") and not holder.get("released"):
                return str(holder["run"])
        return None

    def blocked() -> bool:
        assert proc.poll() is None, f"create exited early: {log.read_text()}"
        run_id = live_run()
        if run_id is None:
            return False
        done = {p.name for p in (out / "_runs" / run_id / "tasks").glob("*.json")}
        partial = out / "shards" / f"{run_id}-{LIVE_BLOCK:05d}-0000.arrow"
        return done == {f"{t:05d}.json" for t in range(LIVE_BLOCK)} and partial.exists()

    wait_for(blocked, "the live writer to block mid-shard")
    live = live_run()
    assert live is not None
    garbage = plant_dead_run(out)  # another, dead, run's leftovers
    live_shards = {p.name for p in (out / "shards").glob(f"{live}-*")}
    assert len(live_shards) == LIVE_BLOCK + 1

    # Readers still see the old snapshot meanwhile.
    assert run_json("inspect", str(out))["params"]["tag"] == "old"

    code, stdout, _ = run("gc", str(out), "--dry-run")
    assert code == 0 and f"note: a live writer ({socket.gethostname()}:{proc.pid}" in stdout
    assert f"its run {live} is kept" in stdout
    assert (out / "_runs" / DEAD_RUN).exists()

    gc_proc = snap_subprocess("gc", str(out), "--json")  # gc as a real process
    assert gc_proc.returncode == 0, gc_proc.stderr
    doc = json.loads(gc_proc.stdout)
    assert {g["path"] for g in doc["removed"]} == garbage
    assert doc["kept_runs"] == [live]
    assert doc["writer"]["run"] == live and f":{proc.pid} " in doc["writer"]["holder"]
    assert live in doc["note"]
    assert (out / "_runs" / live / "run.json").is_file()
    assert {p.name for p in (out / "shards").glob(f"{live}-*")} == live_shards
    assert all((out / p).is_file() for p in old_shards)  # still committed: never touched
    assert not (out / "_runs" / DEAD_RUN).exists()
    assert not (out / "shards" / f"{DEAD_RUN}-00000-0000.arrow").exists()
    assert proc.poll() is None

    gate.write_text("open")
    assert proc.wait(timeout=120) == 0, log.read_text()
    info = json.loads(result.read_text())
    assert info["run"] == live and info["num_records"] == LIVE_INPUTS * 4
    s = snap.open(out)
    assert s.manifest.pipeline["params"]["tag"] == "new"
    ids = sorted(int(i) for b in s.iter_batches() for i in b["id"])  # checksums every shard
    assert ids == sorted(i * 10 + j for i in range(LIVE_INPUTS) for j in range(4))
    assert run("verify", str(out))[0] == 0
