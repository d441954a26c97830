"""What a create's progress line says: counts, the final line against the summary, a log
that is not a terminal, and the time taken and left."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

import snapshot_cli as snap
from snapshot_cli.progress import Progress, counted, human_bytes


def test_the_final_progress_line_says_what_the_summary_says(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def preprocess(item: int) -> Any:
        yield {"x": [item] * 1000}

    info = snap.create(preprocess, str(tmp_path / "s"), inputs=list(range(8)), workers=0,
                       progress=True)  # fmt: skip
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "tasks 8/8" in last and "records 8 " in last, last
    assert f"  {human_bytes(info.bytes)}  " in last, (last, info.bytes)


def test_a_log_gets_each_progress_line_once() -> None:
    """Not on a terminal (CI logs, ``2> log``) the final line is not the last line again."""
    log = io.StringIO()
    bar = Progress(1, stream=log, unit="shards")
    bar.task_done(3, 300)  # the first event draws at once
    bar.close()
    assert log.getvalue().count("shards 1/1") == 1, log.getvalue()
    bar = Progress(2, stream=log)
    bar.task_done(3, 300)
    bar.task_done(4, 400)  # within the log interval: not drawn yet
    bar.close(records=7, nbytes=700)
    lines = log.getvalue().splitlines()[1:]
    assert [ln.split("  ")[:2] for ln in lines] == [["snap: tasks 1/2", "records 3"],
                                                    ["snap: tasks 2/2", "records 7"]]  # fmt: skip


@pytest.mark.parametrize(
    ("n", "noun", "said"),
    [(1, "shard", "1 shard"), (0, "shard", "0 shards"), (2, "batch", "2 batches"),
     (1, "version", "1 version"), (1500, "record", "1.5k records"),
     (3, "input file", "3 input files"), (3, "epoch", "3 epochs")],
)  # fmt: skip
def test_counts_in_messages_are_singular_only_for_one(n: int, noun: str, said: str) -> None:
    assert counted(n, noun) == said


def test_progress_says_the_time_taken_and_left_at_this_runs_rate() -> None:
    """A long create says how long it has run and, once a task of this run has ended, about
    how long is left; a resumed run's tasks done before do not count in the rate."""
    now = [100.0]
    log = io.StringIO()
    bar = Progress(10, stream=log, clock=lambda: now[0])
    now[0] += 7
    assert bar.line().endswith("  0:07 elapsed"), bar.line()  # no task ended yet: no rate
    now[0] += 13
    bar.task_done(5, 500)
    assert bar.line().endswith("  0:20 elapsed, ~3:00 left"), bar.line()
    now[0] += 20
    bar.task_done(5, 500)
    assert bar.line().endswith("  0:40 elapsed, ~2:40 left"), bar.line()
    resumed = Progress(10, done_tasks=6, stream=log, clock=lambda: now[0], done_counts=(60, 600))
    assert resumed.line().endswith("  0:00 elapsed"), resumed.line()
    now[0] += 3600
    resumed.task_done(10, 100)
    assert "records 70  700 B  0.003 rec/s" in resumed.line(), resumed.line()  # (10 an hour)
    assert resumed.line().endswith("  1:00:00 elapsed, ~3:00:00 left"), resumed.line()
    for _ in range(3):
        resumed.task_done()
    assert "elapsed" not in resumed.line()  # all done: the rates say the rest


def test_a_resumed_run_counts_the_records_and_bytes_done_before(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A resumed create's line said "tasks 6/8 records 0 0 B" of the 6 tasks' records done
    before it, until the final line; not in its rates: those are of this run's work."""
    flag = tmp_path / "fail"
    flag.touch()

    def preprocess(item: int) -> Any:
        if item == 6 and flag.exists():
            raise ValueError("failing once")
        yield {"x": [item] * 1000}

    url = str(tmp_path / "s")
    with pytest.raises(snap.PipelineError):
        snap.create(preprocess, url, inputs=list(range(8)), workers=0, inputs_per_task=1)
    flag.unlink()
    capsys.readouterr()
    info = snap.create(preprocess, url, inputs=list(range(8)), workers=0, inputs_per_task=1,
                       progress=True)  # fmt: skip
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("snap: tasks")]
    first = lines[0].split()  # (drawn at its first record: 6 tasks before, and that one)
    assert first[2:5] == ["6/8", "records", "7"], lines
    shown = float(first[5]) * {"B": 1, "KiB": 1 << 10}[first[6]]
    assert 0.7 * info.bytes < shown <= info.bytes, (lines, info.bytes)
