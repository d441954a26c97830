"""The tidying after a commit (``cleanup_after_commit``) removes what snap made and nothing
else: it removed every entry of ``OUTPUT/_runs/`` not named ``lease-*`` or ``.*``, recursively,
so a grow deleted a user's notes there (``snap gc``, which knows snap's run ids, kept them)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

import snapshot_cli as snap
from snapshot_cli.writers import gc as gc_mod

OPTIONS: dict[str, Any] = {"workers": 0, "inputs_per_task": 1}
DEAD_RUN = "deadbeef00"  # a run id as snap makes them


def records(i: int) -> Iterator[dict[str, Any]]:
    yield {"label": np.int64(i)}


def test_a_grow_keeps_what_is_not_snaps_in_runs_and_removes_a_dead_run(tmp_path: Path) -> None:
    out = tmp_path / "snap"
    snap.create(records, out, inputs=list(range(3)), **OPTIONS)
    runs = out / "_runs"
    (runs / "NOTES.txt").write_text("keep")
    (runs / "my-notes").mkdir()
    (runs / "my-notes" / "plan.md").write_text("keep too")
    dead = runs / DEAD_RUN  # what a writer that died left: its run, and a shard of it
    (dead / "tasks").mkdir(parents=True)
    (dead / "run.json").write_text(json.dumps({"run": DEAD_RUN, "plan": [[0, 1]], "created": 0}))
    partial = out / "shards" / f"{DEAD_RUN}-00000-0000-00000000.arrow"
    partial.write_bytes(b"partial")

    info = snap.create(records, out, inputs=list(range(4)), **OPTIONS)  # a grow
    assert (info.version, info.tasks_reused) == (2, 3)
    assert (runs / "NOTES.txt").read_text() == "keep"
    assert (runs / "my-notes" / "plan.md").read_text() == "keep too"
    assert not dead.exists() and not partial.exists()  # snap's own leftovers still go
    assert sorted(p.name for p in runs.iterdir() if not p.name.startswith("lease-")) == [
        "NOTES.txt",
        "my-notes",
    ]
    gc_mod.gc(out, retention=0)  # and gc agrees
    assert (runs / "NOTES.txt").exists() and (runs / "my-notes" / "plan.md").exists()
    assert sorted(int(b["label"][0]) for b in snap.open(out).iter_batches()) == [0, 1, 2, 3]


def test_an_interrupt_after_the_commit_leaves_a_created_snapshot(
    tmp_path: Path, monkeypatch: Any, caplog: Any
) -> None:
    """Ctrl-C or SIGTERM in the ~0.3-1 s of tidying after ``manifest.json`` was written said
    "interrupted; run the same command again to resume" (exit 130) of a committed snapshot;
    run again with --overwrite, it committed another version of the same records. The
    create ends as made, saying what is left for ``snap gc``."""
    from snapshot_cli import signals, storage
    from snapshot_cli.writers import commit as commit_mod

    out = tmp_path / "snap"
    real = storage.remove

    def interrupted(fs: Any, path: str, recursive: bool = False) -> None:
        if "/_runs/" in path:  # (the run state, tidied last)
            raise signals.Terminated()  # (SIGTERM as snap raises it; Ctrl-C's is its base)
        real(fs, path, recursive)

    monkeypatch.setattr(commit_mod.storage, "remove", interrupted)
    with caplog.at_level("WARNING", logger="snapshot_cli"):
        info = snap.create(records, out, inputs=list(range(3)), **OPTIONS)
    monkeypatch.undo()
    assert info.version == 1 and info.num_records == 3
    assert "removing what it no longer needs was interrupted; run snap gc" in caplog.text
    assert snap.open(out).num_records == 3
    assert [p.name for p in (out / "_runs").iterdir() if not p.name.startswith("lease")]
    gc_mod.gc(str(out))  # (what is left: removed)
    assert [p.name for p in (out / "_runs").iterdir() if not p.name.startswith("lease")] == []
    again = snap.create(records, out, inputs=list(range(3)), **OPTIONS)
    assert again.reused and again.version == 1
