"""``snap gc`` failing partway through its removals (a denied, read-only or failing delete
injected at each item in turn, at the OS calls that make it): it said "cannot remove
anything" after it had removed a dead run's state. Now the error says what went first. (A
run's state still goes before its shards: one of another user's stops gc before them.)"""

from __future__ import annotations

import errno
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.commands.conftest import invoke, make_snapshot
from tests.commands.test_gc import plant_dead_run


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A snapshot with a dead run's state and shard, and a second dead run's shard."""
    root = make_snapshot(tmp_path_factory.mktemp("gc") / "snap")
    plant_dead_run(root)
    (root / "shards" / "cafe000000-00001-0000.arrow").write_bytes(b"x" * 100)
    return root


def failing(call: Callable[..., Any], below: str, code: int) -> Callable[..., Any]:
    def fails(path: Any, *args: Any, **kwargs: Any) -> Any:
        if os.fspath(path).startswith(below):
            raise OSError(code, os.strerror(code), os.fspath(path))
        return call(path, *args, **kwargs)

    return fails


@pytest.mark.parametrize("name", ["EACCES", "EROFS", "EIO"])
def test_a_removal_failing_partway_says_what_gc_removed_first(
    pristine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    listed = json.loads(invoke("gc", str(pristine), "--dry-run", "--json").stdout)
    items = [g["path"] for g in listed["would_remove"]]
    kinds = [g["kind"] for g in listed["would_remove"]]
    assert "run" in kinds and "shard" in kinds, kinds
    for k, item in enumerate(items):
        root = tmp_path / f"{name}-{k}"
        shutil.copytree(pristine, root)
        with monkeypatch.context() as m:
            for call in ("unlink", "rmdir"):
                m.setattr(
                    os, call, failing(getattr(os, call), str(root / item), getattr(errno, name))
                )
            res = invoke("gc", str(root))
        assert res.exit_code == 1, res.output
        assert "Traceback" not in res.output
        error = res.stderr.strip()
        assert error.startswith("snap: error:") and str(root / item) in error, error
        if k == 0:
            assert "it removed" not in error, error
        else:
            assert f"it removed {k} item{'s' * (k > 1)} first: {items[0]}" in error, error
            assert "cannot remove anything" not in error, error
            assert "snap gc --dry-run lists what is left" in error
        assert [(root / p).exists() for p in items] == [False] * k + [True] * (len(items) - k)
        again = json.loads(invoke("gc", str(root), "--json").stdout)
        assert [g["path"] for g in again["removed"]] == items[k:]
