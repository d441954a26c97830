"""Writers racing and readers replaying during rewrites, with real processes.

1. Several ``snap create`` processes of one OUTPUT with the same pipeline and params: one
   takes the writer lease and computes, the others wait for it and reuse what it committed.
2. Writers with different params racing with ``--overwrite`` (and, in the slow variant,
   without it): each exits 0 or with one clean ``snap: error:`` line; what is committed at
   the end is exactly one writer's version, never a mixture, and verifies.
3. Reader processes replaying full passes while the snapshot is rewritten again and again
   with alternating params: every pass delivers all records of exactly one version, also
   when an overwrite commits in its middle (a commit deletes no shard a kept version
   references); never a failed or mixed pass.

Processes are coordinated through files (a gate file that the pipeline waits for, the
writers' own "waiting for the writer lease" messages, the readers' per-pass result lines)
and exit codes; every wait is a bounded poll for a condition.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import snapshot_cli as snap
from tests import forks
from tests.conftest import REPO, wait_for

ITEMS = 8  # inputs (one task, one shard each); records per input: the ``rows`` param

# Every record carries its version's tag, and ``x`` is a function of (tag, id), so a record
# batch of one version read under another's manifest, or a mixed pass, cannot go unseen.
PIPE = f"""
import os, time, zlib
import numpy as np

def preprocess(i, *, tag, calls, gate, rows, width):
    with open(calls, "a") as f:
        f.write(f"{{tag}} {{i}} {{os.getppid()}}\\n")  # the worker's parent: the snap create
    while not os.path.exists(gate):
        time.sleep(0.01)
    salt = zlib.crc32(tag.encode())
    for j in range(rows):
        k = i * 100_000 + j
        yield {{"tag": tag, "id": k, "x": np.arange(width, dtype=np.int64) + k * width + salt}}

def items():
    return list(range({ITEMS}))
"""

TIMEOUT = 120  # seconds any one process may take: a hang fails the test, never blocks it
READER_LIFETIME = 600  # a reader left behind by a crashed test ends by itself

_started: list[subprocess.Popen[bytes]] = []


@pytest.fixture(autouse=True)
def no_leftover_processes() -> Iterator[None]:
    """Kill any process still running when a test ends (a failed test must not leak it)."""
    yield
    while _started:
        proc = _started.pop()
        if proc.poll() is None:
            proc.kill()
        proc.wait()


@dataclass(frozen=True)
class Setup:
    spec: str  # path/to/pipe.py:preprocess
    items: str  # path/to/pipe.py:items
    out: Path
    calls: Path
    gate: Path
    rows: int
    width: int

    def params(self, tag: str) -> dict[str, Any]:
        return {
            "tag": tag,
            "calls": str(self.calls),
            "gate": str(self.gate),
            "rows": self.rows,
            "width": self.width,
        }

    def create_cmd(self, tag: str, *extra: str, workers: int = 1) -> list[str]:
        params = [
            a for k, v in self.params(tag).items() for a in ("--param", f"{k}={json.dumps(v)}")
        ]
        return [
            sys.executable, "-m", "snapshot_cli", "create", self.spec, str(self.out),
            "--inputs-from", self.items, *params, "--workers", str(workers),
            "--inputs-per-task", "1", "--batch-rows", str(max(1, self.rows // 8)), "--json",
            *extra,
        ]  # fmt: skip

    @property
    def expected_ids(self) -> set[int]:
        return {i * 100_000 + j for i in range(ITEMS) for j in range(self.rows)}


def setup(tmp_path: Path, write_pipeline: Callable[[str], str], rows: int, width: int) -> Setup:
    spec = write_pipeline(PIPE)
    return Setup(
        spec=spec,
        items=spec.replace(":preprocess", ":items"),
        out=tmp_path / "snap",
        calls=tmp_path / "calls",
        gate=tmp_path / "gate",
        rows=rows,
        width=width,
    )


@dataclass
class Writer:
    """A ``snap create`` process, its stdout (the --json summary) and stderr in files."""

    proc: subprocess.Popen[bytes]
    tag: str
    log: Path

    @property
    def stderr(self) -> str:
        return self.log.read_text()

    @property
    def summary(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(Path(f"{self.log}.out").read_text())
        return data


def start(cmd: list[str], log: Path, tag: str = "") -> Writer:
    with open(log, "wb") as err, open(f"{log}.out", "wb") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=err)
    _started.append(proc)
    return Writer(proc, tag, log)


def run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    """A snap command (``cmd``: python -m snapshot_cli ...) to its end, forked from the fork
    server (:mod:`tests.forks`): its imports were most of its time. The racing commands are
    started anew, at once (``start``)."""
    assert cmd[:3] == [sys.executable, "-m", "snapshot_cli"], cmd
    return forks.shared().run(cmd[3:], REPO, dict(os.environ), TIMEOUT)


HOLDER_RE = re.compile(r"waiting for the writer lease of .*?, held by \S+?:(\d+) \(run")


def lease_holders_named(writers: list[Writer]) -> dict[int, int]:
    """For each writer that says it waits for the lease: the pid of the holder it names."""
    named = {}
    for w in writers:
        if m := HOLDER_RE.search(w.stderr):
            named[w.proc.pid] = int(m.group(1))
    return named


def calls(path: Path) -> list[tuple[str, int, int]]:
    """(tag, input, pid of the snap create) for every call of the user's function."""
    if not path.exists():
        return []
    return [(t, int(i), int(p)) for t, i, p in (ln.split() for ln in path.read_text().splitlines())]


