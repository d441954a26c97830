"""snap gc never takes a read or a listing that failed for "nothing there" (REPORT finding 3:
one 404 on a kept version's copy had gc remove that version and its shards as "never
committed"). A failed read is a reason to stop, never to delete: whatever one call of gc
answers (not found, any error, JSON made invalid in transit), nothing a kept version holds
goes. By fsspec-level injection at each call of gc (``faulty://``), and through a proxy in
front of the real GCS emulator and moto."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fsspec
import pytest
from click.testing import CliRunner, Result

import snapshot_cli as snap
from snapshot_cli import retry
from snapshot_cli.cli import cli
from tests.backends.conftest import BUCKET
from tests.conftest import REPO
from tests.infra.flaky_proxy import FlakyProxy
from tests.reliability import faultfs

PIPE = """
import numpy as np
def preprocess(i, tag=0):
    for k in range(3):
        yield {"x": np.full(100, i, np.uint8), "i": i * 3 + k}
def items():
    return list(range(4))
"""
# not found (a 404), and errors of every other kind a read or a listing may get
ERRORS = ["ENOENT", "EIO", "EACCES", "ENOMEM", "EMFILE", "ETIMEDOUT", "timeout", "denied"]


def command(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def create(pipe: Path, url: str, *extra: str) -> None:
    res = command("create", f"{pipe}:preprocess", url, "--inputs-from", f"{pipe}:items",
                  "--workers", "0", "--inputs-per-task", "2", *extra)  # fmt: skip
    assert res.exit_code == 0, res.output


def kept_files(fs: Any, root: str) -> set[str]:
    """What the kept versions hold (every version: all are within the retention): each one's
    manifest, its copy and task table, its shards."""
    out = {"manifest.json"}
    current = snap.open(f"{fs.unstrip_protocol(root)}")
    for v in range(1, current.version + 1):
        m = snap.open(fs.unstrip_protocol(root), version=v)
        out |= {f"_versions/v{v:08d}.json", f"_versions/v{v:08d}.tasks.json"}
        out |= {s.path for s in m.shards}
    return out


def present(fs: Any, root: str, paths: set[str]) -> set[str]:
    fs.invalidate_cache()
    return {p for p in paths if fs.exists(f"{root}/{p}")}


@pytest.fixture
def snapshot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Version 1, then version 2 made anew (--overwrite, other params): version 1 is
    superseded, within the retention, so it keeps its copy and shards; plus the leftovers of
    a failed overwrite (its run state, shards), which gc does remove."""
    faultfs.register()
    monkeypatch.setattr(retry, "RETRY_BASE_S", 0.001)
    pipe = tmp_path / "pipe.py"
    pipe.write_text(PIPE)
    out = tmp_path / "base"
    url = faultfs.url(out)
    create(pipe, url)
    create(pipe, url, "--param", "tag=1", "--overwrite")
    plan = faultfs.Plan("EIO", str(tmp_path / "count-leftovers"), ops=("write",), after_calls=12)
    monkeypatch.setenv(faultfs.ENV, plan.to_env())
    assert command("create", f"{pipe}:preprocess", url, "--inputs-from", f"{pipe}:items",
                   "--workers", "0", "--inputs-per-task", "2", "--param", "tag=2",
                   "--overwrite").exit_code == 1  # fmt: skip
    monkeypatch.delenv(faultfs.ENV)
    return out


