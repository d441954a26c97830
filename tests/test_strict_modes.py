"""snap under the strict runtime modes ML projects run with: warnings as errors (``-W
error``, ``PYTHONWARNINGS``, pytest's ``filterwarnings = error``), ``-X
warn_default_encoding``, ``python -O``. A warning snap itself causes must not become the
user's error, worker processes run under the flags the caller's interpreter has, and a
warning the user's filter made an error is said as such, not as a bug in snap."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from snapshot_cli.retry import status_of
from tests.conftest import REPO, snap_subprocess

TEXT_OPENERS = {"read_text", "write_text"}


def _text_opens_without_encoding(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call):
            continue
        f, kws = node.func, {k.arg for k in node.keywords}
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        if "encoding" in kws:
            continue
        if name in TEXT_OPENERS:
            found.append(f"{path.name}:{node.lineno} {name}()")
        elif name == "open" and isinstance(f, ast.Name):  # (the builtin, not snap.open)
            mode = node.args[1] if len(node.args) > 1 else None
            mode = next((k.value for k in node.keywords if k.arg == "mode"), mode)
            if mode is not None and not isinstance(mode, ast.Constant):
                continue  # (a mode not written out: snap.open(url, storage_options))
            text = "r" if mode is None else mode.value
            if "b" not in str(text):
                found.append(f"{path.name}:{node.lineno} open(..., {text!r})")
    return found


def test_every_text_file_snap_opens_names_its_encoding() -> None:
    """`-X warn_default_encoding -W error::EncodingWarning` made every create and loader
    fail (the cores' count read /proc and cgroup files in the locale's encoding)."""
    found = [hit for p in sorted((REPO / "snapshot_cli").rglob("*.py"))
             for hit in _text_opens_without_encoding(p)]  # fmt: skip
    assert found == []


STRICT_RUN = """
import numpy as np
import snapshot_cli as snap
info = snap.create(lambda i: {"x": np.full(4, i, np.float32)}, "out", inputs=[1, 2, 3],
                   workers=2, progress=False)
ids = sorted(float(b["x"][k, 0]) for b in snap.open("out").loader(2, processes=1)
             for k in range(len(b["x"])))
assert ids == [1.0, 2.0, 3.0], ids
print(info.num_records)
"""


def test_a_create_and_a_loader_under_encoding_warnings_as_errors(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-X", "warn_default_encoding", "-W", "error::EncodingWarning",
         "-c", STRICT_RUN],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert res.returncode == 0 and res.stdout.strip() == "3", res.stderr
    verify = subprocess.run(
        [sys.executable, "-X", "warn_default_encoding", "-W", "error::EncodingWarning",
         "-m", "snapshot_cli", "verify", "out", "--quiet"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert verify.returncode == 0, verify.stderr


FLAGS_PIPE = """
import warnings

def f(i):
    assert i >= 0, "negative id"
    if i == 2:
        warnings.warn("legacy field", UserWarning)
    return [{"i": i, "debug": int(__debug__)}]
"""


@pytest.mark.parametrize("workers", [0, 2])
def test_workers_run_under_the_callers_interpreter_flags(tmp_path: Path, workers: int) -> None:
    """Workers started as `python -c ...` without the caller's flags: under `python -O` they
    ran the pipeline's asserts (its `__debug__` records 1 with workers, 0 without), and a
    `-W error` pipeline's warning failed the create with `--workers 0` only."""
    (tmp_path / "prep.py").write_text(FLAGS_PIPE)
    run = f"""
import sys
import snapshot_cli as snap, prep
try:
    snap.create(prep.f, sys.argv[1], inputs=[1, 2], workers={workers}, progress=False)
except snap.PipelineError as err:
    print("failed:", str(err).splitlines()[0])
"""
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{tmp_path}"}
    strict = subprocess.run([sys.executable, "-W", "error::UserWarning", "-c", run, "strict"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300,
                            env=env, check=False)  # fmt: skip
    assert strict.stdout.startswith("failed: the pipeline raised UserWarning on input 2"), (
        strict.stdout + strict.stderr
    )
    optimized = subprocess.run(
        [sys.executable, "-O", "-c", run + "print(sorted({int(b['debug'][0]) for b in "
         "snap.open(sys.argv[1]).loader(1)}))", "optimized"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env, check=False,
    )  # fmt: skip
    assert optimized.stdout.strip().splitlines()[-1] == "[0]", optimized.stdout + optimized.stderr


def test_an_aiohttp_errors_status_is_read_without_its_deprecation_warning() -> None:
    """`status_of` read aiohttp's deprecated `code` first: under `-W error` the warning
    replaced the storage error (and ended its retries)."""
    import aiohttp

    err = aiohttp.ClientResponseError(None, (), status=503)  # type: ignore[arg-type]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert status_of(err) == 503


def test_a_warning_made_an_error_is_said_as_one(tmp_path: Path) -> None:
    """A documented UserWarning (more decode processes than cores) that PYTHONWARNINGS=error
    turned into an error was said as "unexpected UserWarning (a bug in snap ...)"."""
    made = subprocess.run(
        [sys.executable, "-c", "import numpy as np, snapshot_cli as snap; snap.create(lambda "
         "i: {'x': np.zeros(4, np.float32)}, 'out', inputs=[1, 2], workers=0)"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    too_many = str((os.cpu_count() or 1) + 1)
    res = subprocess.run(
        [sys.executable, "-m", "snapshot_cli", "bench", "out", "--processes", too_many],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PYTHONPATH": str(REPO), "PYTHONWARNINGS": "error"},
    )  # fmt: skip
    assert res.returncode == 1, res.stderr
    assert res.stderr.startswith("snap: error: UserWarning: --processes"), res.stderr
    assert "made an error by the warnings filter" in res.stderr and "bug" not in res.stderr
    assert snap_subprocess("bench", str(tmp_path / "out"), "--processes", too_many).returncode == 0


def test_a_by_value_pipeline_reaches_workers_under_bytes_warnings_as_errors(
    tmp_path: Path,
) -> None:
    """Under `python -bb`, shipping a lambda to workers compared its code's bytes with a
    str (BytesWarning, an error): every by-value create with workers failed, blaming it."""
    run = """
import snapshot_cli as snap
print(snap.create(lambda i: {"i": i}, "out", inputs=[1, 2, 3], workers=2, progress=False)
      .num_records)
"""
    res = subprocess.run([sys.executable, "-bb", "-c", run], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300, check=False,
                         env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
    assert res.returncode == 0 and res.stdout.strip() == "3", res.stderr