def clean_exit(w: Writer) -> bool:
    """Exit 0, or exit 1 with exactly one ``snap: error:`` line and no traceback."""
    err = w.stderr
    if w.proc.returncode == 0:
        return "Traceback" not in err
    errors = [ln for ln in err.splitlines() if ln.startswith("snap: error:")]
    return w.proc.returncode == 1 and len(errors) == 1 and "Traceback" not in err


def salt(tag: str) -> int:
    return zlib.crc32(tag.encode())


def committed(s: Setup) -> tuple[snap.Snapshot, list[tuple[str, int]]]:
    """The committed snapshot and its records (tag, id) in the order written; every shard's
    crc32c is checked, and every record's ``x`` must be the one its (tag, id) gives."""
    opened = snap.open(str(s.out))
    records = []
    for b in opened.iter_batches():
        for tag, k, x in zip(b["tag"].tolist(), b["id"].tolist(), b["x"], strict=True):
            assert x.tolist() == list(range(k * s.width + salt(tag), (k + 1) * s.width + salt(tag)))
            records.append((tag, k))
    return opened, records


def expected_records(s: Setup, tag: str) -> list[tuple[str, int]]:
    return [(tag, i * 100_000 + j) for i in range(ITEMS) for j in range(s.rows)]


def assert_verifies_and_is_tidy(s: Setup, opened: snap.Snapshot) -> None:
    """``snap verify`` passes; only the kept versions' shards and released leases are left,
    and ``snap gc --retention 0`` leaves the current version's shards alone."""
    verify = run([sys.executable, "-m", "snapshot_cli", "verify", str(s.out), "--json"])
    assert verify.returncode == 0, verify.stderr
    report = json.loads(verify.stdout)
    assert report["ok"] and report["num_damaged"] == 0 and report["num_shards"] == ITEMS
    versions = [snap.open(str(s.out), version=v["version"]) for v in opened.versions()]
    kept = {e.path for v in versions for e in v.shards}
    on_disk = sorted(f"shards/{p.name}" for p in (s.out / "shards").iterdir())
    assert on_disk == sorted(kept)  # every other version's shards stay for its readers
    leftovers = [p.name for p in (s.out / "_runs").iterdir() if not p.name.startswith("lease-")]
    assert leftovers == []
    gc = run([sys.executable, "-m", "snapshot_cli", "gc", str(s.out), "--retention", "0"])
    assert gc.returncode == 0, gc.stderr
    on_disk = sorted(f"shards/{p.name}" for p in (s.out / "shards").iterdir())
    assert on_disk == sorted(e.path for e in opened.shards)


