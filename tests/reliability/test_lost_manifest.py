"""A snapshot whose ``manifest.json`` is lost (deleted by hand, or left out of an interrupted
``gsutil -m cp -r`` or rsync) while ``_versions/`` keeps its committed versions: ``snap gc``
deleted every shard ("no committed manifest"), ``snap.open`` said a create was writing it,
``snap inspect`` that a create would start it over, and ``snap create`` did, committing a
new version 1 beside the stale copies of versions 2. Every command now names the copy to
restore, gc removes nothing, and create refuses (``--overwrite`` follows the kept version).

A first commit writes its copy in ``_versions/`` before ``manifest.json``: while it is made,
or after it was cut short between the two, the snapshot is unfinished, not lost (its run is
still in ``_runs/``); gc keeps what the copy references, and the same create commits it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import snapshot_cli as snap
from snapshot_cli import storage, versions
from snapshot_cli.writers import commit as commit_mod
from snapshot_cli.writers import gc as gc_mod
from tests.backends.conftest import Backend, backend, gcs_server, s3_server  # noqa: F401
from tests.commands.conftest import run, run_json

OPTIONS: dict[str, Any] = {"workers": 0, "inputs_per_task": 1}
COMMANDS = ["inspect", "verify", "head", "bench", "gc"]


def records(i: int) -> Iterator[dict[str, Any]]:
    for k in range(3):
        yield {"label": np.int64(10 * i + k)}


def labels(url: str | Path) -> list[int]:
    loader = snap.open(url).loader(batch_size=4, shuffle=False)
    return sorted(int(v) for batch in loader for v in batch["label"])


def grown(url: str | Path) -> None:
    """A snapshot of two versions: inputs 0-3, then 0-5."""
    snap.create(records, url, inputs=list(range(4)), **OPTIONS)
    snap.create(records, url, inputs=list(range(6)), **OPTIONS)


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def said_lost(message: str, url: str, version: int) -> bool:
    copy = f"{url}/_versions/v{version:08d}.json"
    return (
        f"{url} has lost its manifest.json" in message
        and f"restore it by copying {copy} to {url}/manifest.json" in message
        and "snap create --overwrite" in message
    )


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """A copy of a two-version snapshot, without its manifest.json."""
    grown(tmp_path / "snap")
    shutil.copytree(tmp_path / "snap", tmp_path / "copy")
    (tmp_path / "copy" / "manifest.json").unlink()
    return tmp_path / "copy"


@pytest.mark.parametrize("runs", ["kept", "not copied"])
def test_every_command_names_the_copy_to_restore_and_nothing_is_removed(
    copy: Path, runs: str
) -> None:
    if runs == "not copied":
        shutil.rmtree(copy / "_runs")
    before = files(copy)
    for command in COMMANDS:
        for extra in ([], ["--json"]):
            code, stdout, stderr = run(command, str(copy), *extra)
            assert code == 1 and stdout == "", (command, stdout)
            assert said_lost(stderr, str(copy), 2), (command, stderr)
            assert "Traceback" not in stderr
    with pytest.raises(snap.ManifestError) as opened:
        snap.open(copy)
    assert said_lost(str(opened.value), str(copy), 2)
    with pytest.raises(snap.ManifestError) as created:
        snap.create(records, copy, inputs=list(range(6)), **OPTIONS)
    assert said_lost(str(created.value), str(copy), 2)
    with pytest.raises(snap.ManifestError):
        gc_mod.gc(copy, retention=0)
    assert files(copy) == before  # gc and create removed and wrote nothing

    shutil.copy(copy / "_versions" / "v00000002.json", copy / "manifest.json")  # as told
    assert snap.open(copy).version == 2
    assert run_json("verify", str(copy))["ok"] is True
    assert labels(copy) == [10 * i + k for i in range(6) for k in range(3)]


def test_overwrite_follows_the_kept_version(copy: Path) -> None:
    info = snap.create(records, copy, inputs=list(range(2)), overwrite=True, **OPTIONS)
    assert info.version == 3
    assert [v["version"] for v in snap.open(copy).versions()] == [1, 2, 3]
    assert labels(snap.open(copy, version=2)) == [10 * i + k for i in range(6) for k in range(3)]
    assert labels(copy) == [10 * i + k for i in range(2) for k in range(3)]


@pytest.mark.parametrize("backend", ["gcs", "s3", "memory"], indirect=True)
def test_a_lost_manifest_on_remote_storage(backend: Backend) -> None:  # noqa: F811
    url = backend.url()
    grown(url)
    fs, root = backend.fs, backend.path(url)
    fs.rm(f"{root}/manifest.json")
    backend.refresh()
    before = sorted(storage.list_names(fs, f"{root}/shards"))
    assert len(before) == 6
    code, _, stderr = run("gc", url, "--retention", "0")
    assert code == 1 and said_lost(stderr, url, 2), stderr
    for command in ("inspect", "head"):
        code, _, stderr = run(command, url)
        assert code == 1 and said_lost(stderr, url, 2), stderr
    with pytest.raises(snap.ManifestError, match="has lost its manifest.json"):
        snap.create(records, url, inputs=list(range(6)), **OPTIONS)
    backend.refresh()
    assert sorted(storage.list_names(fs, f"{root}/shards")) == before
    assert versions.kept(fs, root) == [1, 2]
    fs.pipe_file(f"{root}/manifest.json", fs.cat_file(f"{root}/_versions/v00000002.json"))
    backend.refresh()
    assert labels(url) == [10 * i + k for i in range(6) for k in range(3)]


def paused_commit(
    monkeypatch: pytest.MonkeyPatch, action: str
) -> tuple[threading.Event, threading.Event]:
    """Make the next first commit stop after it wrote its copy in ``_versions/``, before
    ``manifest.json`` (``written`` is set then): ``"wait"`` until ``go`` is set (a live
    commit), or ``"die"`` there (a KeyboardInterrupt: a commit cut short)."""
    written, go = threading.Event(), threading.Event()
    archive = commit_mod._archive

    def archived(*args: Any, **kwargs: Any) -> None:
        archive(*args, **kwargs)
        written.set()
        if action == "die":
            raise KeyboardInterrupt
        go.wait(60)

    monkeypatch.setattr(commit_mod, "_archive", archived)
    return written, go


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``snap`` in a process of its own (the live writer's lease is this process's)."""
    return subprocess.run([sys.executable, "-m", "snapshot_cli", *args], capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip


def test_a_live_first_commit_is_unfinished_not_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "snap"
    written, go = paused_commit(monkeypatch, "wait")
    got: list[Any] = []
    writer = threading.Thread(
        target=lambda: got.append(snap.create(records, out, inputs=list(range(4)), **OPTIONS))
    )
    writer.start()
    try:
        assert written.wait(60)
        assert not (out / "manifest.json").exists() and versions.kept(*storage.resolve(str(out)))
        assert versions.lost(*storage.resolve(str(out))) is None
        with pytest.raises(snap.ManifestError, match="unfinished snapshot"):
            snap.open(out)
        inspected = cli("inspect", str(out))
        assert inspected.returncode == 0 and "unfinished snapshot" in inspected.stdout
        assert "lost" not in inspected.stdout + inspected.stderr
        before = files(out)
        collected = cli("gc", str(out), "--retention", "0")
        assert collected.returncode == 0, collected.stderr
        assert files(out) == before  # the live writer's run, shards and copy are its own
    finally:
        go.set()
        writer.join(60)
    assert got and got[0].version == 1
    assert labels(out) == [10 * i + k for i in range(4) for k in range(3)]
    assert versions.lost(*storage.resolve(str(out))) is None  # (its run is gone: committed)


def test_a_first_commit_cut_short_keeps_its_shards_and_the_same_create_commits_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "snap"
    paused_commit(monkeypatch, "die")
    with pytest.raises(KeyboardInterrupt):
        snap.create(records, out, inputs=list(range(4)), **OPTIONS)
    monkeypatch.undo()
    assert not (out / "manifest.json").exists() and (out / "_versions/v00000001.json").exists()
    with pytest.raises(snap.ManifestError, match="unfinished snapshot"):
        snap.open(out)
    shards = sorted(p.name for p in (out / "shards").iterdir())
    assert len(shards) == 4
    collected = run_json("gc", str(out), "--retention", "0")
    assert collected["removed"] == [] and len(collected["kept_runs"]) == 1, collected
    assert sorted(p.name for p in (out / "shards").iterdir()) == shards
    info = snap.create(records, out, inputs=list(range(4)), **OPTIONS)
    assert (info.version, info.tasks_resumed) == (1, 4)
    assert labels(out) == [10 * i + k for i in range(4) for k in range(3)]
