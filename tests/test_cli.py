"""The command line through CliRunner, and once as real processes (entry points, README)."""

from __future__ import annotations

import glob as globmod
import io
import json
import logging
import math
import os
import shutil
import subprocess
import sys
import traceback
import warnings
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli.cli import cli
from snapshot_cli.cli_io import answer_errors, route_warnings
from snapshot_cli.errors import OptionError
from snapshot_cli.writers.params import parse_params
from snapshot_cli.writers.worker import rebuild_error
from tests.conftest import REPO, snap_subprocess

PIPE = """
import numpy as np

def preprocess(path, *, size=2, tag="t"):
    with open(path) as f:
        i = int(f.read())
    print("decoded", path)  # must not end up in --json's stdout
    yield {"img": np.full((size, size), i, np.uint8), "label": i, "tag": tag}
"""


@pytest.fixture
def setup(tmp_path: Path, write_pipeline) -> tuple[str, str, Path]:  # type: ignore[no-untyped-def]
    spec = write_pipeline(PIPE)
    (tmp_path / "in").mkdir()
    for i in range(5):
        (tmp_path / "in" / f"{i}.txt").write_text(str(i))
    return spec, str(tmp_path / "in" / "*.txt"), tmp_path


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_create_json_then_reuse_then_inspect(setup) -> None:  # type: ignore[no-untyped-def]
    spec, glob, tmp = setup
    out = str(tmp / "s")
    code, stdout, stderr = run("create", spec, out, "--input", glob, "--param", "size=3", "--json")
    assert code == 0, stderr
    doc = json.loads(stdout)  # stdout holds one JSON document and nothing else
    assert {
        "num_records",
        "num_shards",
        "bytes",
        "uncompressed_bytes",
        "seconds",
        "reused",
    } <= doc.keys()
    assert (doc["num_records"], doc["reused"]) == (5, False)

    code, stdout, stderr = run("create", spec, out, "--input", glob, "--param", "size=3")
    assert code == 0 and stdout.startswith("up to date:")
    assert "nothing to do" in stderr
    code, stdout, _ = run("create", spec, out, "--input", glob, "--param", "size=3", "--json")
    again = json.loads(stdout)  # (README: reused, no run: its task counts are 0)
    assert again["reused"] and again["fingerprint"] == doc["fingerprint"], again
    assert [again[k] for k in ("tasks", "tasks_reused", "tasks_resumed")] == [0, 0, 0]
    code, stdout, _ = run("create", spec, out + "-new", "--input", glob, "--dry-run", "--json")
    planned = json.loads(stdout)  # (README: of a snapshot not made yet, "" and 0)
    assert (planned["fingerprint"], planned["run"], planned["num_records"]) == ("", "", 0)
    assert planned["tasks"] > 0 and not planned["reused"], planned

    code, stdout, _ = run("inspect", out, "--json")
    info = json.loads(stdout)
    assert info["num_records"] == 5 and info["compression"] == {"codec": "zstd", "level": 1}
    assert info["schema"][0] == {"name": "img", "kind": "tensor", "dtype": "uint8", "shape": [3, 3]}
    assert info["pipeline"]["params"] == {"size": 3}

    code, stdout, _ = run("inspect", out, "--shards")
    assert code == 0
    assert "img" in stdout and "uint8[3,3]" in stdout and "records" in stdout and ".arrow" in stdout


def test_progress_on_stderr_unless_quiet(setup) -> None:  # type: ignore[no-untyped-def]
    spec, glob, tmp = setup
    code, stdout, stderr = run("create", spec, str(tmp / "a"), "--input", glob, "--workers", "0")
    assert code == 0 and "tasks 5/5" in stderr and "records 5" in stderr
    assert stdout.startswith("created:")
    assert "(larger on disk than its values: " in stdout.splitlines()[1]  # (a hint)
    code, quiet_out, stderr = run(
        "create", spec, str(tmp / "b"), "--input", glob, "--workers", "0", "--quiet"
    )
    assert code == 0 and "snap:" not in stderr  # only the pipeline's own prints
    assert len(quiet_out.splitlines()) == 1 and quiet_out.startswith("created:")  # (no hint)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--param", "size=-1"], "ValueError on input"),
        (["--input", "/nonexistent/*.jpg"], "matched no files"),
        (["--input", "--overwrite"], "(--overwrite is an option: --input took it as its value"),
    ],
)
def test_errors_exit_1_with_message_and_no_traceback(setup, args: list[str], message: str) -> None:  # type: ignore[no-untyped-def]
    spec, glob, tmp = setup
    extra = [] if "--input" in args else ["--input", glob]
    code, stdout, stderr = run("create", spec, str(tmp / "s"), *extra, "--workers", "0", *args)
    assert code == 1
    assert message in stderr and "snap: error:" in stderr
    assert "Traceback (most recent call last)" not in stderr.split("ValueError on input")[0]
    assert stdout == ""
    assert not (tmp / "s" / "manifest.json").exists()


def test_debug_shows_the_traceback(setup) -> None:  # type: ignore[no-untyped-def]
    spec, _, tmp = setup
    create = ["create", "nope.py:f", str(tmp / "s")]
    # before the command, or after it (where a user adds it when an error says to)
    for args in (["--debug", *create], [*create, "--debug"], ["create", "--debug", *create[1:]]):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 1 and result.exc_info is not None, args
        assert type(result.exception).__name__ == "PipelineLoadError"
    # after "--" it is an argument like any other
    result = CliRunner().invoke(cli, ["inspect", "--", "--debug"])
    assert result.exit_code == 1 and "snap: error:" in result.stderr


def _command(fail: BaseException) -> click.Command:
    """A command that fails as ``fail``, through the same error answering as snap's own."""

    @click.command()
    @click.pass_context
    @answer_errors
    def failing(ctx: click.Context) -> None:
        raise fail

    return failing


@pytest.mark.parametrize("debug", [False, True])
@pytest.mark.parametrize(
    ("fail", "said"),
    [
        (KeyError("k"), "unexpected KeyError: 'k'"),
        (ValueError("two\nlines"), "unexpected ValueError: two lines"),
        (AttributeError(), "unexpected AttributeError (a bug in snap"),
    ],
)
def test_an_unexpected_error_is_one_line_unless_debug(
    fail: Exception, said: str, debug: bool
) -> None:
    result = CliRunner().invoke(_command(fail), [], obj={"debug": debug})
    if debug:
        assert result.exception is fail  # the traceback, as asked
        return
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("snap: error: " + said), lines
    assert "--debug" in lines[0] and "Traceback" not in result.output