# -- 1. same params: one computes, the others wait and reuse --------------------------------


def test_racing_creates_compute_once_and_the_others_reuse(
    tmp_path: Path, write_pipeline: Callable[[str], str]
) -> None:
    writers = 4
    s = setup(tmp_path, write_pipeline, rows=40, width=8)
    racers = [
        start(s.create_cmd("a", workers=1 + n % 2), tmp_path / f"w{n}.log", "a")
        for n in range(writers)
    ]
    # The function blocks at the gate, so whoever took the lease holds it until the others
    # have all said that they wait for it, and named it.
    wait_for(lambda: len(lease_holders_named(racers)) == writers - 1, "all but one to wait")
    holders = set(lease_holders_named(racers).values())
    assert len(holders) == 1, holders
    (holder,) = holders
    assert holder in {w.proc.pid for w in racers}
    assert holder not in lease_holders_named(racers)
    s.gate.write_text("open")
    for w in racers:
        assert w.proc.wait(timeout=TIMEOUT) == 0, w.stderr
        assert "Traceback" not in w.stderr

    summaries = {w.proc.pid: w.summary for w in racers}
    computed = [pid for pid, info in summaries.items() if not info["reused"]]
    reused = [pid for pid, info in summaries.items() if info["reused"]]
    print(f"\n{writers} racing writers: {len(computed)} computed, {len(reused)} reused")
    assert computed == [holder]
    assert len({(i["fingerprint"], i["run"], i["num_records"]) for i in summaries.values()}) == 1
    assert summaries[holder]["tasks"] == ITEMS and summaries[holder]["tasks_resumed"] == 0
    made = calls(s.calls)
    assert sorted(i for _, i, _ in made) == list(range(ITEMS))  # every input exactly once
    assert {pid for _, _, pid in made} == {holder}

    opened, records = committed(s)
    assert opened.manifest.run == summaries[holder]["run"]
    baseline = tmp_path / "baseline"
    params = {**s.params("a"), "calls": str(tmp_path / "baseline-calls")}
    snap.create(s.spec, str(baseline), inputs_from=s.items, params=params, workers=0,
                inputs_per_task=1, batch_rows=max(1, s.rows // 8))  # fmt: skip
    single = [(t, k) for b in snap.open(str(baseline)).iter_batches()
              for t, k in zip(b["tag"].tolist(), b["id"].tolist(), strict=True)]  # fmt: skip
    assert records == single == expected_records(s, "a")
    assert_verifies_and_is_tidy(s, opened)


# -- 2. different params: the result is exactly one writer's version ------------------------


def race_different_params(
    tmp_path: Path, write_pipeline: Callable[[str], str], overwrite: list[bool], gated: bool
) -> None:
    s = setup(tmp_path, write_pipeline, rows=40, width=8)
    tags = [f"v{n}" for n in range(len(overwrite))]
    if not gated:
        s.gate.write_text("open")
    racers = [
        start(
            s.create_cmd(tag, *(["--overwrite"] if ow else []), workers=1 + n % 2),
            tmp_path / f"w{n}.log",
            tag,
        )
        for n, (tag, ow) in enumerate(zip(tags, overwrite, strict=True))
    ]
    if gated:  # all have started and all but the holder are waiting before any commits
        wait_for(lambda: len(lease_holders_named(racers)) == len(racers) - 1, "all to wait")
        s.gate.write_text("open")
    for w in racers:
        w.proc.wait(timeout=TIMEOUT)
    unclean = [
        f"{w.tag}: exit {w.proc.returncode}\n{w.stderr}" for w in racers if not clean_exit(w)
    ]
    assert not unclean, "\n".join(unclean)

    ok = [w for w in racers if w.proc.returncode == 0]
    failed = [w for w in racers if w.proc.returncode != 0]
    for w in failed:  # only a writer without --overwrite may be refused: another committed
        assert not overwrite[tags.index(w.tag)], w.stderr
        assert "holds a snapshot made with different params" in w.stderr, w.stderr
    computed = {w.summary["run"]: w.tag for w in ok if not w.summary["reused"]}
    assert all(not w.summary["reused"] for w in ok)  # nobody else's params match
    made = Counter(t for t, _, _ in calls(s.calls))
    assert all(made[w.tag] == ITEMS for w in ok), made

    opened, records = committed(s)
    final = opened.manifest.pipeline["params"]["tag"]
    print(
        f"\n{len(racers)} writers, different params ({'gated' if gated else 'free'} start): "
        f"{len(ok)} committed, {len(failed)} refused cleanly; final version {final}"
    )
    assert {t for t, _ in records} == {final}, Counter(t for t, _ in records)
    assert records == expected_records(s, final)
    assert computed.get(opened.manifest.run) == final  # a committed run of the writer of final
    assert_verifies_and_is_tidy(s, opened)


def test_racing_overwrites_with_different_params_leave_one_version(
    tmp_path: Path, write_pipeline: Callable[[str], str]
) -> None:
    race_different_params(tmp_path, write_pipeline, [True] * 4, gated=True)


@pytest.mark.slow
@pytest.mark.parametrize("gated", [True, False])
def test_racing_writers_some_without_overwrite_leave_one_version(
    tmp_path: Path, write_pipeline: Callable[[str], str], gated: bool
) -> None:
    race_different_params(tmp_path, write_pipeline, [True, False] * 3, gated=gated)


# -- 3. readers replaying while the snapshot is rewritten -----------------------------------

READER = """
import json, os, sys, time, traceback, zlib
import numpy as np
import snapshot_cli as snap

path, results, stop = sys.argv[1:4]
items, rows, width = (int(a) for a in sys.argv[4:7])
expected = {i * 100_000 + j for i in range(items) for j in range(rows)}
deadline = time.monotonic() + float(sys.argv[7])
n = 0
with open(results, "a") as log:
    while not os.path.exists(stop) and time.monotonic() < deadline:
        entry = {"pass": n, "shuffle": n % 2 == 0}
        try:
            opened = snap.open(path)  # afresh every pass: the latest committed version
            entry["run"] = opened.manifest.run
            entry["manifest_tag"] = opened.manifest.pipeline["params"]["tag"]
            tags, ids, bad_x = set(), [], 0
            for b in opened.loader(100, shuffle=n % 2 == 0, seed=n):
                tag = b["tag"].tolist()
                tags.update(tag)
                ids.extend(b["id"].tolist())
                salts = np.array([zlib.crc32(t.encode()) for t in tag], dtype=np.int64)
                want = b["id"][:, None] * width + np.arange(width) + salts[:, None]
                bad_x += int((b["x"] != want).any(axis=1).sum())
            unique = set(ids)
            entry.update(ok=True, tags=sorted(tags), records=len(ids), unique=len(unique),
                         ids_ok=unique == expected, bad_x=bad_x)
        except snap.SnapError as err:
            entry.update(ok=False, snap=True, error=type(err).__name__, message=str(err))
        except Exception as err:
            entry.update(ok=False, snap=False, error=type(err).__name__, message=str(err),
                         traceback=traceback.format_exc())
        log.write(json.dumps(entry) + "\\n")
        log.flush()
        n += 1
"""


def passes(results: Path) -> list[dict[str, Any]]:
    if not results.exists():
        return []
    lines = results.read_text().splitlines()
    return [json.loads(line) for line in lines if line.endswith("}")]  # whole lines only


def replay_during_rewrites(
    tmp_path: Path, write_pipeline: Callable[[str], str], readers: int, rewrites: int
) -> None:
    s = setup(tmp_path, write_pipeline, rows=1500, width=32)
    s.gate.write_text("open")
    first = run(s.create_cmd("a", workers=2))
    assert first.returncode == 0, first.stderr
    runs = {json.loads(first.stdout)["run"]: "a"}
    script = tmp_path / "reader.py"
    script.write_text(textwrap.dedent(READER))
    stop, total = tmp_path / "stop", ITEMS * s.rows
    logs = [tmp_path / f"reader{r}.jsonl" for r in range(readers)]
    reader_procs = [
        start(
            [
                sys.executable,
                *map(str, (script, s.out, log, stop, ITEMS, s.rows, s.width, READER_LIFETIME)),
            ],
            tmp_path / f"reader{r}.log",
        )
        for r, log in enumerate(logs)
    ]

    def every_reader_completed(run_id: str) -> Callable[[], bool]:
        return lambda: all(
            any(p.get("ok") and p["run"] == run_id for p in passes(log)) for log in logs
        )

    # The rewriter: a fixed number of `snap create --overwrite` processes, one after
    # another, alternating the tag; each starts once every reader has completed a pass of
    # the version before it, so that every version is replayed and every rewrite races
    # readers that are mid-pass.
    for k in range(rewrites + 1):
        if k:
            tag = "ab"[k % 2]
            again = run(s.create_cmd(tag, "--overwrite", workers=2))
            assert again.returncode == 0 and "Traceback" not in again.stderr, again.stderr
            info = json.loads(again.stdout)
            assert not info["reused"] and info["num_records"] == total
            runs[info["run"]] = tag
        latest = list(runs)[-1]
        wait_for(every_reader_completed(latest), f"each reader to replay version {k}")
    stop.write_text("stop")
    for w in reader_procs:
        w.proc.wait(timeout=TIMEOUT)

    seen = [p for log in logs for p in passes(log)]
    complete = [p for p in seen if p["ok"]]
    clean = [p for p in seen if not p["ok"] and p["snap"]]
    other = [p for p in seen if not p["ok"] and not p["snap"]]
    versions = Counter(p["run"] for p in complete)
    print(
        f"\n{readers} reader(s), {rewrites} rewrites: {len(seen)} passes, {len(complete)} "
        f"complete, {len(clean)} failed cleanly, {len(other)} failed otherwise; "
        f"{len(versions)} of {len(runs)} versions replayed whole "
        f"(complete passes per version: {sorted(versions.values())}); clean failures: "
        f"{dict(Counter(p['error'] for p in clean))}"
    )
    for w in reader_procs:  # a reader that crashed or raised outside a pass
        assert w.proc.returncode == 0 and "Traceback" not in w.stderr, w.stderr
    if other:
        pytest.fail(
            f"BUG: {len(other)} reader passes failed with an error that is no snap error "
            f"(not a SnapError; the first:)\n{other[0]['traceback']}"
        )
    for p in complete:  # exactly one version, all of it, once; as its manifest says
        assert p["tags"] == [p["manifest_tag"]] == [runs[p["run"]]], p
        assert p["records"] == p["unique"] == total and p["ids_ok"] and p["bad_x"] == 0, p
    # The manifest is replaced atomically, and since versions a commit deletes no shard a
    # kept version references: a pass that began on the old version finishes it.
    assert not clean, f"{len(clean)} passes failed during rewrites; the first: {clean[0]}"
    assert set(versions) == set(runs)  # every committed version was replayed whole
    assert len(seen) >= 2 * (rewrites + 1) * readers
    assert {p["shuffle"] for p in complete} == {True, False}

    opened, records = committed(s)
    assert opened.manifest.run == list(runs)[-1]
    assert records == expected_records(s, runs[opened.manifest.run])
    assert_verifies_and_is_tidy(s, opened)


def test_readers_replaying_during_rewrites_see_one_version_per_pass(
    tmp_path: Path, write_pipeline: Callable[[str], str]
) -> None:
    # the edit-test loop's (make test-fast) version: 3 rewrites; the slow test below races 3
    # readers against 6
    replay_during_rewrites(tmp_path, write_pipeline, readers=1, rewrites=3)


@pytest.mark.slow
def test_more_readers_and_rewrites(tmp_path: Path, write_pipeline: Callable[[str], str]) -> None:
    # three readers at once (the test above has one); 6 rewrites, as there: 10 took 2x as long
    # in a suite near its time limit, and each rewrite is the same race again
    replay_during_rewrites(tmp_path, write_pipeline, readers=3, rewrites=6)
