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
