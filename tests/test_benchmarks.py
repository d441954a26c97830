"""The benchmarks stay runnable: each script answers ``--help`` (its imports of snap's
modules hold: ``validation.py`` imported a function that had moved, and nothing ran it),
each helper module imports, and every option README and docs/ give a benchmark is one it
takes. Running them is ``make bench``'s business, not the suite's."""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import pytest

import snapshot_cli as snap
from tests import forks
from tests.conftest import REPO, wait_for
from tests.writers.test_processes import pid_alive

BENCH = REPO / "benchmarks"
SCRIPTS = sorted(p.name for p in BENCH.glob("*.py") if '__name__ == "__main__"' in p.read_text())
HELPERS = sorted(p.stem for p in BENCH.glob("*.py") if p.name not in SCRIPTS)


@cache
def help_text(script: str) -> str:
    res = bench(script, "--help", timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


def options_of(script: str) -> set[str]:
    """The options ``script`` defines, read from its source and _common's shared parser
    (what its ``--help`` lists, without starting it: a test ran each twice, 12 s)."""
    source = (BENCH / script).read_text() + (BENCH / "_common.py").read_text()
    return set(re.findall(r"add_argument\(\s*\"(--[\w-]+)\"", source))


def test_options_of_reads_what_help_lists() -> None:
    listed = set(re.findall(r"--[\w-]+", help_text("replay.py"))) - {"--help"}
    assert options_of("replay.py") >= listed and len(listed) > 5


def test_there_are_scripts_and_helpers() -> None:
    assert {"replay.py", "device.py", "peers.py", "validation.py"} <= set(SCRIPTS)
    assert {"_common", "cpu_pipeline"} <= set(HELPERS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_each_benchmark_answers_help(script: str) -> None:
    assert "usage" in help_text(script).lower()


def test_each_helper_imports() -> None:
    code = f"import sys; sys.path.insert(0, {str(BENCH)!r}); " + "; ".join(
        f"import {name}" for name in HELPERS
    )
    res = forks.shared().python(["-c", code], REPO, dict(os.environ), 120)
    assert res.returncode == 0, res.stderr[-2000:]


def test_every_option_the_docs_give_a_benchmark_is_one_it_takes() -> None:
    docs = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    given = {
        (script, option)
        for doc in docs
        for script, rest in re.findall(
            r"benchmarks/(\w+\.py)((?: +--?[\w-]+(?: +[\w.=/-]+)?)*)", doc.read_text()
        )  # fmt: skip
        for option in re.findall(r"--[\w-]+", rest)
    }
    assert len(given) > 10  # (the pattern still finds them)
    for script, option in sorted(given):
        assert script in SCRIPTS, f"{script} is not a benchmark script"
        assert option in options_of(script), f"benchmarks/{script} takes no {option}"


def test_a_file_just_written_in_small_pieces_is_not_mapped_in_large_folios(tmp_path: Path) -> None:
    """``_common.large_folio_share``, which replay.py prints: what it reads off the kernel is
    what README says of a shard just written (its pages mapped one by one)."""
    sys.path.insert(0, str(BENCH))
    try:
        import _common
    finally:
        sys.path.remove(str(BENCH))
    path = tmp_path / "written"
    with open(path, "wb", buffering=0) as f:
        for i in range(1024):  # 4 MiB in 4 KiB writes
            f.write(bytes([i % 256]) * 4096)
    if sys.platform != "linux":
        assert _common.large_folio_share(str(path)) is None
        return
    assert _common.large_folio_share(str(path)) == 0.0
    (tmp_path / "empty").write_bytes(b"")
    assert _common.large_folio_share(str(tmp_path / "empty")) is None


def test_peers_refuses_an_unknown_system_before_any_work(tmp_path: Path) -> None:
    """A misspelt system ran every other one and then divided by its 0 records/s."""
    res = subprocess.run([sys.executable, str(BENCH / "peers.py"), "--systems", "snap,tfdata",
                          "--data-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert res.returncode == 2 and "unknown 'tfdata'" in res.stderr and "'tf.data'" in res.stderr
    assert list(tmp_path.iterdir()) == []


def test_peers_import_every_library_an_epoch_uses_before_its_clock() -> None:
    """Each peer's epoch imports its framework; the child imports those first (as it does
    snapshot_cli), or TensorFlow's 3.7 s import was counted as tf.data's reading."""
    sys.path.insert(0, str(BENCH))
    try:
        import peers
    finally:
        sys.path.remove(str(BENCH))
    checked = 0
    for source in (BENCH / "peers.py", BENCH / "peers_tokens.py"):
        body = source.read_text().split("\ndef epoch(", 1)[1].split("\ndef ", 1)[0]
        for branch in re.split(r"\n    (?:el)?if ", body)[1:]:
            system = re.match(r"(?:TOKENS and )?system == \"([^\"]+)\"", branch)
            imported = set(re.findall(r"^\s+import (\w+)", branch, re.M))
            if system and imported:
                assert imported <= set(peers.FRAMEWORKS[system.group(1)]), (source, system)
                checked += 1
    assert checked == 8  # tf.data, hf datasets, litdata, npy + DataLoader in each variant


# --- the faults a tester found (2026-11-30) -----------------------------------------------


def bench(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``python benchmarks/ARGV...``, forked from a server that imported snap once
    (:mod:`tests.forks`): a process of its own, as a user's run."""
    script = [str(BENCH / argv[0]), *argv[1:]]
    return forks.shared().python(script, REPO, dict(os.environ), timeout)


def import_bench(name: str) -> Any:
    sys.path.insert(0, str(BENCH))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCH))


def processes_naming(text: str) -> dict[int, str]:
    """Live processes whose command line holds ``text`` → their command lines."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if text in argv and pid_alive(int(entry.name)):
                found[int(entry.name)] = argv
    return found


@pytest.mark.slow
@pytest.mark.skipif(not (Path(sys.executable).parent / "ray").exists(), reason="needs ray")
def test_create_ray_cluster_stops_the_node_it_started_and_no_other_ray_process() -> None:
    """``create.py --ray`` ended with ``ray stop --force``: every Ray process on the machine
    killed (the user's own cluster or job too), its temp dir made in /tmp whatever --tmpdir
    said. Beside it here runs a process ``ray stop`` takes for Ray's (a ``log_monitor.py``)."""
    create = import_bench("create")
    decoy = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()",
                              "log_monitor.py"], stdin=subprocess.PIPE)  # fmt: skip
    root = tempfile.mkdtemp(prefix="rc-", dir="/tmp")  # short: Ray's socket paths
    try:
        with create.ray_cluster(1, root) as address:
            (temp,) = Path(root).iterdir()  # its temp dir: under the --tmpdir given
            node = processes_naming(str(temp))
            assert any("gcs_server" in argv for argv in node.values()), node
            assert any("raylet" in argv for argv in node.values()), node
            host, port = address.rsplit(":", 1)
            with socket.create_connection((host, int(port)), timeout=60):  # the GCS answers
                pass
        wait_for(lambda: not any(pid_alive(pid) for pid in node), "the node's processes to end")
        assert decoy.poll() is None  # not Ray's: still running
        assert list(Path(root).iterdir()) == []  # its temp dir removed
    finally:
        assert decoy.stdin is not None
        decoy.stdin.close()
        decoy.wait(timeout=60)
        shutil.rmtree(root, ignore_errors=True)


def test_cold_takes_a_data_dir_and_its_help_names_where_data_goes_by_default() -> None:
    """cold.py wrote its 1.5 GB per codec under benchmarks/out/cold-data, with no option to
    put it elsewhere and no word of where (the other benchmarks take --data-dir)."""
    text = " ".join(help_text("cold.py").split())
    assert "--data-dir DIR" in text
    assert str(BENCH / "out" / "cold-data") in text.replace(" ", "")


def test_a_snap_error_ends_a_benchmark_in_one_line_not_a_traceback(tmp_path: Path) -> None:
    """A full disk (snap's StorageError: ENOSPC, run the same command again) ended replay.py
    in a Python traceback; here the snapshot's directory holds something else (snap's
    SnapshotExistsError), as real a snap error, found before any writing."""
    (tmp_path / "zstd-0.2GB").mkdir()
    (tmp_path / "zstd-0.2GB" / "notes.txt").write_text("mine")
    res = bench("replay.py", "--quick", "--codecs", "zstd", "--data-dir", str(tmp_path))
    assert res.returncode == 1, res.stderr[-2000:]
    assert "Traceback" not in res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("replay.py: error: OUTPUT ") and "notes.txt" in last, res.stderr
    assert (tmp_path / "zstd-0.2GB" / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("script", SCRIPTS)
def test_each_benchmark_starts_through_the_shared_entry_point(script: str) -> None:
    """The one place that turns snap's errors into a line: every one of these uses it."""
    guard = (BENCH / script).read_text().split('if __name__ == "__main__":')[-1]
    assert guard.strip() == "_common.run_main(main)"


def test_the_entry_point_prints_a_snap_error_as_one_line_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    common = import_bench("_common")
    monkeypatch.setattr(sys, "argv", [str(BENCH / "replay.py")])
    with pytest.raises(SystemExit) as stop:
        common.run_main(lambda: snap.open(str(tmp_path / "nothing")))
    assert stop.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("replay.py: error: ") and err.count("\n") == 1, err
    with pytest.raises(SystemExit) as stop:
        common.run_main(lambda: 3)
    assert stop.value.code == 3


SMALLEST = {
    "mixtures.py": ["--records", "2000", "--small", "5", "--codecs", "none", "--repeats", "1"],
    "shapes.py": [
        "--shapes",
        "tiny,labels",
        "--codecs",
        "none",
        "--tiny-rows",
        "4000",
        "--labels-rows",
        "4000",
        "--repeats",
        "1",
    ],
    "validation.py": ["--size-gb", "0.002", "--codecs", "none", "--repeats", "1"],
    "small_records.py": ["--rows", "2000", "--codecs", "none", "--repeats", "1"],
    "replay.py": ["--size-gb", "0.01", "--codecs", "none", "--repeats", "1", "--orders"],
    "cold.py": ["--size-gb", "0.002", "--codecs", "none", "--repeats", "1"],
}
LEGEND = {  # what each one's ratio is, and which way is better
    "mixtures.py": "(x: records/s / the large alone's records/s, higher is better",
    "shapes.py": "x base: the loader's records/s / decode + one copy's, in the same repeat "
    "(higher is better",
    "validation.py": "x none: the mode's time / the time without validation (lower is better)",
    "small_records.py": "x base = loader / decode + one copy (rows/s; higher is better)",
    "replay.py": "x copy = GB/s / decode + one copy's GB/s (higher is better",
    "cold.py": "on/off, on/warm: ratios of the epochs' times (lower is better)",
}


@pytest.mark.parametrize("script", sorted(SMALLEST))
def test_a_run_says_where_its_data_is_kept_and_which_way_its_ratios_are_better(
    script: str, tmp_path: Path
) -> None:
    """No benchmark said where its snapshots stay or how big they are (shapes.py and
    mixtures.py not even while writing them); "x base" was a speed ratio in some and a time
    ratio in others, and no output said which."""
    data = tmp_path / "data"
    res = bench(script, *SMALLEST[script], "--data-dir", str(data))
    assert res.returncode in ((0, 2) if script == "cold.py" else (0,)), res.stderr[-3000:]
    assert f"writing {data}" in res.stderr
    last = res.stderr.strip().splitlines()[-1]
    size = sum(f.stat().st_size for f in data.rglob("*") if f.is_file())
    assert last.startswith(f"data kept in {data} ({size / 1e6:.1f} MB)"), res.stderr[-1000:]
    assert size > 0 and "--data-dir" in last
    if res.returncode == 0:  # (cold.py: 2 where nothing is read from a device: tmpfs)
        assert LEGEND[script] in res.stdout, res.stdout


def test_threads_times_both_configurations_and_says_which_way_its_ratio_is_better() -> None:
    res = bench("threads.py", "--inputs", "4", "--size", "32", "--workers", "2", "--repeats", "1")
    assert res.returncode == 0, res.stderr[-2000:]
    for name in ("library defaults", "snap's caps"):
        assert re.search(rf"^  {name} +[0-9.]+ s wall, +[0-9.]+ CPU-s", res.stdout, re.M)
    ratio = re.search(
        r"^library defaults / snap's caps, wall: ([0-9.]+)x \(higher", res.stdout, re.M
    )
    assert ratio is not None and float(ratio.group(1)) > 0, res.stdout


def test_identity_prints_no_rate_for_the_check_that_reads_no_file() -> None:
    """identity.py printed GB/s for "up to date, stat", which reads no byte, and its "x read"
    (a ratio of times: lower is better) read like the speed ratios of the other benchmarks."""
    res = bench("identity.py", "--files", "2", "--mib-per-file", "0.01", "--repeats", "1")
    assert res.returncode == 0, res.stderr[-2000:]
    rows = {line[:24].strip(): line[24:].split() for line in res.stdout.splitlines()}
    assert rows["up to date, stat"][1] == "-"
    assert float(rows["up to date, content"][1]) >= 0  # a rate: the files were read
    assert "x read: the check's time / the baseline read's time (lower is better)" in res.stdout


def test_quick_help_names_the_repeat_once() -> None:
    """shapes.py --help said "--quick  smoke run: small sizes, 1 repeat, 1 repeat"."""
    for script in SCRIPTS:
        if "add_quick_option" in (BENCH / script).read_text():
            text = " ".join(help_text(script).split())
            assert text.count("1 repeat") == 1, (script, text)


def test_replay_with_tokens_runs_and_warns_of_nothing(tmp_path: Path) -> None:
    """``replay.py --tokens`` ended in an error (its processes=2 configurations cannot take a
    ragged column), and every replay run printed snap's warning of a misspelt ragged name
    (``make_records`` declared ``tokens`` whether it yielded them or not)."""
    for tokens in (["--tokens"], []):
        res = bench("replay.py", "--size-gb", "0.005", "--codecs", "none", "--repeats", "1",
                    "--no-tune", "--data-dir", str(tmp_path), *tokens)  # fmt: skip
        assert res.returncode == 0, res.stderr[-3000:]
        assert "snap:" not in res.stderr and "snap: " not in res.stdout, res.stderr[-3000:]
        assert "snap shuffle=True, 2nd epoch" in res.stdout


def test_record_shapes_runs_every_shape(tmp_path: Path) -> None:
    """``record_shapes.py`` failed at its first shape since 2026-11-30 17:57: its by-hand
    writer took every list for a list of text (floats512's lists of floats)."""
    where = tmp_path / "not" / "made"  # (a traceback from mkdtemp before: made now)
    res = bench("record_shapes.py", "--quick", "--scale", "0.05", "--repeats", "2",
                "--tmp", str(where))  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    shown = {line.split()[0] for line in res.stdout.splitlines() if " x hand " in line}
    assert shown == set(record_shapes_names()), res.stdout
    runs = [line.split("(runs ")[1] for line in res.stdout.splitlines() if " x hand " in line]
    assert all(len(r.split()) == 2 for r in runs), runs  # --repeats 2 kept under --quick


def test_incremental_create_writes_its_json(tmp_path: Path) -> None:
    """``create.py --incremental --json FILE`` wrote no file (and --ray was ignored there)."""
    out = tmp_path / "inc.json"
    res = bench("create.py", "--quick", "--incremental", "--repeats", "1", "--json", str(out),
                "--tmpdir", str(tmp_path / "work"))  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert list(doc["incremental"]) == ["full", "add 5%", "change 1"]
    assert all(r["tasks"] >= r["computed"] >= 1 for v in doc["incremental"].values() for r in v)
    res = bench("create.py", "--quick", "--incremental", "--ray")
    assert res.returncode == 2 and "leave out --ray" in res.stderr


def record_shapes_names() -> tuple[str, ...]:
    text = (BENCH / "record_shapes.py").read_text()
    block = text[text.index("SHAPES = (") : text.index(")", text.index("SHAPES = ("))]
    return tuple(re.findall(r'"(\w+)"', block))


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_benchmark_that_keeps_data_says_where(script: str) -> None:
    """remote.py, peers.py, dataloader.py and device.py kept gigabytes in their --data-dir
    without a word (the scripts run above print it: see the test before)."""
    source = (BENCH / script).read_text()
    if "add_data_dir_option(" in source:
        assert "_common.print_data_kept(" in source, script
    assert 'add_argument("--data-dir"' not in source, script  # (only through the helper)


def test_peers_tokens_says_which_systems_it_leaves_out(tmp_path: Path) -> None:
    """--variant tokens dropped the systems that read image columns only without a word."""
    data = tmp_path / "data"
    args = ["--systems", "snap,page-cache read", "--variant", "tokens", "--size-gb", "0.002"]
    res = bench("peers.py", *args, "--repeats", "1", "--data-dir", str(data))
    assert res.returncode == 0, res.stderr[-3000:]
    assert "--variant tokens: leaving out page-cache read" in res.stderr
    assert res.stderr.strip().splitlines()[-1].startswith(f"data kept in {data} (")
    assert "page-cache read" not in res.stdout and "snap" in res.stdout


def test_floor_times_only_modes_that_deliver_every_record_once(tmp_path: Path) -> None:
    """``floor.py`` reports C programs as the floor of a shuffled epoch: each mode is first
    run with checks against Python's digests of the same shards (every record delivered once,
    every record batch checksummed). A table one record off, or with a record batch's body cut
    short, makes the program copy or check other bytes: the check must say so, or the floor
    could be the rate of work it did not do."""
    out = tmp_path / "floor.json"
    res = bench("floor.py", "--size-gb", "0.005", "--repeats", "1", "--window-mb", "1",
                "--data-dir", str(tmp_path), "--json", str(out))  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    floor, common = import_bench("floor"), import_bench("_common")
    rates = json.loads(out.read_text())["medians_gbps"]
    assert set(rates) == set(floor.CONFIGS) and all(v > 0 for v in rates.values()), rates
    s = snap.open(common.snapshot_path(str(tmp_path), "none", 0.005, False))
    paths = common.shard_paths(s)
    binary = floor.build(str(tmp_path))  # built by the run: found again, not rebuilt
    assert binary.startswith(str(tmp_path)) and os.access(binary, os.X_OK)
    table = str(tmp_path / "table.bin")
    expected = floor.write_table(paths, table)
    floor.check_floor(binary, 1, table, paths, expected, s.num_records)  # the true table
    good = Path(table).read_bytes()
    ncols = struct.unpack_from("<q", good)[0]
    first = 8 * (1 + ncols)  # the first record batch: file, records, body, body length, columns
    width = struct.unpack_from("<q", good, 8)[0]  # of the first column
    for field, shift, said in ((4, width, "column digests"), (3, -64, "crc32c")):
        bad = bytearray(good)
        at = first + 8 * field
        struct.pack_into("<q", bad, at, struct.unpack_from("<q", bad, at)[0] + shift)
        Path(table).write_bytes(bytes(bad))
        with pytest.raises(snap.SnapError, match=said):
            floor.check_floor(binary, 1, table, paths, expected, s.num_records)
    bad = bytearray(good)  # a column past its file's end: said, not a crash
    struct.pack_into("<q", bad, first + 8 * 4, 1 << 40)
    Path(table).write_bytes(bytes(bad))
    with pytest.raises(common.ChildError, match="record batch 0 of the table reaches past the end"):
        floor.check_floor(binary, 1, table, paths, expected, s.num_records)
