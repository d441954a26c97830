"""snap bench: records counted per epoch, shuffle, the trace, the simulated step, bad options."""

from __future__ import annotations

import json
import math
import os
import re
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import snapshot_cli as snap
from tests.commands.conftest import NUM_RECORDS, TASKS, image, run, run_json, table, text
from tests.conftest import snap_subprocess


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


def test_bench_counts_the_bytes_of_text_and_ragged_values(snapshot: Path) -> None:
    """A text or ragged column's object array counted 8 bytes a value (numpy's nbytes of
    the references): MB/s of a snapshot of text was 60x too low."""
    expected = sum(
        image(i).nbytes + 8 + 4 * (i % 4 + 1) + len(text(i).encode()) for i in range(NUM_RECORDS)
    )  # img, int64 label, int32 tokens, text
    doc = run_json("bench", str(snapshot), "--epochs", "2")
    assert doc["bytes"] == 2 * expected
    assert run_json("bench", str(snapshot), "--epochs", "1", "--columns", "text")["bytes"] == sum(
        len(text(i).encode()) for i in range(NUM_RECORDS)
    )


def test_bench_times_everything_from_the_first_iter(snapshot: Path) -> None:
    """The replay's seconds and first batch were timed from before the loader was made (a
    first batch after the whole first epoch), the input-bound share from the first iter()."""
    doc = run_json("bench", str(snapshot), "--epochs", "2")
    epochs = sum(e["seconds"] for e in doc["per_epoch"])
    assert doc["first_batch_seconds"] <= doc["per_epoch"][0]["seconds"] + 1e-3
    assert epochs <= doc["seconds"] + 2e-4 and doc["setup_seconds"] >= 0
    assert doc["consumer_wait_s"] <= doc["seconds"] + 1e-3


def test_bench_of_no_records_says_no_first_batch(tmp_path: Path) -> None:
    """It said "first batch 0 ms after iter()" of a batch that never came."""
    snap.create(lambda i: [], str(tmp_path / "e"), inputs=[1], workers=0)
    assert run_json("bench", str(tmp_path / "e"))["first_batch_seconds"] is None
    code, stdout, _ = run("bench", str(tmp_path / "e"))
    assert code == 0 and "first batch  none: no records were replayed (the loader's" in stdout


def test_bench_says_which_settings_auto_chose(snapshot: Path) -> None:
    """ "auto chose num_parallel_reads=1000" of a value the user had given."""
    code, stdout, _ = run("bench", str(snapshot), "--num-parallel-reads", "3")
    rows = table(stdout.splitlines())
    assert code == 0 and "auto chose" not in rows
    assert rows["settings"].startswith("num_parallel_reads=3, prefetch=")
    assert "batches (auto), shuffle window" in rows["settings"]


def test_bench_no_shuffle(snapshot: Path) -> None:
    code, stdout, stderr = run("bench", str(snapshot), "--no-shuffle", "--batch-size", "5")
    assert code == 0, stderr
    rows = table(stdout.splitlines())
    batches = 2 * math.ceil(NUM_RECORDS / 5)
    assert rows["replayed"].startswith(f"{2 * NUM_RECORDS} records in {batches} batches of up to 5")
    assert len(re.findall(r"^  epoch \d: ", stdout, re.MULTILINE)) == 2
    # a batch larger than the snapshot: its batches are partial, and said so ("3 records in
    # 3 batches of 1000000" read as three million)
    code, stdout, _ = run("bench", str(snapshot), "--batch-size", "1000000", "--epochs", "3")
    replayed = table(stdout.splitlines())["replayed"]
    assert replayed.startswith(f"{3 * NUM_RECORDS} records in 3 batches of up to 1000000, ")
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


def test_a_trace_to_a_pipe_or_a_link_is_written_there_not_renamed_over_it(
    snapshot: Path, tmp_path: Path
) -> None:
    """The trace was written beside its path and renamed over it: a FIFO, a device (as
    root, ``--trace /dev/null`` made /dev/null a file for every process) or a link was
    replaced by a file. A FIFO (of the kind of a device: neither file nor directory) is
    written in place, a link's target is written and the link stays."""
    fifo = tmp_path / "trace.fifo"
    os.mkfifo(fifo)
    read: list[bytes] = []
    reader = threading.Thread(target=lambda: read.append(fifo.read_bytes()), daemon=True)
    reader.start()
    doc = run_json("bench", str(snapshot), "--epochs", "1", "--trace", str(fifo))
    reader.join(timeout=60)
    if reader.is_alive():  # nothing opened the FIFO to write: let its reader go
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert stat.S_ISFIFO(fifo.stat().st_mode), "the FIFO was replaced"
    assert json.loads(read[0])["traceEvents"] and doc["trace_events"] > 0

    target = tmp_path / "traces" / "t.json"
    target.parent.mkdir()
    target.write_text("old")
    link = tmp_path / "latest.json"
    link.symlink_to(target)
    run_json("bench", str(snapshot), "--epochs", "1", "--trace", str(link))
    assert link.is_symlink() and link.resolve() == target
    assert json.loads(target.read_text())["traceEvents"]
    assert sorted(p.name for p in target.parent.iterdir()) == ["t.json"]  # no part left


