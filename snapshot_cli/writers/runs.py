"""Run state: the runs an OUTPUT holds, their finished tasks, and what an unfinished snapshot
looks like from outside (``snap inspect`` before the commit)."""

from __future__ import annotations

import json
import time
from typing import Any

from fsspec import AbstractFileSystem

from .. import layout, storage
from . import lease


def find_runs(fs: AbstractFileSystem, root: str) -> list[dict[str, Any]]:
    """Every run directory's ``run.json`` (unreadable ones are skipped: abandoned, never used)."""
    runs = []
    for name in storage.list_names(fs, layout.runs_dir(root)):
        if not layout.is_run_name(name):
            continue
        try:
            info = json.loads(storage.read_bytes(fs, layout.run_file(root, name)))
        except (FileNotFoundError, ValueError, NotADirectoryError):
            continue
        if isinstance(info, dict) and info.get("run") == name:
            runs.append(info)
    return runs


def finished_tasks(fs: AbstractFileSystem, root: str, run: str) -> dict[int, dict[str, Any]]:
    """Results of the tasks of ``run`` that finished (their result file was written)."""
    done: dict[int, dict[str, Any]] = {}
    tasks_dir = layout.tasks_dir(root, run)
    for name in storage.list_names(fs, tasks_dir):
        if not name.endswith(".json") or name.startswith("."):
            continue
        try:
            result = json.loads(storage.read_bytes(fs, storage.join(tasks_dir, name)))
        except (FileNotFoundError, ValueError):
            continue  # written by a writer that died mid-write? write_atomic prevents it
        if isinstance(result, dict) and result.get("run") == run:
            done[int(result["task"])] = result
    return done


def unfinished_state(url: str) -> dict[str, Any] | None:
    """State of an unfinished snapshot (no manifest, but writer state), or None.

    None too when a manifest.json exists: a damaged manifest is reported as such, never
    hidden behind the state of the runs that wrote it.
    """
    fs, root = storage.resolve(url)
    if storage.exists(fs, layout.manifest_path(root)):
        return None
    runs = find_runs(fs, root)
    holder = lease.current(fs, root)
    if not runs and holder is None:
        return None  # no writer ever worked here: not a snapshot
    state = []
    for info in runs:
        done = finished_tasks(fs, root, info["run"])
        state.append(
            {
                "run": info["run"],
                "tasks_done": len(done),
                "tasks": len(info["plan"]),
                "created": info.get("created"),
                "pipeline": info.get("pipeline"),
            }
        )
    writer = None
    if holder is not None:
        heartbeat = holder.heartbeat
        writer = {
            "alive": lease.is_alive(holder),
            "holder": holder.describe(),
            "host": holder.holder.get("host"),
            "pid": holder.holder.get("pid"),
            "run": holder.holder.get("run"),
            "heartbeat_age_s": round(time.time() - heartbeat, 1) if heartbeat else None,
        }
    return {"path": storage.to_url(fs, root), "finished": False, "runs": state, "writer": writer}
