"""Shared by the command tests: a snapshot of known records, and the CLI run through CliRunner."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner, Result

import snapshot_cli as snap
from snapshot_cli.cli import cli

TASKS = 6  # input k yields k + 1 records: 6 shards of 1..6 records, 21 records in all
NUM_RECORDS = TASKS * (TASKS + 1) // 2
TEXT_PAD = 150  # every text value is longer than the 60 characters head shows


def image(i: int) -> np.ndarray:
    return (np.arange(48).reshape(3, 4, 4) + i).astype(np.uint8)


def text(i: int) -> str:
    return f"record {i} " + "z" * TEXT_PAD


@snap.ragged("tokens")
def make_records(k: int) -> Iterator[dict[str, Any]]:
    """Input ``k``'s records; ``label`` is the record's index in the order written."""
    start = k * (k + 1) // 2
    for j in range(k + 1):
        i = start + j
        yield {
            "img": image(i),
            "label": i,
            "tokens": np.arange(i % 4 + 1, dtype=np.int32),
            "text": text(i),
        }


def make_snapshot(path: Path) -> Path:
    snap.create(make_records, path, workers=0, inputs_from=lambda: list(range(TASKS)),
                inputs_per_task=1)  # fmt: skip
    return path


@pytest.fixture
def snapshot(tmp_path: Path) -> Path:
    return make_snapshot(tmp_path / "snap")


def invoke(*args: str) -> Result:
    result = CliRunner().invoke(cli, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception  # a bug, not an error the CLI reports: show its traceback
    return result


def run(*args: str) -> tuple[int, str, str]:
    result = invoke(*args)
    return result.exit_code, result.stdout, result.stderr


def run_json(*args: str, code: int = 0) -> dict[str, Any]:
    got, stdout, stderr = run(*args, "--json")
    assert got == code, stderr
    return json.loads(stdout)


def table(lines: list[str]) -> dict[str, str]:
    """``key  value`` rows (keys padded, two spaces at least) → dict."""
    rows = {}
    for line in lines:
        parts = re.split(r"\s{2,}", line.strip(), maxsplit=1)
        if len(parts) == 2:
            rows[parts[0]] = parts[1]
    return rows


def written_order(path: Path) -> list[dict[str, Any]]:
    """Every record of the snapshot, in the order written, as the library reads them."""
    out = []
    for batch in snap.open(path).iter_batches():
        n = len(batch["label"])
        out += [{k: v[r] for k, v in batch.items()} for r in range(n)]
    return out


def dead_pid() -> int:
    """A pid no process has: the kernel hands out pids below pid_max only."""
    return int(Path("/proc/sys/kernel/pid_max").read_text())


def failed_first_create(out: Path) -> Path:
    """``out`` after a first create whose pipeline raised at its third input (two shards
    written, the run's state and its released lease left, nothing committed)."""

    def preprocess(i: int) -> Any:
        if i == 3:
            raise ValueError("stop half-way")
        yield {"i": i}

    with pytest.raises(snap.PipelineError):
        snap.create(preprocess, str(out), inputs=[1, 2, 3, 4], workers=0, inputs_per_task=1)
    return out
