"""Why gc removes a shard: a shard several retired versions shared is said to be of the
newest of them, the one whose replacement made it garbage (it named the oldest: "of version
1, superseded 3 days ago" for a shard version 2 still had until an hour ago)."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import numpy as np
import pytest

import snapshot_cli as snap
from snapshot_cli.writers.gc import gc


def preprocess(i: int):  # type: ignore[no-untyped-def]
    yield {"x": np.full(4, i, np.int64)}


def test_a_shard_retired_versions_shared_is_said_to_be_the_newest_s(tmp_path: Path) -> None:
    path = str(tmp_path / "s")
    for n, overwrite in ((2, False), (3, False), (4, False), (4, True)):  # v1..v3 grow, v4 anew
        snap.create(preprocess, path, inputs_from=lambda n=n: list(range(n)), workers=0,
                    inputs_per_task=1, overwrite=overwrite)  # fmt: skip
    versions = {v: {s.path for s in snap.open(path, version=v).shards} for v in (1, 2, 3)}
    shared = versions[1] & versions[2] & versions[3]
    assert shared  # (the growth kept version 1's shards)
    reasons = {g.path: g.reason for g in gc(path, dry_run=True, retention=0).garbage}
    for shard in versions[1] | versions[2] | versions[3]:
        newest = max(v for v, shards in versions.items() if shard in shards)
        assert reasons[shard].startswith(f"of version {newest}, superseded "), (shard, reasons)


def test_a_replaced_version_kept_for_its_readers_is_said_with_when_it_goes(
    tmp_path: Path,
) -> None:
    """After --overwrite, gc said "nothing to remove" and the replaced version's shards stayed,
    unexplained (a probe): each version kept is listed, with when its retention is over."""
    from click.testing import CliRunner

    from snapshot_cli.cli import cli

    path = str(tmp_path / "s")
    for n, overwrite in ((2, False), (3, False), (3, True)):  # v1, v2 grown, v3 anew
        snap.create(preprocess, path, inputs_from=lambda n=n: list(range(n)), workers=0,
                    inputs_per_task=1, overwrite=overwrite)  # fmt: skip
    committed = {v: snap.open(path, version=v).manifest.created for v in (2, 3)}
    report = gc(path, dry_run=True, retention="1h")
    assert report.garbage == [] and sorted(report.kept_versions) == [1, 2]
    doc = report.to_json()["kept_versions"]
    assert [k["version"] for k in doc] == [1, 2]
    for kept, replaced_by in zip(doc, (2, 3), strict=True):  # (an hour after its successor)
        until = datetime.datetime.fromisoformat(kept["until"])
        since = datetime.datetime.fromisoformat(committed[replaced_by])
        assert abs((until - since).total_seconds() - 3600) < 5, (kept, since)
    said = CliRunner().invoke(cli, ["gc", path, "--retention", "1h"]).output.splitlines()
    why = "(--retention: how long a replaced version stays for its readers)"
    assert said[:2] == [f"kept version {k['version']}, replaced, until {k['until']} {why}"
                        for k in doc]  # fmt: skip
    assert said[-1].endswith(": nothing to remove")
    assert gc(path, retention=0).kept_versions == {}  # (and both went)
    for version in (1, 2):
        with pytest.raises(snap.SnapError):
            snap.open(path, version=version)


def test_a_gc_interrupted_partway_says_what_it_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ctrl-C (or SIGTERM) in the middle of gc's removals said only "interrupted", though
    gc had removed two versions' copies and 200 shards (a probe): it says what it removed
    first, and to run it again, which finishes."""
    from click.testing import CliRunner

    from snapshot_cli.cli import cli
    from snapshot_cli.writers import gc_uploads

    path = str(tmp_path / "s")
    for overwrite in (False, True):
        snap.create(preprocess, path, inputs_from=lambda: list(range(4)), workers=0,
                    inputs_per_task=1, overwrite=overwrite)  # fmt: skip
    planned = [g.path for g in gc(path, dry_run=True, retention=0).garbage]
    assert len(planned) > 3
    real, calls = gc_uploads.remove, []

    def interrupted(*args: object) -> None:
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(gc_uploads, "remove", interrupted)
    result = CliRunner().invoke(cli, ["gc", path, "--retention", "0"])
    assert result.exit_code == 130 and "interrupted" in result.stderr, result.output
    said = f"snap: warning: snap gc of {path} was interrupted (it removed 2 items first: "
    warned = [line for line in result.stderr.splitlines() if line.startswith(said)]
    assert len(warned) == 1 and "run it again to finish" in warned[0], result.stderr
    assert f"{planned[0]}, " in warned[0], warned
    monkeypatch.undo()
    left = [g.path for g in gc(path, retention=0).garbage]
    assert left == planned[2:]


@pytest.mark.parametrize("retention", ["10000000d", "99999999999999999999999s"])
def test_a_retention_past_the_year_9999_keeps_the_version_for_good(
    tmp_path: Path, retention: str
) -> None:
    """``--retention 10000000d`` ("keep for good", a probe) removed a dead run's files, then
    raised "year 29406 is out of range" as it reported them: exit 1, the removals unsaid."""
    from click.testing import CliRunner

    from snapshot_cli.cli import cli
    from snapshot_cli.writers.gc_report import FOR_GOOD

    path = str(tmp_path / "s")
    for overwrite in (False, True):
        snap.create(preprocess, path, inputs_from=lambda: [0, 1], workers=0,
                    inputs_per_task=1, overwrite=overwrite)  # fmt: skip
    result = CliRunner().invoke(cli, ["gc", path, "--retention", retention, "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["kept_versions"] == [{"version": 1, "until": FOR_GOOD}], doc
    text = CliRunner().invoke(cli, ["gc", path, "--retention", retention, "--dry-run"])
    assert text.exit_code == 0 and f"kept version 1, replaced, until {FOR_GOOD}" in text.output
    assert snap.open(path, version=1).num_records == 2


def failing(i: int, bad: int = 3):  # type: ignore[no-untyped-def]
    if i == bad:
        raise ValueError("cannot decode")
    yield {"x": np.full(4, i, np.int64)}


def _stopped(path: str, **options: object) -> None:
    with pytest.raises(snap.SnapError):
        snap.create(failing, path, inputs=list(range(5)), workers=0, inputs_per_task=1,
                    **options)  # fmt: skip


@pytest.mark.parametrize(
    "state", ["first create failed", "failed twice", "a grow failed", "replaced, then failed"]
)
def test_a_dry_run_lists_everything_gc_then_removes(tmp_path: Path, state: str) -> None:
    """After a first create that failed, the dry run listed its run and shards; gc removed
    those and then the shards/ and _runs/ they left empty of all but released leases: 4
    items said, 6 removed (a probe)."""
    path = str(tmp_path / "s")
    if state in ("a grow failed", "replaced, then failed"):
        snap.create(failing, path, inputs=list(range(3)), workers=0, inputs_per_task=1)
    if state == "replaced, then failed":
        snap.create(preprocess, path, inputs=list(range(2)), workers=0, overwrite=True)
    _stopped(path, overwrite=state == "replaced, then failed")
    if state == "failed twice":
        _stopped(path)
    would = [(g.path, g.kind) for g in gc(path, dry_run=True, retention=0).garbage]
    removed = [(g.path, g.kind) for g in gc(path, retention=0).garbage]
    assert would == removed and removed
    if state in ("first create failed", "failed twice"):  # (nothing was ever committed)
        assert list((tmp_path / "s").iterdir()) == []
    else:
        assert gc(path, retention=0).garbage == []  # (all of it went the first time)
