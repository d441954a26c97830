"""Where users first run snap.create: a script without a ``__main__`` guard, a create nested
in a worker or a spawned child, a writer waiting for another, a worker that dies."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

import snapshot_cli as snap
from snapshot_cli import storage
from snapshot_cli.writers import guards as guards_mod
from snapshot_cli.writers import lease as lease_mod
from tests.conftest import REPO, wait_for


def run_script(path: Path, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """A real ``python script.py``: a hang fails the test through ``timeout``."""
    return subprocess.run(
        [sys.executable, str(path)], cwd=cwd, capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(REPO)}, check=False,
    )  # fmt: skip


SCRIPT = """
import numpy as np
import snapshot_cli as snap

SCALE = 10

def preprocess(item, *, size=2):
    print("working on", item)  # goes to stderr: stdout stays the script's
    yield {"x": np.full(size, item * SCALE)}

info = snap.create(preprocess, "out", inputs=[0, 1, 2, 3, 4, 5], params={"size": 3},
                   workers=2, inputs_per_task=1)
s = snap.open("out")
print("records", info.num_records, "reused", info.reused)
print("values", sorted(int(v) for b in s.loader(4) for v in b["x"][:, 0]))
"""


def test_a_script_without_a_main_guard_runs_in_worker_processes(tmp_path: Path) -> None:
    (tmp_path / "script.py").write_text(SCRIPT)
    first = run_script(tmp_path / "script.py", tmp_path)
    assert first.returncode == 0, first.stderr
    assert "records 6 reused False" in first.stdout
    assert "values [0, 10, 20, 30, 40, 50]" in first.stdout
    assert first.stderr.count("working on") == 6  # each input once: no worker re-ran the script
    second = run_script(tmp_path / "script.py", tmp_path)
    assert "records 6 reused True" in second.stdout and "working on" not in second.stderr


@pytest.mark.parametrize("form", ["file", "module"])
@pytest.mark.parametrize("workers", ["0", "2"])
@pytest.mark.parametrize("made", [False, True])
def test_a_create_at_the_top_of_an_imported_script_fails_at_once_and_shows_the_guard(
    tmp_path: Path, form: str, workers: str, made: bool
) -> None:
    """``snap create script.py:fn`` on a script that calls snap.create when imported: the
    script's own create ran when snap imported it (and its workers imported it again, where
    a nested create was refused). Run by ``python script.py`` first, its create failed as
    another ("holds a snapshot made with different pipeline code; pass --overwrite", which
    changed nothing; a probe). Refused at once, naming the file and the guard; nothing made."""
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    if made:
        assert run_script(script, tmp_path).returncode == 0
    spec = f"{script}:preprocess" if form == "file" else "script:preprocess"
    for extra in ([], ["--overwrite"]):
        res = subprocess.run(
            [sys.executable, "-m", "snapshot_cli", "create", spec, "other", "--workers", workers,
             "--input", "x", *extra],
            cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert res.returncode == 1, res.stderr
        name = repr(str(script) if form == "file" else "script")
        said = f"snap.create({str(tmp_path / 'out')!r}) was called at the top level of {name}"
        assert said in res.stderr and 'if __name__ == "__main__":' in res.stderr, res.stderr
        assert "--overwrite" not in res.stderr.split("Traceback")[-1].splitlines()[-1]
        assert "working on" not in res.stderr
    assert not (tmp_path / "other").exists()
    assert (tmp_path / "out").exists() == made


CHILD = """
import multiprocessing, os, sys, time
import snapshot_cli as snap

def preprocess(item):
    yield {"x": item}

if os.environ.get("AS_SPAWNED_CHILD"):
    # What multiprocessing sets in a "spawn" child while it re-runs its parent's script.
    multiprocessing.current_process()._inheriting = True
started = time.monotonic()
try:
    info = snap.create(preprocess, sys.argv[1], inputs=[1, 2], workers=2)
    print("reused", info.reused)
except snap.OptionError as err:
    print("refused after", round(time.monotonic() - started, 1), "s:", err)
