"""A writer whose clock is behind (a VM's after a suspend, a container's without NTP) wrote a
``created`` time days in the past into the version it committed, and ``snap gc`` took that as
when the version before it was superseded: with the default 7-day retention it removed that
version's shards at once, under readers in an epoch of it. gc takes the later of the writer's
time and the storage's time for the version's copy in ``_versions/``. On every backend: each
reports a file's time under another key (mtime, modificationTime, LastModified, created)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np
import pytest

import snapshot_cli as snap
from snapshot_cli.writers import commit as commit_mod
from snapshot_cli.writers.gc import gc
from tests.backends.conftest import Backend

BEHIND = timedelta(days=30)


def _records(tag: int) -> Any:
    def preprocess() -> Any:
        for i in range(6):
            yield {"x": np.full(40, i + tag, np.uint8), "i": i + 100 * tag}

    return preprocess


class _LateClock(datetime):
    """``datetime`` as a writer with a clock BEHIND the world's sees it."""

    @classmethod
    def now(cls, tz: Any = None) -> Any:
        return datetime.now(tz) - BEHIND


def _labels(url: str, version: int) -> list[int]:
    with snap.open(url, version=version).loader(batch_size=4, shuffle=False) as loader:
        return sorted(int(v) for b in loader for v in b["i"])


def test_a_version_committed_by_a_writer_with_a_late_clock_keeps_its_predecessor(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = backend.url()
    snap.create(_records(0), url, workers=0)
    with monkeypatch.context() as m:
        m.setattr(commit_mod, "datetime", _LateClock)
        snap.create(_records(1), url, workers=0, overwrite=True)
    created = datetime.fromisoformat(snap.open(url).manifest.created)
    assert datetime.now(timezone.utc) - created > BEHIND - timedelta(minutes=5)  # as written
    backend.refresh()

    report = gc(url)  # 7 days: version 2 was committed seconds ago, whatever it says
    assert [g for g in report.garbage if g.kind in ("shard", "version")] == [], report.garbage
    backend.refresh()
    assert _labels(url, 1) == list(range(6))  # a reader of version 1 still reads it

    gone = gc(url, retention=0).garbage  # and retention still ends
    assert {g.kind for g in gone} >= {"shard", "version"}
    backend.refresh()
    assert _labels(url, 2) == list(range(100, 106))
