"""The progress line's rates are of the records this run wrote: a grow's final line gives the
snapshot's totals, reused records too, and its rate counted them (977k rec/s where 20k
records were computed at 15k rec/s)."""

from __future__ import annotations

import io
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import snapshot_cli as snap
from snapshot_cli.progress import Progress

UNITS = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9}


def rate(line: str) -> float:
    """The records a second a progress line shows."""
    found = re.search(r"([\d.]+)([kMG]?) rec/s", line)
    assert found, line
    return float(found.group(1)) * UNITS[found.group(2)]


def test_the_final_line_shows_the_totals_and_the_rate_of_this_run() -> None:
    now = [0.0]
    stream = io.StringIO()
    bar = Progress(1, stream=stream, clock=lambda: now[0])
    now[0] = 1.0
    bar.add(15_000, 15 << 20)  # the records computed, in 1 s
    bar.task_done()
    bar.close(records=1_000_000, nbytes=1 << 30)  # the snapshot's, reused ones too
    last = stream.getvalue().splitlines()[-1]
    assert "records 1.0M" in last and "1.0 GiB" in last  # what the snapshot holds
    assert rate(last) == 15_000  # (was 1.0M rec/s)
    assert "15.0 MiB/s" in last


def test_a_run_without_totals_keeps_its_rates() -> None:
    now = [0.0]
    stream = io.StringIO()
    bar = Progress(2, stream=stream, clock=lambda: now[0])
    now[0] = 2.0
    bar.task_done(3_000, 2 << 20)
    bar.task_done(1_000, 2 << 20)
    bar.close()
    last = stream.getvalue().splitlines()[-1]
    assert rate(last) == 2_000 and "2.0 MiB/s" in last and "records 4.0k" in last


def records(i: int) -> Iterator[dict[str, Any]]:
    for k in range(2_000 if i < 10 else 10):
        yield {"i": i, "k": k}


def test_a_grows_rate_counts_the_records_it_computed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "s"
    snap.create(records, out, inputs=list(range(10)), workers=0, inputs_per_task=1)
    capsys.readouterr()
    started = time.monotonic()
    info = snap.create(
        records, out, inputs=list(range(11)), workers=0, inputs_per_task=1, progress=True
    )
    took = time.monotonic() - started
    assert (info.tasks, info.tasks_reused, info.num_records) == (11, 10, 20_010)
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "records 20.0k" in last  # the snapshot's
    # 10 records computed; counting the 20,000 reused ones, the rate was more than this:
    assert rate(last) < 20_010 / took, last


def test_the_larger_on_disk_hint_names_what_makes_the_bytes(tmp_path: Path) -> None:
    """With --batch-rows 1 (a record batch a record) it blamed the shards' schema and footer
    and advised fewer shards, which left the size as it was."""
    from snapshot_cli import render

    def rows(i: int) -> Iterator[dict[str, Any]]:
        for k in range(2000):
            yield {"id": k, "x": k * 0.5}

    one = snap.create(rows, tmp_path / "one", inputs=[0, 1], workers=0, batch_rows=1)
    hint = render.created_lines(one.to_json())[-1]
    assert one.num_record_batches == 4000
    assert "each of its 4.0k record batches" in hint and "--batch-rows" in hint, hint
    assert "--inputs-per-task" not in hint

    def tiny(i: int) -> Iterator[dict[str, Any]]:
        yield {"id": i}

    many = snap.create(tiny, tmp_path / "many", inputs=list(range(8)), workers=0,
                       inputs_per_task=1)  # fmt: skip
    hint = render.created_lines(many.to_json())[-1]
    assert "each shard's schema and footer" in hint and "--inputs-per-task" in hint, hint
