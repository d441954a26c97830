"""Any OUTPUT path snap accepts, it can read back: names with bytes that are not UTF-8, glob
and URL characters, spaces, newlines, a leading dash, 255-byte components. Every command
that takes the path (create, inspect, verify, head, gc) and the loader work on it, or create
refuses it up front with a one-line error; none answers with a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli.cli import cli

PIPE = """
def preprocess(i):
    yield {"i": i, "name": "r%d" % i}
def items():
    return [1, 2, 3]
"""

# One path component as bytes: anything but "/" and NUL (which no POSIX name can hold).
component = st.one_of(
    st.binary(min_size=1, max_size=40).filter(lambda b: b"/" not in b and b"\0" not in b),
    st.sampled_from(
        [
            b"a b",
            b"*?[x]",
            b"%41#frag",
            b"-dash",
            b"line\nbreak",
            b"\xff\xfe",
            b"caf\xc3\xa9",
            b"x" * 255,
            b"..x",
            b"~user",
            b"a:b",
        ]
    ),  # fmt: skip
).filter(lambda b: b not in (b".", b".."))


def run(*args: str) -> Result:
    """One command in this process, as the real CLI gets it (argv decoded with surrogateescape)."""
    return CliRunner().invoke(cli, list(args))


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(name=component)
def test_any_path_snap_accepts_it_reads_back(
    tmp_path_factory: pytest.TempPathFactory, name: bytes
) -> None:
    base = tmp_path_factory.mktemp("paths")
    (base / "pipe.py").write_text(PIPE)
    out = os.fsdecode(os.path.join(os.fsencode(base), name, b"snap"))
    created = run("create", f"{base}/pipe.py:preprocess", out, "--inputs-from",
                  f"{base}/pipe.py:items", "--workers", "0", "--json")  # fmt: skip
    assert not isinstance(created.exception, Exception) or isinstance(
        created.exception, SystemExit
    ), created.exception
    if created.exit_code != 0:
        (line,) = created.output.splitlines()
        assert line.startswith("snap: error:")
        return
    for command in ("inspect", "verify", "head", "gc"):
        res = run(command, out)
        assert res.exit_code == 0, (command, res.output)
    assert json.loads(run("verify", out, "--json").output)["ok"]
    loader = snap.open(out).loader(2, shuffle=True)
    assert sorted(int(i) for b in loader for i in b["i"]) == [1, 2, 3]


def test_a_path_that_is_not_utf8_through_worker_processes(tmp_path: Path) -> None:
    (tmp_path / "pipe.py").write_text(PIPE)
    out = os.path.join(os.fsencode(tmp_path), b"caf\xe9 \xff", b"snap")
    for args in (
        ["create", f"{tmp_path}/pipe.py:preprocess", out, "--inputs-from",
         f"{tmp_path}/pipe.py:items", "--workers", "2"],
        ["verify", out],
        ["head", out],
    ):  # fmt: skip
        res = subprocess.run([sys.executable, "-m", "snapshot_cli", *args], cwd=tmp_path,
                             capture_output=True, timeout=120, check=False)  # fmt: skip
        assert res.returncode == 0, res.stderr.decode(errors="replace")
    assert sorted(int(i) for b in snap.open(os.fsdecode(out)).loader(3) for i in b["i"]) == [
        1, 2, 3,
    ]  # fmt: skip


@pytest.mark.parametrize(
    "env", [{"LC_ALL": "C.UTF-8"}, {"LC_ALL": "C", "PYTHONUTF8": "0"}], ids=["utf8", "c"]
)
def test_a_path_that_is_not_utf8_is_shown_alike_on_stdout_and_stderr(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """The bytes as given on both (stderr's log lines showed ``o\\udcff``, Python's own
    name for the byte, where stdout showed the name), and in an error's line too."""
    (tmp_path / "pipe.py").write_text(PIPE)
    out = os.path.join(os.fsencode(tmp_path), b"o\xff")
    base = {k: v for k, v in os.environ.items() if k not in ("LANG", "LC_CTYPE", "PYTHONUTF8")}
    create = ["create", "pipe.py:preprocess", out, "--inputs-from", "pipe.py:items",
              "--workers", "0"]  # fmt: skip
    said = []
    for args in (create, create, ["inspect", out + b"x"]):
        res = subprocess.run(
            [sys.executable, "-m", "snapshot_cli", *args],
            cwd=tmp_path, env={**base, **env}, capture_output=True, timeout=120, check=False,
        )  # fmt: skip
        said.append(res)
    assert [r.returncode for r in said] == [0, 0, 1], said[-1].stderr
    made, again, wrong = said
    assert again.stdout.startswith(b"up to date: " + out + b" ")
    assert b"snap: snapshot " + out + b" is up to date" in again.stderr
    assert wrong.stderr.startswith(b"snap: error: " + out + b"x does not exist: check the path")
    for stream in (made.stdout, made.stderr, again.stdout, again.stderr, wrong.stderr):
        assert out in stream and b"\\udc" not in stream and b"/o?" not in stream, stream