def _worker_bug() -> BaseException:
    """A worker's unexpected error as the parent raises it again: its whole traceback."""

    def deep(n: int) -> int:
        return deep(n + 1) + 1

    try:
        deep(0)
    except RecursionError:
        return rebuild_error({"type": "internal", "message": traceback.format_exc()})
    raise AssertionError("no RecursionError")


def test_a_worker_processs_bug_is_said_in_one_short_line() -> None:
    """Its traceback was the message: a RecursionError's made one line of 182 KB."""
    fail = _worker_bug()
    result = CliRunner().invoke(_command(fail), [], obj={"debug": False})
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "snap: error: unexpected RuntimeError: internal error in a worker process (a bug in "
        "snap): RecursionError: maximum recursion depth exceeded (a bug in snap: run with "
        "--debug for the traceback, and please report it)"
    ]
    debug = CliRunner().invoke(_command(fail), [], obj={"debug": True})
    assert debug.exception is fail and "Traceback (most recent call last)" in str(fail)


@pytest.mark.parametrize(
    ("fail", "said"),
    [
        (MemoryError(), "out of memory (MemoryError); give this process more memory"),
        (MemoryError("Unable to allocate 3.00 GiB"), "out of memory (Unable to allocate 3.00 GiB)"),
        (RuntimeError("can't start new thread"), "snap: no thread could be started"),
        (__import__("pyarrow").ArrowException("Unknown error: Failed to launch worker thread: "
                                              "Resource temporarily unavailable"),
         "snap: no thread could be started (Unknown error: Failed to launch"),
    ],
)  # fmt: skip
def test_a_limit_no_layer_named_is_no_bug(fail: Exception, said: str) -> None:
    """A MemoryError or a thread that could not start, from anywhere in a command, is the
    process's limit said in one line ("unexpected MemoryError (a bug in snap ...)" was)."""
    result = CliRunner().invoke(_command(fail), [], obj={"debug": False})
    lines = result.stderr.splitlines()
    assert result.exit_code == 1 and len(lines) == 1, lines
    assert lines[0].startswith("snap: error: " + said) and "ulimit" in lines[0], lines
    assert "bug in snap" not in lines[0]


@pytest.mark.parametrize(
    ("text", "short"),
    [
        ("/x/_compute.so: failed to map segment from shared object", True),
        ("/x/_compute.so: cannot map zero-fill pages", True),
        ("/x/_compute.so: cannot create shared object descriptor: Cannot allocate memory", True),
        ("/x/libarrow.so.1900: cannot allocate memory in static TLS block", False),
        ("numpy.core.multiarray failed to import", False),
        ("/x/_compute.so: undefined symbol: _ZN5arrow6StatusC1Ev", False),
    ],
)
def test_a_library_with_no_room_to_load_is_memory_not_versions(text: str, short: bool) -> None:
    """The dynamic loader's ENOMEM (``snap bench`` under ``ulimit -v``: pyarrow's compute
    library, imported as the first record batch was flattened) was said as packages whose
    versions do not work together; a missing symbol or a failed import still is."""
    result = CliRunner().invoke(_command(ImportError(text)), [], obj={"debug": False})
    lines = result.stderr.splitlines()
    assert result.exit_code == 1 and len(lines) == 1, lines
    assert ("out of memory (a library could not be loaded" in lines[0]) is short, lines
    assert ("versions do not work together" in lines[0]) is not short, lines
    assert text in lines[0]


NO_ROOM_TO_LOAD = """
import resource, sys
import click
import pyarrow
from snapshot_cli.cli_io import answer_errors


@click.command()
@click.option("--load", is_flag=True)
@answer_errors
def failing(load):
    if load:
        import pyarrow._flight  # (libarrow_flight: ~30 MB to map, not loaded yet)


failing([], obj={"debug": False}, standalone_mode=False)  # (click's own memory, made now)
vm = next(int(x.split()[1]) * 1024 for x in open("/proc/self/status") if x.startswith("VmSize"))
resource.setrlimit(resource.RLIMIT_AS, (vm + (8 << 20), resource.RLIM_INFINITY))
failing(["--load"], obj={"debug": False})
"""


