"""A commit never writes a manifest snap's readers refuse: each value of a manifest out of
the readers' range, however it came there, is refused before anything is committed, and
the committed version stays the one readers see."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from fsspec.implementations.local import LocalFileSystem

import snapshot_cli as snap
from snapshot_cli.writers.commit import commit

MAX_COUNT = 1 << 40  # the readers' limit of a manifest's counts (history.MAX_COUNT)


def records(n: int) -> Any:
    yield {"a": n}


@pytest.mark.parametrize(
    ("part", "key", "value"),
    [("chunking", "inputs", MAX_COUNT), ("chunking", "inputs", 0),
     ("chunking", "bytes", -1), ("changes", "tasks_computed", MAX_COUNT)],
)  # fmt: skip
def test_a_manifest_readers_would_refuse_is_not_committed(
    tmp_path: Path, part: str, key: str, value: int
) -> None:
    out = tmp_path / "s"
    snap.create(records, str(out), inputs=[1, 2], workers=0)
    before = (out / "manifest.json").read_bytes()
    now = snap.open(str(out)).manifest
    assert now.history is not None
    history = dataclasses.replace(now.history, **{part: {**getattr(now.history, part), key: value}})
    bad = dataclasses.replace(now, history=history, run="0" * len(now.run))
    with pytest.raises(snap.SnapError, match=rf"nothing was committed.*{part}\.{key}"):
        commit(LocalFileSystem(), str(out), bad, replaces=now)
    assert (out / "manifest.json").read_bytes() == before
    assert snap.open(str(out)).num_records == 2