def gc_calls(tmp_path: Path, snapshot: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    """How many reads and listings gc makes of ``snapshot`` (on a copy)."""
    probe = tmp_path / "probe"
    shutil.copytree(snapshot, probe)
    plan = faultfs.Plan("none", str(tmp_path / "count-probe"), ops=("read", "list"))
    monkeypatch.setenv(faultfs.ENV, plan.to_env())
    res = command("gc", faultfs.url(probe), "--json")
    monkeypatch.delenv(faultfs.ENV)
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["removed"], res.output  # (gc has work to do)
    return plan.calls()


def check_kept(res: Result, fs: Any, root: str, kept: set[str], what: Any) -> None:
    """Nothing kept went; gc either finished or stopped with one line."""
    gone = sorted(kept - present(fs, root, kept))
    assert not gone, (what, gone, res.output)
    if res.exit_code != 0:
        assert res.exit_code == 1, (what, res.output)
        assert len([x for x in res.output.splitlines() if x.startswith("snap: error:")]) == 1


def test_a_failed_read_or_listing_at_any_call_of_gc_removes_nothing_kept(
    tmp_path: Path, snapshot: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fs = fsspec.filesystem("file")
    kept = kept_files(faultfs.FaultFileSystem(), str(snapshot))
    total = gc_calls(tmp_path, snapshot, monkeypatch)
    assert total > 10
    for after in range(total):
        for error in ERRORS if after % 4 == 0 else ERRORS[after % 2 :: 4]:
            copy = tmp_path / f"at-{after}-{error}"
            shutil.copytree(snapshot, copy)
            plan = faultfs.Plan(error, str(tmp_path / f"count-{after}-{error}"),
                                ops=("read", "list"), after_calls=after, times=1)  # fmt: skip
            monkeypatch.setenv(faultfs.ENV, plan.to_env())
            res = command("gc", faultfs.url(copy))
            monkeypatch.delenv(faultfs.ENV)
            assert plan.fired(), (after, error)
            check_kept(res, fs, str(copy), kept, (after, error, plan.fired()))
            assert command("verify", faultfs.url(copy)).exit_code == 0
            shutil.rmtree(copy)


def test_a_read_made_invalid_json_at_any_call_of_gc_removes_nothing_kept(
    tmp_path: Path, snapshot: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A byte of a file's answer damaged in transit (invalid UTF-8, so invalid JSON)."""
    fs = fsspec.filesystem("file")
    kept = kept_files(faultfs.FaultFileSystem(), str(snapshot))
    real = faultfs.FaultFileSystem.cat_file

    def flipping(after: int, calls: list[str]) -> Callable[..., bytes]:
        def cat_file(self: Any, path: str, *args: Any, **kw: Any) -> bytes:
            data = bytes(real(self, path, *args, **kw))
            calls.append(path)
            if len(calls) - 1 == after and data:
                data = data[: len(data) // 2] + b"\xff" + data[len(data) // 2 + 1 :]
            return data

        return cat_file

    for after in range(12):
        calls: list[str] = []
        cat_file = flipping(after, calls)

        copy = tmp_path / f"flip-{after}"
        shutil.copytree(snapshot, copy)
        monkeypatch.setattr(faultfs.FaultFileSystem, "cat_file", cat_file)
        res = command("gc", faultfs.url(copy))
        monkeypatch.setattr(faultfs.FaultFileSystem, "cat_file", real)
        if len(calls) <= after:
            break  # every read of gc had its turn
        check_kept(res, fs, str(copy), kept, (after, calls[after]))
    assert after >= 3


@pytest.mark.parametrize("name", ["gcs", "s3"])
@pytest.mark.parametrize("fault", [404, 403, "flip", "cut"])
def test_gc_after_one_failed_read_of_a_kept_version_keeps_it(
    name: str, fault: str | int, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """REPORT's reproduction: a default-retention gc right after an --overwrite, one fault
    on the answer to the first request naming version 1's copy."""
    server = request.getfixturevalue(f"{name}_server")
    scheme, env_name = ("gs", "STORAGE_EMULATOR_HOST") if name == "gcs" else (
        "s3", "FSSPEC_S3_ENDPOINT_URL")  # fmt: skip
    url = f"{scheme}://{BUCKET}/gc-missing-{uuid.uuid4().hex[:8]}/snap"
    pipe = tmp_path / "pipe.py"
    pipe.write_text(PIPE)
    create(pipe, url)
    create(pipe, url, "--param", "tag=1", "--overwrite")
    fs, root = fsspec.core.url_to_fs(url)
    kept = kept_files(fs, root)
    with FlakyProxy(server.endpoint, every=10**9) as proxy:
        proxy.arm(fault, 1, method="GET", path="v00000001.json")
        res = subprocess.run(
            [sys.executable, "-m", "snapshot_cli", "gc", url],
            cwd=REPO, env={**os.environ, env_name: proxy.endpoint},
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    assert proxy.fired, res.stderr
    assert present(fs, root, kept) == kept, (sorted(kept - present(fs, root, kept)), res.stderr)
    assert "never committed" not in res.stdout + res.stderr
    assert res.returncode in (0, 1), res.stderr
    assert snap.open(url, version=1).version == 1