def test_a_command_with_no_room_to_load_a_library_says_so(tmp_path: Path) -> None:
    """A real loader's ENOMEM, the address space full: the answer imports nothing more
    (importing fsspec for it failed the same way, a traceback)."""
    (tmp_path / "child.py").write_text(NO_ROOM_TO_LOAD)
    res = subprocess.run(
        [sys.executable, str(tmp_path / "child.py")], capture_output=True, text=True,
        timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.startswith("snap: error: out of memory (a library could not be loaded: ")
    assert "failed to map segment" in res.stderr and "ulimit -v" in res.stderr, res.stderr


def test_click_s_own_exits_pass_through() -> None:
    result = CliRunner().invoke(_command(click.UsageError("bad option")), [], obj={})
    assert result.exit_code == 2 and "bad option" in result.stderr


HELP_SCRIPT = """
import contextlib, io, json, sys
import snapshot_cli as snap
from snapshot_cli.cli import cli

said = {}
for args in [["--help"], ["--version"]] + [[name, "--help"] for name in sorted(cli.commands)]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(args, prog_name="snap", standalone_mode=False)
    said[" ".join(args)] = [code, out.getvalue()]
heavy = sorted(m for m in ("numpy", "pyarrow", "fsspec", "pandas") if m in sys.modules)
print(json.dumps({"said": said, "heavy": heavy}))
"""


def test_help_and_version_import_no_data_library() -> None:
    """`snap --help`, `--version` and every command's `--help` answer without importing numpy,
    pyarrow or fsspec (they took 0.4 s of the 0.6 s `snap --help` took)."""
    done = subprocess.run([sys.executable, "-c", HELP_SCRIPT], capture_output=True, text=True,
                          cwd=REPO, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(out["said"]) == 2 + len(cli.commands) >= 8
    for args, (code, text) in out["said"].items():
        assert code == 0 and text.startswith("Usage: snap" if "help" in args else "snap"), args
    assert out["heavy"] == [], out["heavy"]


@pytest.mark.parametrize("debug", [False, True])
def test_warnings_are_one_line_unless_debug(debug: bool, capsys: pytest.CaptureFixture) -> None:  # type: ignore[type-arg]
    """A warning (processes= beyond the cores, batches kept) was Python's two lines: snap's
    file and line number, then a line of snap's source."""
    with warnings.catch_warnings():  # restores warnings.showwarning after
        warnings.simplefilter("always")
        before = warnings.showwarning
        route_warnings(debug)
        replaced = warnings.showwarning is not before
        if not debug:  # raised by snap's code (here compiled as a line of a module of snap's)
            snaps = str(Path(snap.__file__).parent / "readers" / "procs.py")
            code = 'warnings.warn("processes=3 on 2 cores:\\n decode processes", stacklevel=2)'
            exec(compile(code, snaps, "exec"), {"warnings": warnings})
    err = capsys.readouterr().err
    if debug:
        assert not replaced  # Python's own form (here pytest's, which records it)
    else:
        assert err == "snap: warning: processes=3 on 2 cores: decode processes\n"


def test_library_logs_go_to_the_stderr_of_the_moment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A command run in-process (CliRunner) swaps sys.stderr and closes its own after: a
    record logged later goes to the stderr in place then, not to a closed stream."""
    monkeypatch.setattr(logging, "lastResort", logging.lastResort)  # (restored after)
    CliRunner().invoke(cli, ["inspect", "/nonexistent/snapshot"])
    now = io.StringIO()
    monkeypatch.setattr(sys, "stderr", now)
    for name in ("gcsfs.core", "somelib"):  # (pytest's handlers on the root: called directly)
        record = logging.makeLogRecord(
            {"name": name, "msg": "after the command", "levelno": logging.WARNING}
        )
        logging.lastResort.handle(record)  # type: ignore[union-attr]
    assert now.getvalue() == "snap: gcsfs.core: after the command\nafter the command\n"


def test_usage_errors_exit_2(setup) -> None:  # type: ignore[no-untyped-def]
    spec, glob, tmp = setup
    code, _, stderr = run("create", spec, str(tmp / "s"), "--compression", "gzip")
    assert code == 2 and "gzip" in stderr
    code, _, _ = run("create", spec)
    assert code == 2


SPEC_TEXT = st.text(st.sampled_from(":./_ab1é"), max_size=12)


@settings(max_examples=60, deadline=None)
@given(spec=SPEC_TEXT, which=st.sampled_from(["PIPELINE", "--inputs-from"]))
def test_a_spec_that_names_no_function_is_a_usage_error(spec: str, which: str) -> None:
    """A PIPELINE or --inputs-from that cannot name a function, whatever the files ('',
    'pipe.py', ':f', 'p.py::f'), was exit 1 where a malformed --param is exit 2; now every
    one is a usage error, before anything is written. A spec of the right form is left to
    the import (a module or file that is not there: exit 1)."""
    from snapshot_cli.errors import PipelineLoadError
    from snapshot_cli.writers.importing import check_spec

    try:
        check_spec(spec, which)
        named = True
    except PipelineLoadError:
        named = False
    pipeline, inputs_from = (spec, "nowhere.py:items") if which == "PIPELINE" else (
        "nowhere.py:f", spec)  # fmt: skip
    res = CliRunner().invoke(cli, ["create", pipeline, "memory://never", "--inputs-from",
                                   inputs_from, "--workers", "0"])  # fmt: skip
    said = f"{which} {spec!r} must look like path/to/file.py:function"
    assert (res.exit_code, said in res.output) == ((1, False) if named else (2, True)), res.output


@pytest.mark.parametrize("spec", ["p.py:f:g", "pkg.mod:f:g", "a:b:c", "p.py::f"])
def test_a_spec_of_two_colons_is_a_usage_error(spec: str) -> None:
    """``p.py:f:g`` was exit 1, "pipeline module 'p.py:f' not found"; a file whose name
    holds a colon (``runs:v2/prep.py:f``) is still a file."""
    from snapshot_cli.writers.importing import check_spec

    res = CliRunner().invoke(cli, ["create", spec, "memory://never", "--workers", "0"])
    assert res.exit_code == 2, res.output
    assert f"PIPELINE {spec!r} must look like path/to/file.py:function" in res.output
    check_spec("runs:v2/prep.py:f")  # (no error)


@pytest.mark.parametrize(
    ("spec", "meant"),
    [("pipe.preprocess", "pipe:preprocess"), ("pkg.mod.fn", "pkg.mod:fn"), ("pipe.py", None),
     ("a.", None), (".f", None), ("a.b-c", None)],
)  # fmt: skip
def test_a_dot_for_the_colon_is_said(spec: str, meant: str | None) -> None:
    """`snap create pipe.preprocess ...` got only "must look like ..." (a CLI probe)."""
    res = CliRunner().invoke(cli, ["create", spec, "memory://never", "--inputs-from", "x.py:f"])
    assert res.exit_code == 2, res.output
    hint = f"did you mean '{meant}'?" if meant else "did you mean"
    assert (hint in res.output) == (meant is not None), res.output


def test_other_malformed_create_arguments_are_usage_errors(tmp_path: Path) -> None:
    """An empty --input ('' names nothing, as an empty OUTPUT, already exit 2) and a --param
    the locale could not decode (as --columns) were exit 1."""
    base = ["create", "p.py:f", str(tmp_path / "s"), "--workers", "0"]
    res = CliRunner().invoke(cli, [*base, "--input", "a.txt", "--input", ""])
    assert res.exit_code == 2 and "--input '' is an empty path" in res.output, res.output
    undecoded = "name=\udcc3\udca9"  # (what Python makes of 'é' under LC_ALL=C PYTHONUTF8=0)
    res = CliRunner().invoke(cli, [*base, "--input", "a.txt", "--param", undecoded])
    assert res.exit_code == 2 and "is not valid UTF-8" in res.output, res.output  # (this
    assert not (tmp_path / "s").exists()  # process's locale is UTF-8: bytes no text is made of)


def test_inspect_not_a_snapshot_and_unfinished(tmp_path: Path) -> None:
    code, _, stderr = run("inspect", str(tmp_path))
    assert code == 1 and "is not a snapshot (no manifest.json)" in stderr
    run_dir = tmp_path / "_runs" / "abc"
    (run_dir / "tasks").mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"run": "abc", "plan": [[0, 1], [1, 2]]}))
    (run_dir / "tasks" / "00000.json").write_text(json.dumps({"run": "abc", "task": 0}))
    code, stdout, _ = run("inspect", str(tmp_path))
    assert code == 0 and "unfinished snapshot" in stdout and "1/2 tasks done" in stdout
    code, stdout, _ = run("inspect", str(tmp_path), "--json")
    [state] = json.loads(stdout)["runs"]
    assert (state["run"], state["tasks_done"], state["tasks"]) == ("abc", 1, 2)


def test_entry_points_are_real_processes(setup) -> None:  # type: ignore[no-untyped-def]
    spec, glob, tmp = setup
    proc = snap_subprocess("create", spec, str(tmp / "s"), "--input", glob, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["num_records"] == 5
    assert proc.stderr.count("decoded") == 5
    for exe in ("snap", "snapshot-cli"):
        path = Path(sys.executable).parent / exe
        assert path.exists(), f"entry point {exe} not installed next to {sys.executable}"
        res = subprocess.run([str(path), "inspect", str(tmp / "s"), "--json"], capture_output=True,
                             text=True, check=False)  # fmt: skip
        assert res.returncode == 0 and json.loads(res.stdout)["num_records"] == 5
    bad = snap_subprocess("create", "missing.py:f", str(tmp / "t"))
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert "pipeline file 'missing.py' not found" in bad.stderr


@pytest.mark.slow
def test_readme_quickstart_commands_run(tmp_path: Path) -> None:
    """The commands `make demo` runs (and README shows) work from a clean copy of the repo."""
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    demo = tmp_path / "demo-output"
    py = sys.executable
    steps = [
        [py, "examples/quickstart/make_inputs.py", str(demo / "raw"), "50"],
        [py, "-m", "snapshot_cli", "create", "examples/quickstart/pipeline.py:preprocess",
         str(demo / "snapshot"), "--input", str(demo / "raw" / "*.bin"), "--param", "size=64"],
        [py, "-m", "snapshot_cli", "inspect", str(demo / "snapshot")],
        [py, "examples/quickstart/replay.py", str(demo / "snapshot")],
    ]  # fmt: skip
    for cmd in steps:
        res = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, check=False)
        assert res.returncode == 0, f"{cmd}: {res.stderr}"
    assert "replayed 50 records" in res.stdout
    # The README's tour of the inspection commands runs as shown on the demo snapshot.
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## Looking at a snapshot") :]
    block = section[
        section.index("```bash") + 7 : section.index("```", section.index("```bash") + 7)
    ]
    commands = [line.split("#")[0].split() for line in block.strip().splitlines()]
    assert [c[:2] for c in commands] == [
        ["snap", n] for n in ("inspect", "inspect", "verify", "head", "inspect", "bench", "gc")
    ]
    for cmd in commands:
        args = []
        for arg in cmd[1:]:  # as the shell expands a glob: to the one shard it matches
            matched = sorted(globmod.glob(arg, root_dir=tmp_path)) if "*" in arg else [arg]
            assert len(matched) == 1, (arg, matched)
            args += matched
        res = subprocess.run(
            [py, "-m", "snapshot_cli", *args],
            cwd=tmp_path, capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert res.returncode == 0, f"{cmd}: {res.stderr}"
    assert (tmp_path / "trace.json").exists()


def test_an_input_pattern_the_shell_expanded_is_told_to_be_quoted(setup) -> None:  # type: ignore[no-untyped-def]
    """``--input in/*.txt`` unquoted: bash gives --input the first file and leaves the rest as
    extra arguments (click said only "Got unexpected extra arguments")."""
    spec, glob, tmp = setup
    snap_bin = Path(sys.executable).parent / "snap"
    for line in (f"{snap_bin} create {spec} {tmp}/s --input {glob}",
                 f"{snap_bin} create --input {glob} {spec} {tmp}/s"):  # fmt: skip
        res = subprocess.run(["bash", "-c", line], capture_output=True, text=True, check=False)
        assert res.returncode == 2 and res.stdout == ""
        assert "your shell expanded an unquoted --input pattern into files, and --input took " \
            f"only the first ({tmp}/in/0.txt); quote the pattern" in res.stderr  # fmt: skip
        # (the pattern shown is one like the user's: it said 'data/*.bin' whatever was given)
        assert f"so that snap expands it: --input '{tmp}/in/*.txt'" in res.stderr, res.stderr
        assert not (tmp / "s").exists()
    code, _, stderr = run("create", spec, str(tmp / "s"), "--input", glob, "extra", "more")
    assert code == 2 and "Got unexpected extra arguments (extra more)\n" in stderr
    code, _, stderr = run("create", spec, str(tmp / "s"), glob.replace("*", "1"))
    assert code == 2 and "Got unexpected extra argument (" in stderr and "shell" not in stderr
    quoted = f"{snap_bin} create {spec} {tmp}/s --input '{glob}' --workers 0 --quiet"
    assert subprocess.run(["bash", "-c", quoted], check=False).returncode == 0


def test_reuse_with_another_layout_says_so(setup) -> None:  # type: ignore[no-untyped-def]
    spec, glob, tmp = setup
    out = str(tmp / "s")
    assert (
        run("create", spec, out, "--input", glob, "--workers", "0", "--inputs-per-task", "5")[0]
        == 0
    )
    code, stdout, stderr = run("create", spec, out, "--input", glob, "--compression", "lz4")
    assert code == 0 and stdout.startswith("up to date:")
    assert "compressed with" in stderr and "--overwrite" in stderr
    # Every other layout option given that the snapshot shows is not its own is named too
    # (they were ignored without a word); one it may be its own is not (a nightly create
    # given its usual options was told so every night).
    shards = snap.open(out).shards
    rows = max(r for s in shards for r, _ in s.batch_rows)
    for option, value in (("--shard-size", f"{max(s.bytes for s in shards) // 3}B"),
                          ("--batch-rows", str(rows - 1)), ("--inputs-per-task", "2")):  # fmt: skip
        code, stdout, stderr = run("create", spec, out, "--input", glob, option, value)
        assert code == 0 and stdout.startswith("up to date:")
        assert f"note: {option} shapes the shards" in stderr and "--overwrite" in stderr
    assert rows == 5  # (one task: one record batch of the 5 records)
    for option, value in (("--shard-size", "256MiB"), ("--shard-size", "1MiB"),
                          ("--batch-rows", "5"), ("--inputs-per-task", "5")):  # fmt: skip
        code, _, stderr = run("create", spec, out, "--input", glob, option, value)
        assert code == 0 and "note:" not in stderr, (option, value)


def test_different_params_say_the_cli_option(setup) -> None:  # type: ignore[no-untyped-def]
    """A CLI message said "pass --overwrite (overwrite=True)", the Python spelling too."""
    spec, glob, tmp = setup
    out = str(tmp / "s")
    assert run("create", spec, out, "--input", glob, "--workers", "0")[0] == 0
    code, _, stderr = run("create", spec, out, "--input", glob, "--param", "size=3")
    assert code == 1 and "different params (size: not given then, 3 now" in stderr
    assert "pass --overwrite to replace it" in stderr and "overwrite=True" not in stderr


def test_auto_and_choices_take_any_case(setup) -> None:  # type: ignore[no-untyped-def]
    """``--compression ZSTD`` was taken and ``--shuffle-buffer AUTO`` or ``--executor RAY``
    refused (a CLI probe)."""
    spec, glob, tmp = setup
    out = str(tmp / "s")
    code, _, stderr = run("create", spec, out, "--input", glob, "--executor", "LOCAL")
    assert code == 0, stderr
    auto = ("--shuffle-buffer", "AUTO", "--prefetch", "Auto", "--num-parallel-reads", "aUTO")
    code, stdout, stderr = run("bench", out, *auto, "--epochs", "1", "--json")
    assert code == 0, stderr
    assert json.loads(stdout)["records_per_s"] > 0


def test_batch_bytes_shapes_record_batches(setup) -> None:  # type: ignore[no-untyped-def]
    """``batch_bytes=`` had no CLI option: records of many small columns or large ones could
    not be laid out from the shell as from Python."""
    spec, glob, tmp = setup
    common = ("--input", glob, "--param", "size=32", "--inputs-per-task", "5", "--workers", "0")
    small, large = str(tmp / "small"), str(tmp / "large")  # records of 1 KiB each
    assert run("create", spec, small, *common, "--batch-bytes", "2KiB")[0] == 0
    assert run("create", spec, large, *common)[0] == 0
    rows = {out: [r for s in snap.open(out).shards for r, n in s.batch_rows for _ in range(n)]
            for out in (small, large)}  # fmt: skip
    assert max(rows[small]) <= 2 and sum(rows[small]) == 5 and rows[large] == [5]
    code, stdout, stderr = run("create", spec, large, *common, "--batch-bytes", "1KiB")
    assert code == 0 and stdout.startswith("up to date:")
    assert "note: --batch-bytes shapes the shards" in stderr and "--overwrite" in stderr
    code, _, stderr = run("create", spec, large, *common, "--batch-bytes", "1MiB")
    assert code == 0 and "note:" not in stderr
    code, _, stderr = run("create", spec, large, *common, "--batch-bytes", "lots")
    assert code == 2 and "--batch-bytes" in stderr
    # Records larger than the target make batches of one record over it, under any
    # --batch-bytes: not a layout to rewrite (the note came every run, after --overwrite too).
    big = str(tmp / "big")
    assert run("create", spec, big, *common, "--batch-bytes", "100B")[0] == 0
    code, stdout, stderr = run("create", spec, big, *common, "--batch-bytes", "100B")
    assert code == 0 and stdout.startswith("up to date:") and "note:" not in stderr, stderr


@pytest.mark.parametrize(
    ("command", "name"),
    [
        (["snapshot-cli"], "snapshot-cli"),
        (["snap"], "snap"),
        ([sys.executable, "-m", "snapshot_cli"], "python -m snapshot_cli"),
    ],
)
def test_help_shows_the_name_it_was_run_by(command: list[str], name: str) -> None:
    if command[0] in ("snap", "snapshot-cli"):
        command = [str(Path(sys.executable).parent / command[0])]
    res = subprocess.run([*command, "--help"], capture_output=True, text=True, check=False)
    assert res.returncode == 0 and res.stdout.startswith(f"Usage: {name} [OPTIONS] COMMAND")


def test_nothing_tracked_is_also_ignored() -> None:
    res = subprocess.run(
        ["git", "ls-files", "--cached", "--ignored", "--exclude-standard"],
        cwd=REPO, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert res.stdout == ""


def test_a_param_python_cannot_parse_is_a_usage_answer(tmp_path: Path) -> None:
    (tmp_path / "x.py").write_text("def f(n, m: int = 0):\n    yield {'n': n}\n")
    for key, said in [("n", "--param n: "), ("m", "annotates m as int; give an integer")]:
        spec = f"{tmp_path / 'x.py'}:f"
        res = snap_subprocess(
            "create", spec, str(tmp_path / "s"), "--param", f"{key}=" + "9" * 5000
        )
        assert res.returncode == 1 and "Traceback" not in res.stderr
        assert said in res.stderr and len(res.stderr) < 500


@settings(max_examples=300, deadline=None)
@given(raw=st.text() | st.sampled_from(["NaN", "-Infinity", "[1,NaN]", '{"a": Infinity}', "1e999"]))
def test_a_param_value_is_strict_json_or_else_the_string_given(raw: str) -> None:
    """JSON as RFC 8259 has it (Python's json also reads NaN and Infinity, which the manifest
    cannot hold): what parses is that value, Python's True, False and None theirs, anything
    else the string as given (for a KEY the function does not annotate: tests/writers/
    test_params.py)."""
    try:
        value = parse_params([f"k={raw}"])["k"]
    except OptionError as err:  # only what Python cannot hold: a 5,000-digit int, deep nesting
        assert str(err).startswith("--param k: ")
        return
    json.dumps(value, allow_nan=False)  # it can be kept in the manifest

    def finite(text: str) -> float:
        assert math.isfinite(float(text)), "1e999: a float overflows to inf"
        return float(text)

    try:
        strict = json.loads(raw, parse_constant=lambda name: 1 / 0, parse_float=finite)
    except (ValueError, ZeroDivisionError, AssertionError):  # (Python's constants are theirs)
        assert value == {"True": True, "False": False, "None": None}.get(raw.strip(), raw)
    else:
        assert value == strict


@pytest.mark.parametrize("command", ["inspect", "verify", "head", "gc", "create"])
def test_hdfs_without_a_hadoop_client_is_one_line_saying_what_to_set(
    tmp_path: Path, command: str
) -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in ("JAVA_HOME", "ARROW_LIBHDFS_DIR", "CLASSPATH", "HADOOP_HOME")}  # fmt: skip
    env["JAVA_HOME"] = str(tmp_path / "no-java-here")
    (tmp_path / "pipe.py").write_text("def f(i):\n    yield {'i': i}\n")
    url = "hdfs://127.0.0.1:9/snap"
    args = [f"{tmp_path}/pipe.py:f", url, "--input", str(tmp_path / "pipe.py")] if (
        command == "create") else [url]  # fmt: skip
    res = subprocess.run([sys.executable, "-m", "snapshot_cli", command, *args],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
                         check=False)  # fmt: skip
    assert res.returncode == 1, res.stderr
    assert "Traceback" not in res.stderr
    errors = [line for line in res.stderr.splitlines() if line.startswith("snap: error:")]
    assert len(errors) == 1, res.stderr
    assert f"cannot open {url}" in errors[0]
    assert "ARROW_LIBHDFS_DIR" in errors[0] and "webhdfs://" in errors[0]


@pytest.mark.parametrize("value", ["huge", "0", "-1MiB", "1.5XB"])
def test_a_bad_size_is_a_usage_error(setup, value: str) -> None:  # type: ignore[no-untyped-def]
    spec, glob, tmp = setup
    code, stdout, stderr = run("create", spec, str(tmp / "s"), "--input", glob, "--shard-size",
                               value)  # fmt: skip
    assert code == 2 and stdout == ""
    assert "--shard-size" in stderr and "Traceback" not in stderr
    assert not (tmp / "s").exists()


def test_another_tools_command_is_told_snaps() -> None:
    from snapshot_cli.cli_types import OTHER_ANSWERS, OTHER_NAMES

    for name, meant in OTHER_NAMES.items():
        assert name not in cli.commands and meant in cli.commands, name
        code, _, err = run(name, "somewhere")
        assert code == 2, (name, err)
        summary = cli.commands[meant].get_short_help_str(80)
        assert f"No such command '{name}'; snap {meant} does that: {summary}" in err
    for name, answer in OTHER_ANSWERS.items():
        assert name not in cli.commands
        code, _, err = run(name.upper(), "somewhere")  # any case
        assert code == 2 and answer in err, (name, err)
        # the commands and options it names are snap's
        for command in {w for w in answer.split() if w in cli.commands}:
            for option in (w for w in answer.replace(")", " ").split() if w.startswith("--")):
                assert any(option in p.opts for p in cli.commands[command].params), option
    # a typo of snap's own command keeps click's guess; a real command is not caught
    assert "Did you mean 'create'?" in run("crate", "x")[2]
    assert "No such command" not in run("inspect", "--help")[1]


NOISY = """
import os, sys
print("importing the pipeline")
os.write(1, b"a C library at import\\n")

def items():
    print("listing the items")
    return list(range(6))

def preprocess(i):
    print("record", i)
    os.write(1, b"a C library in the task\\n")
    yield {"v": i}
"""


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_pipelines_prints_go_to_stderr_and_stdout_is_the_json(
    tmp_path: Path, workers: str
) -> None:
    """What the pipeline printed at import (in the command's own process) preceded the JSON
    document on stdout, and a script parsing `snap create --json` failed."""
    (tmp_path / "noisy.py").write_text(NOISY)
    proc = snap_subprocess(
        "create", "noisy.py:preprocess", "s", "--inputs-from", "noisy.py:items",
        "--workers", workers, "--json", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["num_records"] == 6
    for printed in ("importing the pipeline", "a C library at import", "listing the items",
                    "record 5", "a C library in the task"):  # fmt: skip
        assert printed in proc.stderr


@pytest.mark.parametrize("closed", [1, 2], ids=["stdout", "stderr"])
def test_every_command_runs_with_stdout_or_stderr_closed(tmp_path: Path, closed: int) -> None:
    """`snap create ... >&-` (or `2>&-`, as a cron job or a service may run it): Python makes
    such a stream None, and the commands failed on "'NoneType' object has no attribute
    'flush'" (or 'write', in the progress line) after doing their work, exit status 1. Each
    does its work; with stdout closed, its answer cannot be shown, which it says on stderr
    with exit 1 (as `ls >&-` does; it exited 0, the answer lost unsaid: a probe)."""
    (tmp_path / "noisy.py").write_text(NOISY)

    def run_closed(*args: str) -> tuple[int, str]:
        proc = subprocess.run(
            [sys.executable, "-m", "snapshot_cli", *args], cwd=tmp_path, timeout=120,
            check=False, preexec_fn=lambda: os.close(closed), text=True,
            stdout=subprocess.DEVNULL if closed == 2 else None,
            stderr=subprocess.PIPE if closed == 1 else subprocess.DEVNULL,
        )  # fmt: skip
        return proc.returncode, proc.stderr or ""

    create = ["create", "noisy.py:preprocess", "s", "--inputs-from", "noisy.py:items"]
    expected = 1 if closed == 1 else 0
    assert run_closed(*create, "--workers", "0")[0] == expected
    assert (tmp_path / "s" / "manifest.json").exists()
    for args in (["inspect", "s"], ["head", "s"], ["verify", "s"], ["gc", "s", "--dry-run"],
                 ["bench", "s", "--epochs", "1"], [*create, "--json"]):  # fmt: skip
        code, said = run_closed(*args)
        assert code == expected, (args, said)
        if closed == 1:
            last = said.splitlines()[-1]
            assert last.startswith("snap: error: cannot write to standard output: it is closed")


@pytest.mark.parametrize("sigterm", [False, True], ids=["ctrl-c", "sigterm"])
@pytest.mark.parametrize(
    ("command", "said"),
    [
        ("create", "snap: interrupted; run the same command again to resume"),
        ("head", "snap: interrupted"),
        ("bench", "snap: interrupted"),
        ("verify", "snap: interrupted"),
        ("inspect", "snap: interrupted"),
        ("gc", "snap: interrupted"),
    ],
)
def test_an_interrupt_is_one_line_that_says_to_resume_only_what_resumes(
    setup, command: str, said: str, sigterm: bool
) -> None:  # type: ignore[no-untyped-def]
    """Ctrl-C in any command: exit 130 and one line; "run the same command again to resume"
    only where a run resumes (`snap head` said it too). A SIGTERM (its handler raises
    Terminated where a Ctrl-C would raise KeyboardInterrupt): exit 143, "terminated"."""
    from snapshot_cli.signals import Terminated
    from tests.interrupts import InterruptAt, interrupted

    spec, glob, tmp = setup
    out = str(tmp / "s")
    assert run("create", spec, out, "--input", glob, "--workers", "0")[0] == 0
    args = {"create": ["create", spec, out, "--input", glob, "--overwrite", "--workers", "0"],
            "head": ["head", out], "bench": ["bench", out], "verify": ["verify", out],
            "inspect": ["inspect", out], "gc": ["gc", out]}[command]  # fmt: skip
    trace = InterruptAt(40, raises=Terminated if sigterm else KeyboardInterrupt)
    result = interrupted(lambda: CliRunner().invoke(cli, args), trace)  # (a call well inside)
    assert result is not None and trace.where
    if sigterm:
        code, said = 143, said.replace("interrupted", "terminated (SIGTERM)")
    else:
        code = 130
    assert (result.exit_code, result.stderr.splitlines()[-1]) == (code, said), result.stderr
    assert "Traceback" not in result.stderr


def test_an_interrupt_while_the_options_are_read_is_said_as_in_the_run(tmp_path: Path) -> None:
    """Click reads a command's options before snap's handling of the run (an option's type
    may read the machine: --processes counts cores from cgroup files): a Ctrl-C there was
    click's "Aborted!", exit 1. Every call of snap's option types and command group."""
    from tests.interrupts import InterruptAt, interrupted

    (tmp_path / "s").mkdir()  # (the run is never reached: any directory does)
    args = ["bench", str(tmp_path / "s"), "--processes", "1", "--shuffle-buffer", "8MiB",
            "--step-ms", "1", "--columns", "a,b", "--num-parallel-reads", "2"]  # fmt: skip
    tried = 0
    for k in range(1, 200):
        # (not a generator's: one closed when collected may resume there, and Python says an
        # interrupt at that point is ignored, whatever snap does)
        trace = InterruptAt(k, only=("cli_types.py", "cores.py"), skip=("<genexpr>",))
        result = interrupted(lambda: CliRunner().invoke(cli, args), trace)
        if not trace.where:
            break
        if trace.where.startswith(("make_context ", "invoke ")):
            continue  # (at the entry of the handlers themselves: a few bytecodes, click's)
        tried += 1
        assert result is not None, trace.where
        assert (result.exit_code, result.stderr) == (130, "snap: interrupted\n"), trace.where
    assert tried >= 3  # (the group's parse, the types' conversions: the sweep reached them)


def test_termination_signals_raise_terminated_only_within_a_command() -> None:
    """SIGTERM and SIGHUP raise Terminated (a KeyboardInterrupt) in the main thread while a
    command runs; the handlers before come back after, a SIGHUP ignored (nohup) stays
    ignored, and elsewhere than the main thread nothing changes."""
    import signal
    import threading

    from snapshot_cli.signals import Terminated, termination_as_interrupt

    before = signal.getsignal(signal.SIGTERM)
    hup = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with termination_as_interrupt():
            with pytest.raises(Terminated) as caught:
                signal.pthread_kill(threading.get_ident(), signal.SIGTERM)  # (this thread)
            assert caught.value.signum == signal.SIGTERM
            assert isinstance(caught.value, KeyboardInterrupt)
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is before
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        with termination_as_interrupt(), pytest.raises(Terminated) as caught:
            signal.pthread_kill(threading.get_ident(), signal.SIGHUP)  # (this thread)
        assert caught.value.signum == signal.SIGHUP
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_DFL
        seen: list[object] = []

        def elsewhere() -> None:
            with termination_as_interrupt():
                seen.append(signal.getsignal(signal.SIGTERM))

        thread = threading.Thread(target=elsewhere)
        thread.start()
        thread.join()
        assert seen == [before]
    finally:
        signal.signal(signal.SIGHUP, hup)


POOL_PIPELINE = """
import multiprocessing

def square(x):
    return x * x

def preprocess(item):
    with multiprocessing.get_context("fork").Pool(2) as pool:  # (its exit: SIGTERM to each)
        total = sum(pool.map(square, range(5)))
    return [{"item": item, "total": total}]

def items():
    return list(range(6))
"""


def test_a_forked_pool_of_the_pipeline_ends_as_python_ends_it(write_pipeline, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The command's SIGTERM handler was inherited by the workers a pipeline's fork Pool
    starts: Pool.terminate()'s SIGTERM raised Terminated in them (a traceback each) and could
    hang the pool's exit. A forked child gets the handlers from before the command back
    (whatever they were: an earlier test in this worker, or a library, may have set one)."""
    import signal

    from snapshot_cli.signals import termination_as_interrupt

    before = signal.getsignal(signal.SIGTERM)
    with termination_as_interrupt():
        assert signal.getsignal(signal.SIGTERM) is not before  # the command's own, within
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # (the child: its SIGTERM handler as before the command)
            os.write(write, b"1" if signal.getsignal(signal.SIGTERM) is before else b"0")
            os._exit(0)
        os.waitpid(pid, 0)
        assert os.read(read, 1) == b"1"
        os.close(read)
        os.close(write)
    pid, code = -1, 1  # a child forked in the block leaves it as its parent does (that
    try:  # raised "list.remove(x): x not in list" in the child)
        with termination_as_interrupt():
            pid = os.fork()
    except BaseException:
        code = 2
    if pid == 0:
        os._exit(code)
    assert code == 1 and os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 1
    spec = write_pipeline(POOL_PIPELINE)
    out = str(tmp_path / "s")
    args = ["create", spec, out, "--inputs-from", spec.replace(":preprocess", ":items"),
            "--inputs-per-task", "1", "--workers", "0", "--quiet"]  # fmt: skip
    res = snap_subprocess(*args, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "Terminated" not in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert sorted(int(t) for b in snap.open(out).loader(6) for t in b["total"]) == [30] * 6


LOGGING_PIPELINE = """
import logging
import numpy as np

def items():
    return [0, 1, 2, 3]

def preprocess(item, *, configure=False):
    if configure:  # the pipeline sets up logging of its own: its handler has the records
        logging.basicConfig(level=logging.INFO, format="mine: %(name)s: %(message)s")
    try:
        raise ConnectionError("no route\\nto host")
    except ConnectionError:  # as gcsfs logs a request it gives up on
        logging.getLogger("gcsfs").exception("_request out of retries on exception")
    logging.getLogger("mine").warning("odd item %s", item)
    logging.getLogger("mine").info("did item %s", item)
    yield {"x": np.int64(item)}
"""


@pytest.mark.parametrize("workers", ["2", "0"])
@pytest.mark.parametrize("configure", [False, True])
def test_library_logs_are_one_line_and_the_pipeline_s_its_own(
    tmp_path: Path, write_pipeline, configure: bool, workers: str
) -> None:  # type: ignore[no-untyped-def]
    """A GCS outage during a create printed gcsfs's 48-line traceback from each worker
    process: their logging was Python's last resort. Unless the pipeline sets up logging
    itself, a library's records are one line, as the command's own. The pipeline's own
    records are its own: as Python shows them where nothing is configured (they read
    ``snap: mine: ...``, as if snap said them), and as its ``logging.basicConfig`` says
    where it calls that (with ``--workers 0`` that was a no-op: a handler snap had put on
    the root logger was there first, so its format and its INFO lines were lost)."""
    spec = write_pipeline(LOGGING_PIPELINE)
    items = spec.rsplit(":", 1)[0] + ":items"
    res = snap_subprocess("create", spec, str(tmp_path / "s"), "--inputs-from", items,
                          "--workers", workers, "--param", f"configure={json.dumps(configure)}",
                          "--inputs-per-task", "1")  # fmt: skip
    assert res.returncode == 0, res.stderr
    lines = res.stderr.splitlines()
    said = [line for line in lines if "_request out of retries" in line]
    # (one a task where the pipeline's handler has them; snap's says a line once a process)
    assert len(said) == (4 if configure else 1), res.stderr
    mine = sorted(line for line in lines if " item " in line)
    if configure:  # the pipeline's handler: its format, its traceback, its level
        assert set(said) == {"mine: gcsfs: _request out of retries on exception"}
        assert "Traceback" in res.stderr
        assert mine == [f"mine: mine: {what} item {i}" for what in ("did", "odd")
                        for i in range(4)]  # fmt: skip
    else:
        assert set(said) == {"snap: gcsfs: _request out of retries on exception"}
        assert "Traceback" not in res.stderr and "no route" not in res.stderr, res.stderr
        assert mine == [f"odd item {i}" for i in range(4)], res.stderr


def test_a_memory_output_from_the_command_line_is_a_usage_error(tmp_path: Path) -> None:
    """`snap create p.py:f memory://x/snap` said to pass --workers 0, then "created" a
    snapshot that was gone when the command exited."""
    (tmp_path / "p.py").write_text("def f(i):\n    yield {'i': i}\ndef items():\n    return [1]\n")
    spec = f"{tmp_path}/p.py:f"
    args = ["create", spec, f"memory://x{os.getpid()}/snap", "--inputs-from",
            f"{tmp_path}/p.py:items", "--workers", "0"]  # fmt: skip
    res = subprocess.run([sys.executable, "-m", "snapshot_cli", *args], capture_output=True,
                         text=True, timeout=120, check=False)  # fmt: skip
    assert res.returncode == 2 and "gone when it exits" in res.stderr, res.stderr
    # (run in a Python process, as the backends' tests do, the command may write there)
    assert CliRunner().invoke(cli, args).exit_code == 0


@pytest.mark.parametrize(
    ("args", "said"),
    [(["create", "P", "o", "--inputs-from", "P", "--level", "99"], "'--level': 99 is not in"),
     (["create", "P", "o", "--input", "x", "--inputs-from", "P"], "either --input or"),
     (["create", "P", "o", "--inputs-from", "P", "--inputs-from", "P"],  # (the last was kept)
      "'--inputs-from': given 2 times"),
     (["create", "P", "o", "--inputs-from", "P", "--ray-address", "x"], "--executor ray only"),
     (["create", "P", "o", "--inputs-from", "P", "--compression", "lz4", "--level", "5"],
      "--level applies to --compression zstd only, not to lz4"),
     (["create", "P", "o", "--inputs-from", "P", "--compression", "NONE", "--level", "3"],
      "--level applies to --compression zstd only, not to none"),
     (["bench", "S", "--seed", "-5"], "'--seed': -5 is not in"),
     (["bench", "S", "--cache-limit", "1GiB"], "--cache-limit needs --cache-dir"),
     (["bench", "S", "--cache-dir", "c", "--cache-limit", "10XB"], "'--cache-limit': must look")],
)  # fmt: skip
def test_options_that_cannot_work_are_usage_errors_by_their_option_names(
    tmp_path: Path, args: list[str], said: str
) -> None:
    """They were exit 1 (CHANGELOG: exit 2), some named by their Python names (cache_limit)."""
    (tmp_path / "p.py").write_text("def f(i):\n    yield {'i': i}\ndef items():\n    return [1]\n")
    spec = f"{tmp_path}/p.py:f"
    made = ["create", spec, str(tmp_path / "s"), "--inputs-from", f"{tmp_path}/p.py:items"]
    assert CliRunner().invoke(cli, [*made, "--workers", "0"]).exit_code == 0
    args = [{"P": spec, "S": str(tmp_path / "s"), "o": str(tmp_path / "o")}.get(a, a) for a in args]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 2 and said in res.output, res.output
    assert "cache_limit" not in res.output and not (tmp_path / "o").exists()


@pytest.mark.parametrize("env", [{"NO_COLOR": "1"}, {"TERM": "dumb"}])
def test_no_colour_where_the_user_or_the_terminal_asks_for_none(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """`snap verify` on a terminal styled "ok" whatever NO_COLOR or TERM=dumb said."""

    def f(i: int) -> Iterator[dict[str, int]]:
        yield {"x": i}

    out = str(tmp_path / "s")
    snap.create(f, out, inputs=[0], workers=0)
    styled = CliRunner().invoke(cli, ["verify", out], color=True, env={"TERM": "xterm"})
    assert styled.exit_code == 0 and "\x1b[" in styled.stdout  # (on a terminal: styled)
    plain = CliRunner().invoke(cli, ["verify", out], color=True, env=env)
    assert plain.exit_code == 0 and "ok" in plain.stdout and "\x1b[" not in plain.stdout


def test_every_option_of_every_command_says_what_it_does() -> None:
    """`snap bench --help` listed --batch-size, --epochs, --shuffle and --seed with nothing
    but their defaults (a CLI probe)."""
    commands = [("snap", cli), *cli.commands.items()]
    options = [(name, p) for name, c in commands for p in c.params if isinstance(p, click.Option)]
    bare = [(name, p.opts) for name, p in options if not (p.help or "").strip()]
    assert bare == []


def test_debug_gives_a_worker_s_library_records_whole(tmp_path: Path, write_pipeline) -> None:  # type: ignore[no-untyped-def]
    """A worker's storage-library record goes to the command, whose ``--debug`` decides: its
    traceback with it (the worker's own handler said one line whatever the flag)."""
    spec = write_pipeline(LOGGING_PIPELINE)
    items = spec.rsplit(":", 1)[0] + ":items"
    res = snap_subprocess("--debug", "create", spec, str(tmp_path / "s"), "--inputs-from",
                          items, "--workers", "2", "--inputs-per-task", "1")  # fmt: skip
    assert res.returncode == 0, res.stderr
    said = [line for line in res.stderr.splitlines() if "_request out of retries" in line]
    assert said == ["snap: gcsfs: _request out of retries on exception"] * 4, res.stderr
    assert res.stderr.count("ConnectionError: no route") == 4, res.stderr