def test_a_trace_to_stdout_with_json_is_a_usage_error(snapshot: Path, tmp_path: Path) -> None:
    """``--json --trace /dev/stdout`` printed two JSON documents on a pipe, and redirected to
    a file the trace was written over the summary (exit 0; a probe): now refused before any
    work, whichever way stdout is named. Without --json, the trace goes to stdout as asked."""
    for trace in ("/dev/stdout", "/proc/self/fd/1"):
        proc = snap_subprocess("bench", str(snapshot), "--json", "--trace", trace)
        assert proc.returncode == 2 and proc.stdout == "", proc
        assert f"--trace {trace} is stdout, where --json prints" in proc.stderr
    out = tmp_path / "out.json"
    with out.open("w") as f:
        args = [sys.executable, "-m", "snapshot_cli", "bench", str(snapshot), "--json"]
        code = subprocess.run([*args, "--trace", str(out)], stdout=f, timeout=120).returncode
    assert code == 2 and out.read_text() == ""
    proc = snap_subprocess("bench", str(snapshot), "--epochs", "1", "--trace", "/dev/stdout")
    assert proc.returncode == 0 and '"traceEvents"' in proc.stdout, proc.stderr


def test_a_trace_is_taken_as_a_file_url_too(snapshot: Path, tmp_path: Path) -> None:
    """As OUTPUT and snap.open take it: it made a directory named "file:" and failed."""
    trace = tmp_path / "t.json"
    doc = run_json("bench", str(snapshot), "--epochs", "1", "--trace", f"file://{trace}")
    assert doc["trace"] == str(trace) and json.loads(trace.read_text())["traceEvents"]
    # Refused by its scheme, whether or not that filesystem's package is installed (adlfs is not
    # in the test extras; gcsfs is not in the oldest-dependencies run).
    for url in ("gs://b/t.json", "az://c/t.json"):
        code, _, stderr = run("bench", str(snapshot), "--epochs", "1", "--trace", url)
        assert code == 1 and "a trace is a local file; give a path here" in stderr, stderr


def test_a_trace_that_cannot_be_written_is_said_before_the_replay(
    snapshot: Path, tmp_path: Path
) -> None:
    """It was found when the trace was written, after every epoch had run."""
    trace = tmp_path / "no such dir" / "t.json"
    code, stdout, stderr = run("bench", str(snapshot), "--trace", str(trace))
    assert code == 1 and stdout == "" and "Traceback" not in stderr
    assert f"--trace '{trace}': its directory {trace.parent} does not exist" in stderr
    # a directory: the same kind of fault, the same exit code (it was click's usage error, 2)
    code, stdout, stderr = run("bench", str(snapshot), "--trace", str(tmp_path))
    assert code == 1 and stdout == "" and f"--trace '{tmp_path}' is a directory" in stderr


def test_bench_step_ms_measures_input_bound_share(snapshot: Path) -> None:
    doc = run_json("bench", str(snapshot), "--epochs", "1", "--batch-size", "4", "--step-ms", "2")
    assert doc["step_ms"] == 2.0
    assert 0 <= doc["input_bound_pct"] <= 100
    # Each batch took one 2 ms step at least (seconds are rounded to 0.1 ms).
    assert doc["seconds"] + 1e-4 >= doc["batches"] * 0.002
    code, stdout, _ = run("bench", str(snapshot), "--epochs", "1", "--step-ms", "2")
    assert code == 0 and "(simulated step 2 ms)" in stdout
    # a step of 1e9 ms (11 days a batch) ran until killed; more than a minute is refused
    code, stdout, stderr = run("bench", str(snapshot), "--step-ms", "1e9")
    assert code == 2 and stdout == "" and "0<=x<=60000" in stderr


@pytest.mark.parametrize("option", ["--prefetch", "--shuffle-buffer", "--num-parallel-reads"])
@pytest.mark.parametrize("value", ["zero", "0", "-3", "1.5"])
def test_bench_bad_auto_or_count_is_a_usage_error(snapshot: Path, option: str, value: str) -> None:
    code, stdout, stderr = run("bench", str(snapshot), option, value)
    assert code == 2 and stdout == ""  # a usage error, before the snapshot is even opened
    assert option in stderr and repr(value) in stderr and "Traceback" not in stderr


