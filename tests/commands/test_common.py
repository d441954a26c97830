"""What every inspection and upkeep command does alike: not a snapshot, an unreadable manifest."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import fsspec
import pytest

import snapshot_cli as snap
from tests.commands.conftest import run


@pytest.mark.parametrize("command", ["inspect", "verify", "head", "bench", "gc"])
@pytest.mark.parametrize("where", ["empty", "missing"])
def test_not_a_snapshot_exits_1_without_traceback(tmp_path: Path, command: str, where: str) -> None:
    path = tmp_path / "nothing"
    if where == "empty":
        path.mkdir()
    code, stdout, stderr = run(command, str(path))
    assert code == 1
    assert stderr.startswith("snap: error: ") and str(path) in stderr
    if where == "missing":  # (it said "is not a snapshot", but for gc)
        assert f"{path} does not exist: check the path" in stderr
    else:
        assert "is not a snapshot" in stderr
    assert "Traceback" not in stderr and stdout == ""


@pytest.mark.parametrize("command", ["inspect", "verify", "head", "bench", "gc", "create"])
@pytest.mark.parametrize("given", ["", " "])
def test_an_empty_snapshot_argument_is_a_usage_error_naming_it(command: str, given: str) -> None:
    # (an unset shell variable: it said "empty path or URL", naming no argument)
    args = ["x.py:f", given, "--input", "x"] if command == "create" else [given]
    code, stdout, stderr = run(command, *args)
    argument = "OUTPUT" if command == "create" else "SNAPSHOT"
    assert code == 2 and stdout == ""
    assert f"Invalid value for '{argument}': {given!r} is empty" in stderr
    assert "directory or URL" in stderr and "Traceback" not in stderr


@pytest.mark.parametrize("command", ["inspect", "verify", "head", "bench", "gc"])
@pytest.mark.parametrize("given", ["manifest", "shard", "other file"])
def test_a_file_given_as_the_snapshot(snapshot: Path, command: str, given: str) -> None:
    """Each said "<file>/manifest.json: Not a directory (ENOTDIR)"; gc went on to list runs
    below its manifest. The manifest stands for its snapshot wherever nothing is removed."""
    (snapshot.parent / "notes.txt").write_text("x")
    path = {"manifest": snapshot / "manifest.json", "other file": snapshot.parent / "notes.txt",
            "shard": snapshot / snap.open(snapshot).shards[0].path}[given]  # fmt: skip
    code, stdout, stderr = run(
        command, str(path), *(["--epochs", "1"] if command == "bench" else [])
    )
    if given == "manifest" and command != "gc":
        said = "of 21 records" if command == "head" else str(snapshot)  # (head names no path)
        assert code == 0 and said in stdout + stderr and "error" not in stderr, stderr
        return
    if given == "shard" and command in ("inspect", "verify", "head"):  # shows that shard
        assert code == 0 and str(path) in stdout and "error" not in stderr, stderr
        return
    assert code == 1 and stdout == "" and "Traceback" not in stderr
    assert stderr.startswith(f"snap: error: {path} is ")
    if given == "shard" and command != "gc":
        assert f"is a shard of the snapshot {snapshot}: give the snapshot's directory" in stderr
    elif given == "shard":  # (gc named no snapshot: a probe)
        assert f"is a shard of the snapshot {snapshot}, not a snapshot: give the" in stderr
    else:
        assert "is a file, not a snapshot" in stderr


@pytest.mark.parametrize("given", ["manifest", "shard"])
def test_a_remote_file_given_as_the_snapshot(given: str) -> None:
    url = "memory://file-given/snap"
    snap.create(lambda i: iter([{"x": i}]), url, inputs=[1, 2], workers=0)
    try:
        if given == "manifest":
            assert snap.open(f"{url}/manifest.json").num_records == 2
        else:
            shard = f"{url}/{snap.open(url).shards[0].path}"
            with pytest.raises(
                snap.ManifestError, match=r"is a shard of the snapshot memory:///file-given/snap:"
            ):
                snap.open(shard)
    finally:
        fsspec.filesystem("memory").rm("/file-given", recursive=True)


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


@pytest.mark.parametrize(
    "args", [["head", "-n", "21"], ["inspect", "--shards"], ["inspect", "--json"], ["gc"]]
)
def test_a_reader_that_stops_reading_ends_it_quietly_as_sigpipe_would(
    snapshot: Path, args: list[str]
) -> None:
    """``snap head SNAP | head -3``: the pipe's reader is gone before snap writes."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        res = subprocess.run(
            [sys.executable, "-m", "snapshot_cli", *args[:1], str(snapshot), *args[1:]],
            stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120, check=False,
        )  # fmt: skip
    finally:
        os.close(write_end)
    assert res.returncode == 128 + signal.SIGPIPE, res.stderr
    assert res.stderr == ""