"""


def test_a_create_during_a_spawned_childs_bootstrap(tmp_path: Path) -> None:
    (tmp_path / "child.py").write_text(CHILD)
    cmd = [sys.executable, str(tmp_path / "child.py"), str(tmp_path / "s")]

    def run(as_child: bool) -> str:
        env = {**os.environ, "AS_SPAWNED_CHILD": "1" if as_child else ""}
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env,
                             check=False)  # fmt: skip
        assert res.returncode == 0, res.stderr
        return res.stdout

    refused = run(as_child=True)
    assert "refused after" in refused and 'if __name__ == "__main__":' in refused
    assert not (tmp_path / "s" / "manifest.json").exists()
    # Once the parent has made the snapshot, the child's create reuses it: the script works.
    assert "reused False" in run(as_child=False)
    assert "reused True" in run(as_child=True)


def test_a_child_waiting_for_its_parents_lease_fails_at_once(tmp_path: Path) -> None:
    out = tmp_path / "s"
    out.mkdir()
    fs, root = storage.resolve(str(out))
    held = lease_mod.try_acquire(fs, root)
    assert isinstance(held, lease_mod.Lease)
    try:
        res = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(
                f"""
                import snapshot_cli as snap
                snap.create(lambda x: iter([{{"x": x}}]), {str(out)!r}, inputs=[1], workers=0)
                """
            )],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    finally:
        held.release()
    assert res.returncode == 1
    assert "held by this process's parent" in res.stderr
    assert f"{socket.gethostname()}:{os.getpid()}" in res.stderr


def test_a_waiting_writer_keeps_saying_who_holds_the_lease(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(guards_mod, "WAIT_REPORT_S", 0.0)
    out = tmp_path / "s"
    out.mkdir()
    fs, root = storage.resolve(str(out))
    held = lease_mod.try_acquire(fs, root, ttl=3)
    assert isinstance(held, lease_mod.Lease)
    done: list[snap.CreateInfo] = []

    def writer() -> None:
        done.append(snap.create(lambda x: iter([{"x": x}]), str(out), inputs=[1], workers=0,
                                lease_ttl=3))  # fmt: skip

    def said() -> list[str]:
        return [r.getMessage() for r in caplog.records if "waiting for the writer lease" in
                r.getMessage()]  # fmt: skip

    with caplog.at_level("WARNING", "snapshot_cli"):
        thread = threading.Thread(target=writer)
        thread.start()
        wait_for(lambda: len(said()) >= 2, "the writer to say it waits, twice")
        held.release()
        thread.join(timeout=60)
    assert done and done[0].num_records == 1
    assert all(f"{socket.gethostname()}:{os.getpid()}" in m and "heartbeat" in m for m in said())


def test_a_worker_killed_mid_task_is_named_and_the_run_resumes(tmp_path: Path) -> None:
    marker = tmp_path / "kill"
    marker.write_text("")

    def preprocess(item: int) -> Any:
        if item == 3 and marker.exists():
            os.kill(os.getpid(), signal.SIGKILL)
        yield {"x": item}

    out = str(tmp_path / "s")
    with pytest.raises(snap.PipelineError, match=r"killed by SIGKILL.*task 3 \(inputs \[3\]\)"):
        snap.create(preprocess, out, inputs=list(range(6)), workers=2, inputs_per_task=1)
    marker.unlink()
    info = snap.create(preprocess, out, inputs=list(range(6)), workers=2, inputs_per_task=1)
    assert info.num_records == 6 and info.tasks_resumed >= 1


def test_a_pipeline_may_create_other_snapshots_from_its_workers(tmp_path: Path) -> None:
    """Only a create that would wait for its own parent is refused, not every nested one."""
    inner = str(tmp_path / "inner")

    def preprocess(item: int) -> Any:
        sub = snap.create(lambda x: iter([{"y": x}]), f"{inner}-{item}", inputs=[item],
                          workers=0)  # fmt: skip
        yield {"x": item, "inner_records": sub.num_records}

    info = snap.create(preprocess, str(tmp_path / "s"), inputs=[1, 2], workers=2)
    assert info.num_records == 2
    assert all((tmp_path / f"inner-{i}" / "manifest.json").exists() for i in (1, 2))


@pytest.mark.parametrize("workers", ["0", "2"])
@pytest.mark.parametrize(
    ("raised", "code", "said"),
    [
        ("SystemExit(4)", 1, "the pipeline raised SystemExit on input 2"),
        # (a BaseException of a library: an async client's cancel; with workers it was said
        # as the function having exited the process, found by a probe)
        ("__import__('asyncio').CancelledError('request cancelled')", 1,
         "the pipeline raised CancelledError on input 2"),
        ("KeyboardInterrupt()", 130, "interrupted; run the same command again to resume"),
    ],
)  # fmt: skip
def test_exits_and_interrupts_in_the_function_are_reported_alike(
    tmp_path: Path, workers: str, raised: str, code: int, said: str
) -> None:
    pipe = tmp_path / "pipe.py"
    pipe.write_text(f"def f(i):\n    if i == 2:\n        raise {raised}\n    yield {{'x': i}}\n")
    (tmp_path / "items.py").write_text("def items():\n    return [0, 1, 2, 3]\n")
    res = subprocess.run(
        [sys.executable, "-m", "snapshot_cli", "create", f"{pipe}:f", str(tmp_path / "s"),
         "--inputs-from", f"{tmp_path / 'items.py'}:items", "--workers", workers,
         "--inputs-per-task", "1"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert res.returncode == code, res.stderr
    assert said in res.stderr, res.stderr
    assert not (tmp_path / "s" / "manifest.json").exists()


EXITS = {
    "sys.exit(0)": "import sys\nsys.exit(0)\n",
    "sys.exit(3)": "import sys\nsys.exit(3)\n",
    "argparse": "import argparse\nargparse.ArgumentParser().parse_args()\n",
    "SystemExit(text)": "raise SystemExit('usage: train.py DATA')\n",
}


@pytest.mark.parametrize("form", ["module", "file"])
@pytest.mark.parametrize("which", ["pipeline", "--inputs-from"])
@pytest.mark.parametrize("kind", [*EXITS, "KeyboardInterrupt"])
def test_a_module_that_exits_when_imported_is_told_the_main_guard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, form: str, which: str, kind: str
) -> None:
    """A training script given as the module: `snap create train:f` exited 0 having done
    nothing, silently, when it called sys.exit() at import, and 2 with the script's own
    usage line when it parsed the command line."""
    from click.testing import CliRunner

    from snapshot_cli.cli import cli

    name = f"script_{form}_{which.strip('-').replace('-', '_')}_{abs(hash(kind))}"
    top = EXITS.get(kind, "raise KeyboardInterrupt\n")
    (tmp_path / f"{name}.py").write_text(f"def f(i):\n    yield {{'x': i}}\n\n{top}")
    ok = "def f(i):\n    yield {'x': i}\n\n\ndef items():\n    return [1]\n"
    (tmp_path / "ok.py").write_text(ok)
    spec = f"{name}:f" if form == "module" else f"{tmp_path / name}.py:f"
    pipeline, items = (spec, "ok:items") if which == "pipeline" else ("ok:f", spec)
    args = ["create", pipeline, str(tmp_path / "s"), "--inputs-from", items, "--workers", "0"]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["snap", *args])  # what argparse reads
    res = CliRunner().invoke(cli, args)
    if kind == "KeyboardInterrupt":
        assert res.exit_code == 130 and "interrupted" in res.stderr
    else:
        assert res.exit_code == 1, res.stderr
        assert "failed:" in res.stderr and "Traceback" in res.stderr  # the script's own frames
        assert 'only under `if __name__ == "__main__":`' in res.stderr
    assert not (tmp_path / "s" / "manifest.json").exists()


def test_a_home_relative_pipeline_and_inputs_from(tmp_path: Path) -> None:
    """`snap create '~/prep.py:f' '~/out' --inputs-from '~/prep.py:items'`: OUTPUT took the
    `~`, the pipeline and --inputs-from said "pipeline file '~/prep.py' not found"."""
    (tmp_path / "prep.py").write_text(
        "def f(i):\n    yield {'i': i}\ndef items():\n    return [1, 2, 3]\n"
    )
    snap_cli = str(Path(sys.executable).with_name("snap"))
    res = subprocess.run([snap_cli, "create", "~/prep.py:f", "~/out", "--inputs-from",
                          "~/prep.py:items", "--workers", "2", "--json"], cwd="/",
                         env={**os.environ, "HOME": str(tmp_path)}, capture_output=True,
                         text=True, timeout=120, check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert (
        json.loads(res.stdout)["num_records"] == 3 and (tmp_path / "out" / "manifest.json").exists()
    )