def test_bench_as_a_real_process(snapshot: Path) -> None:
    proc = snap_subprocess("bench", str(snapshot), "--epochs", "1", "--batch-size", "8", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["records"] == NUM_RECORDS and doc["batches"] == math.ceil(NUM_RECORDS / 8)


def test_bench_processes_decodes_in_processes_or_says_why_not(snapshot: Path) -> None:
    doc = run_json("bench", str(snapshot), "--processes", "1", "--columns", "img,label",
                   "--epochs", "3", "--batch-size", "4")  # fmt: skip
    assert doc["records"] == 3 * NUM_RECORDS and doc["options"]["processes"] == 1
    code, stdout, _ = run("bench", str(snapshot), "--processes", "1", "--columns", "img,label")
    # (said either way: a replay this short is over before the processes have started)
    assert code == 0 and table(stdout.splitlines())["processes"].startswith("1 decode processes, ")
    code, stdout, stderr = run("bench", str(snapshot), "--processes", "1")
    assert code == 1 and "Traceback" not in stderr
    assert "--processes decodes columns of numbers, tensors, timestamps and durations" in stderr
    assert "column 'tokens' is int32[?] (ragged): leave it out" in stderr
    code, _, stderr = run("bench", str(snapshot), "--processes", "-1")
    assert code == 2 and "--processes" in stderr


def test_bench_says_which_compiled_parts_it_has(snapshot: Path) -> None:
    """The suite requires every compiled part and what _decode loads (README, Development)."""
    doc = run_json("bench", str(snapshot), "--epochs", "1")
    assert doc["compiled"] == dict.fromkeys(
        ("gather", "shuffle", "ragged", "decode", "lz4", "zstd", "crc32c_instruction"), True
    )
    code, stdout, _ = run("bench", str(snapshot), "--epochs", "1")
    assert code == 0
    row = table(stdout.splitlines())["compiled"]
    assert row == "gather, shuffle, ragged, decode (lz4, zstd, crc32c instruction)"


def test_bench_says_what_an_install_without_a_compiled_part_lacks(snapshot: Path) -> None:
    """As an install without a C compiler: ``_gather`` cannot be imported. The loader reads
    through slot windows, the same records, and bench says what is missing and why it
    matters."""
    code = (
        "import sys; sys.modules['snapshot_cli._gather'] = None\n"
        "from snapshot_cli.cli import main; main()"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, "bench", str(snapshot), "--epochs", "1", "--no-shuffle"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    rows = table(res.stdout.splitlines())
    assert rows["compiled"].startswith("shuffle, ragged, decode (lz4, zstd, crc32c instruction)")
    assert "missing gather: slower pure-Python paths, the same batches" in rows["compiled"]
    assert rows["replayed"].startswith(f"{NUM_RECORDS} records")


def test_a_compiled_part_older_than_the_code_is_off_everywhere_and_said(snapshot: Path) -> None:
    """An editable install, then a pull that changed the C code: the ``_gather`` built before
    lacks a function the code now calls. The loader ran without it while bench said it was
    there; now both agree, and a warning says how to build it again."""
    code = (
        "import sys, types\n"
        "stale = types.ModuleType('snapshot_cli._gather')\n"
        "stale.__file__ = '/checkout/snapshot_cli/_gather.so'\n"
        "for name in ('Sources', 'discard', 'place', 'populate', 'scatter'):  # no 'drop'\n"
        "    setattr(stale, name, None)\n"
        "sys.modules['snapshot_cli._gather'] = stale\n"
        "from snapshot_cli.cli import main; main()"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, "bench", str(snapshot), "--epochs", "1", "--json"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["compiled"]["gather"] is False and doc["compiled"]["decode"] is True
    assert doc["records"] == NUM_RECORDS
    assert (
        "snap: warning: /checkout/snapshot_cli/_gather.so was built from older sources than "
        "snap's Python code (it lacks drop): snap runs without it, slower; build it again "
        "(pip install -e . in the checkout, or make)"
    ) in res.stderr


@pytest.mark.parametrize("kind", ["file", "file below", "broken link", "loop"])
def test_a_trace_under_a_file_or_a_link_to_nothing_says_so(
    snapshot: Path, tmp_path: Path, kind: str
) -> None:
    """A regular file (or a link to nothing) where --trace's directory is was said not to
    exist."""
    (tmp_path / "afile").write_text("x")
    (tmp_path / "broken").symlink_to(tmp_path / "missing")
    (tmp_path / "loopA").symlink_to("loopB")
    (tmp_path / "loopB").symlink_to("loopA")
    where = {"file": "afile", "file below": "afile/x", "broken link": "broken", "loop": "loopA"}
    trace = tmp_path / where[kind] / "t.json"
    code, stdout, stderr = run("bench", str(snapshot), "--epochs", "1", "--trace", str(trace))
    assert code == 1 and stdout == "" and "Traceback" not in stderr, stderr
    named = tmp_path / where[kind].split("/")[0]
    cause = {
        "file": "is a file, not a directory",
        "file below": "is a file, not a directory",
        "broken link": f"is a broken symbolic link (to {tmp_path / 'missing'}, which does not",
        "loop": "is a loop of symbolic links",
    }[kind]
    assert f"--trace '{trace}': {named} {cause}" in stderr, stderr
    assert "does not exist" not in stderr.replace("which does not exist", ""), stderr