def test_a_broken_pipe_that_is_not_stdout_is_still_an_error(
    snapshot: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection to storage that breaks is a fault to report, not a reader going away."""

    def broken(*_: object, **__: object) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr("snapshot_cli.readers.target.open_target", broken)
    code, stdout, stderr = run("head", str(snapshot))
    assert code == 1 and stdout == ""
    assert stderr.startswith("snap: error: ") and "Broken pipe" in stderr


def test_an_output_below_a_file_says_so(tmp_path: Path) -> None:
    """It said "failed while listing ...: [Errno 20] Not a directory"."""
    (tmp_path / "p.py").write_text("def f():\n    yield {'x': 1}\n")
    out = tmp_path / "p.py" / "snap"
    code, stdout, stderr = run("create", f"{tmp_path / 'p.py'}:f", str(out), "--workers", "0")
    assert code == 1 and stdout == "" and "Traceback" not in stderr
    assert stderr.startswith(f"snap: error: {out}: a part of the path is a file, not a directory")


@pytest.mark.parametrize("command", ["inspect", "verify", "head", "bench"])
def test_a_mistyped_snapshot_path_is_told_the_snapshot_beside_it(
    snapshot: Path, command: str
) -> None:
    (snapshot.parent / "snaps").mkdir()  # like it, but not a snapshot: not suggested
    for typed in ("snp", "snapp", "Snap"):
        code, stdout, stderr = run(command, str(snapshot.parent / typed))
        assert code == 1 and stdout == ""
        assert stderr.strip().endswith(
            f"{snapshot.parent / typed} does not exist: check the path; did you mean {snapshot}?"
        ), stderr
    code, _, stderr = run(command, str(snapshot.parent / "elsewhere"))
    assert code == 1 and "did you mean" not in stderr


@pytest.mark.parametrize("command", ["inspect", "verify", "head", "bench"])
def test_a_directory_of_snapshots_is_told_the_snapshots_in_it(
    snapshot: Path, command: str, tmp_path: Path
) -> None:
    """`snap inspect demo-output` said only "not a snapshot (no manifest.json)"."""
    parent = snapshot.parent
    (parent / "plain").mkdir()  # no snapshot: not named
    code, stdout, stderr = run(command, str(parent))
    assert code == 1 and stdout == ""
    assert stderr.strip().endswith(
        f"{parent} is not a snapshot (no manifest.json); it holds the snapshot "
        f"{snapshot.name}: give one ({snapshot})"
    ), stderr
    (parent / "plain").rmdir()
    empty = tmp_path / "nothing-here"
    empty.mkdir()
    code, _, stderr = run(command, str(empty))
    assert code == 1 and "it holds" not in stderr


@pytest.mark.parametrize("call", ["open", "snapshot"])
def test_an_empty_path_in_python_says_what_to_give(tmp_path: Path, call: str) -> None:
    with pytest.raises(snap.OptionError, match="empty path or URL: give a local path or a URL"):
        if call == "open":
            snap.open("")
        else:
            snap.snapshot(lambda item: {"x": item}, "", inputs=[1])


@pytest.mark.parametrize("code", ["\x1b[31m", "\x1b]0;title\x07", "\x9b31m"])
def test_control_characters_in_a_path_are_shown_escaped_on_stdout_and_stderr(
    tmp_path: Path, code: str
) -> None:
    """A path holding a colour code (``a\\x1b[31mX``) was taken for snap's own colours:
    dropped from stdout off a terminal (a path that does not exist was printed), sent to a
    terminal as it is, and raw in stderr's log lines; errors escaped it."""
    where = tmp_path / f"a{code}X"
    where.mkdir()
    (where / "in.txt").write_text("1")
    (tmp_path / "p.py").write_text("def f(path):\n    return [{'n': 1}]\n")
    shown = str(where).encode("unicode_escape").decode().replace("\\\\", "\\")
    args = [sys.executable, "-m", "snapshot_cli"]
    for command in (
        ["create", f"{tmp_path}/p.py:f", f"{where}/out", "--input", f"{where}/*.txt"],
        ["inspect", f"{where}/out"],
        ["verify", f"{where}/out"],
        ["gc", f"{where}/out"],
        ["inspect", f"{where}/nope"],
    ):
        res = subprocess.run(args + command, capture_output=True, text=True, timeout=120,
                             check=False)  # fmt: skip
        text = res.stdout + res.stderr
        assert code not in text and "\x1b" not in text and "\x9b" not in text, repr(text)
        assert shown in text, (shown, text)


@pytest.mark.parametrize("control", ["\u202e", "\u2066", "\u200f", "\u061c"])
def test_a_bidirectional_control_in_a_column_name_is_shown_escaped(
    tmp_path: Path, control: str
) -> None:
    """A column named ``abc\\u202edef``: ``inspect`` and ``head`` printed it raw, and a
    terminal showed the rest of the line reversed (a probe); an emoji's zero-width joiner
    is kept."""
    import snapshot_cli as snap

    name, emoji = f"abc{control}def", "\U0001f468\u200d\U0001f469"
    out = str(tmp_path / "s")
    snap.create(lambda i: [{name: i, emoji: "x"}], out, inputs=[1], workers=0, progress=False)
    shown = f"abc\\u{ord(control):04x}def"
    for args in (["inspect", out], ["head", out]):
        code, stdout, stderr = run(*args)
        assert code == 0, stderr
        assert shown in stdout and control not in stdout, stdout
        assert emoji in stdout
