"""Wording a new-user probe met in the commands' output (2026-12-07): each says what it shows
as a person would write it."""

from __future__ import annotations

from typing import Any

import pytest

from snapshot_cli.progress import Progress
from snapshot_cli.render import created_lines
from snapshot_cli.report import format_summary, summarise_value


@pytest.mark.parametrize(
    ("records", "seconds", "rate"),
    [(3, 8.7, "0.3 rec/s"), (1, 20.0, "0.05 rec/s"), (0, 5.0, "0 rec/s"), (40, 2.0, "20 rec/s")],
)
def test_a_slow_rate_is_not_shown_as_zero(records: int, seconds: float, rate: str) -> None:
    """3 records in 8.7 s showed "0 rec/s"."""
    now = [0.0]
    progress = Progress(4, clock=lambda: now[0])
    progress.add(records, 10 * records)
    now[0] = seconds
    assert f"  {rate}  " in progress.line() + "  "


@pytest.mark.parametrize("value", [b"", b"ab"])
def test_bytes_are_shown_without_a_trailing_space(value: bytes) -> None:
    shown = format_summary(summarise_value(value))
    assert shown == shown.rstrip() and shown.startswith(f"bytes[{len(value)}]")


def test_the_many_record_batches_hint_names_both_options() -> None:
    """A create with --batch-bytes 1 was told of --batch-rows alone."""
    info: dict[str, Any] = {"dry_run": False, "uncompressed_bytes": 5000, "bytes": 2_000_000,
                            "reused": False, "path": "s", "version": 1, "num_records": 5000,
                            "num_shards": 2, "seconds": 1.0, "tasks_resumed": 0,
                            "tasks_reused": 0, "tasks": 2, "num_record_batches": 5000}  # fmt: skip
    hint = created_lines(info)[1]
    assert "--batch-rows (default 1,024) and --batch-bytes (default 1 MiB) make fewer" in hint
