"""Faults injected at every call snap makes to a filesystem (``faulty://``, see
:mod:`tests.reliability.faultfs`): full disk, quota, read-only, permission denied, I/O error,
time-outs, and what storage libraries raise with neither an errno nor an HTTP status (no
credentials, their own errors, a host that does not resolve), in create (lease, run state,
shards, manifest: the commit), gc, the loader and the reading commands. Every fault is one
``snap: error:`` line naming the path and the cause, exit 1, no traceback, no temporary file
left and nothing half-committed; once the fault is gone the same command finishes, with exactly
the records of a run that never failed.

Commands run in this process (CliRunner, ``--workers 0``) so that a sweep over every call is
quick; worker processes are covered by the subprocess tests at the end."""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli import faults, retry
from snapshot_cli.cli import cli
from tests.forks import Forks
from tests.reliability import faultfs
from tests.reliability.faultfs import OPS, Plan

PIPE = """
import numpy as np
def preprocess(i, tag=0):  # tag changes the fingerprint, not the records
    for k in range(3):
        yield {"x": np.full(1000, i, np.uint8), "i": i * 3 + k}
def items():
    return list(range(6))
"""
RECORDS = list(range(18))
# the same records, with x of incompressible bytes: its shards are most of what a create writes
NOISY_PIPE = PIPE.replace(
    "np.full(1000, i, np.uint8)", "np.random.default_rng(i).integers(0, 256, 100_000, np.uint8)"
)
# Every errno snap answers with a hint of its own (faults._FAULT_HINTS), the first five first,
# but those that describe a path's shape (ENOTDIR, ELOOP, ENAMETOOLONG): a path's shape does
# not change from one call to the next, and ENOTDIR from a check means "nothing there" by
# design (storage.file_info, as os.path.exists reads it), so injected at random calls they
# would be faults no storage gives.
SHAPES = {"ENOTDIR", "ELOOP", "ENAMETOOLONG"}
ERRNOS = ["ENOSPC", "EDQUOT", "EROFS", "EACCES", "EIO"]
ERRNOS += [
    name
    for name in (errno.errorcode[c] for c in faults._FAULT_HINTS)
    if name not in ERRNOS and name not in SHAPES
]
# what storage libraries raise with neither an errno nor an HTTP status (see faultfs)
FOREIGN = ["nocreds", "foreign", "nodns"]


@pytest.fixture(autouse=True)
def registered(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    faultfs.register()
    monkeypatch.setattr(retry, "RETRY_BASE_S", 0.001)  # the same tries, without the waiting
    yield
    monkeypatch.delenv(faultfs.ENV, raising=False)


class Run:
    """One snapshot on ``faulty://`` and the commands a user would run on it."""

    def __init__(self, tmp: Path, pipe: str = PIPE) -> None:
        self.tmp = tmp
        tmp.mkdir(parents=True, exist_ok=True)
        self.pipe = tmp / "pipe.py"
        self.pipe.write_text(pipe)
        self.out = tmp / "out"
        self.url = faultfs.url(self.out)
        self.plans = 0

    def plan(self, monkeypatch: pytest.MonkeyPatch, error: str, **kw: Any) -> Plan:
        self.plans += 1
        plan = Plan(error=error, counter=str(self.tmp / f"count-{self.plans}"), **kw)
        monkeypatch.setenv(faultfs.ENV, plan.to_env())
        return plan

    def command(self, *args: str) -> Result:
        return CliRunner().invoke(cli, list(args))

    def create(self, *extra: str) -> Result:
        return self.command("create", f"{self.pipe}:preprocess", self.url, "--inputs-from",
                            f"{self.pipe}:items", "--workers", "0", "--inputs-per-task", "2",
                            "--json", *extra)  # fmt: skip

    def records(self) -> list[int]:
        return sorted(int(i) for b in snap.open(self.url).loader(4) for i in b["i"])

    def resumes(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """With the fault gone, the same create finishes with every record."""
        monkeypatch.delenv(faultfs.ENV, raising=False)
        again = self.create()
        assert again.exit_code == 0, again.output
        assert self.records() == RECORDS

    def leftovers(self) -> list[Path]:
        return [p for p in self.out.rglob("*") if p.name.endswith(".tmp")]


def assert_one_line_fault(res: Result, plan: Plan) -> None:
    """Exit 1 through the CLI's error path (no traceback) with one line naming the cause."""
    assert res.exit_code == 1, (res.exit_code, res.output, plan.fired())
    assert res.exit_code == 1, (res.exit_code, res.output, res.exception)
    assert isinstance(res.exception, SystemExit), repr(res.exception)
    errors = [line for line in res.output.splitlines() if line.startswith("snap: error:")]
    assert len(errors) == 1, res.output
    if plan.error in faultfs.SAYS:
        assert faultfs.SAYS[plan.error] in errors[0], errors[0]
        if plan.error == "nocreds":
            assert "cannot authenticate" in errors[0] and "credentials" in errors[0], errors[0]
        if plan.error == "nodns":
            assert "check the network" in errors[0], errors[0]
    else:
        cause = os.strerror(getattr(errno, plan.error))  # e.g. "No space left on device"
        assert cause.lower() in errors[0].lower(), errors[0]
    # (some faults only cost a size in a report: the answer is a later one; an error with
    # no file name of its own names what snap was working on: the file or its directory)
    places = [f["path"] for f in plan.fired()]
    if plan.error in (*FOREIGN, "denied"):  # (no file name of their own)
        places += [os.path.dirname(p) for p in places]
    assert any(p in errors[0] for p in places), (plan.fired(), errors[0])


def calls_of(run: Run, monkeypatch: pytest.MonkeyPatch, ops: tuple[str, ...], fn: Any) -> int:
    counting = run.plan(monkeypatch, "none", ops=ops)
    fn()
    monkeypatch.delenv(faultfs.ENV, raising=False)
    return counting.calls()


def fault_then_resume(
    run: Run, monkeypatch: pytest.MonkeyPatch, error: str, ops: tuple[str, ...], after: int
) -> None:
    plan = run.plan(monkeypatch, error, ops=ops, after_calls=after)
    res = run.create()
    assert plan.fired(), "the fault never fired"
    assert not run.leftovers()
    if res.exit_code == 0:  # the fault came after the commit: releasing the lease, tidying
        monkeypatch.delenv(faultfs.ENV, raising=False)
        assert run.records() == RECORDS
    else:
        assert_one_line_fault(res, plan)
        assert not (run.out / "manifest.json").exists()
    run.resumes(monkeypatch)


def test_the_sweep_reaches_every_phase_of_create(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = Run(tmp_path)
    plan = run.plan(monkeypatch, "none", ops=OPS)
    assert run.create().exit_code == 0
    paths = {p.relative_to(run.out).parts[0] for p in run.out.rglob("*")}
    assert {"_runs", "shards", "manifest.json"} <= paths
    assert plan.calls() > 20


@pytest.mark.parametrize("error", ["ENOSPC", "EIO"])
def test_a_fault_at_any_write_of_create(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: str
) -> None:
    run = Run(tmp_path / "count")
    total = calls_of(run, monkeypatch, ("write",), run.create)
    for after in range(total):
        run = Run(tmp_path / f"{error}-{after}")
        fault_then_resume(run, monkeypatch, error, ("write",), after)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    error=st.sampled_from([*ERRNOS, "timeout", *FOREIGN]),
    ops=st.sampled_from(OPS),
    data=st.data(),
)
def test_any_fault_at_any_call_of_create(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    error: str,
    ops: str,
    data: st.DataObject,
) -> None:
    base = tmp_path_factory.mktemp("faults")
    run = Run(base / "count")
    total = calls_of(run, monkeypatch, (ops,), run.create)
    after = data.draw(st.integers(0, total - 1), label="after")
    fault_then_resume(Run(base / "run"), monkeypatch, error, (ops,), after)


# Which of the sweep's faults each call of create gets: they take turns from an offset drawn
# for each run, so that runs of the suite together give every call each of them (all four at
# every call took 130 s of the suite's worker time). SNAP_FAULT_OFFSET=k fixes the offset.
SWEPT = ["EDQUOT", "EROFS", "EACCES", "timeout"]
OFFSET = int(os.environ.get("SNAP_FAULT_OFFSET", random.randrange(len(SWEPT))))


@pytest.mark.slow
@pytest.mark.parametrize("ops", OPS)
def test_every_fault_at_every_call_of_create(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ops: str
) -> None:
    total = calls_of(Run(tmp_path / "count"), monkeypatch, (ops,), Run(tmp_path / "c").create)
    for after in range(total):
        error = SWEPT[(after + OFFSET) % len(SWEPT)]
        try:
            fault_then_resume(Run(tmp_path / str(after)), monkeypatch, error, (ops,), after)
        except AssertionError as err:
            said = f"{error} at call {after} (SNAP_FAULT_OFFSET={OFFSET})"
            raise AssertionError(f"{said}: {err}") from err


def test_a_transient_time_out_is_retried_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    total = calls_of(Run(tmp_path / "count"), monkeypatch, OPS, Run(tmp_path / "c").create)
    for after in range(0, total, 3):
        run = Run(tmp_path / str(after))
        plan = run.plan(monkeypatch, "timeout", ops=OPS, after_calls=after, times=1)
        res = run.create()
        assert res.exit_code == 0, (after, res.output)
        assert len(plan.fired()) == 1
        monkeypatch.delenv(faultfs.ENV, raising=False)
        assert run.records() == RECORDS


@pytest.mark.parametrize("error", ["ENOSPC", "EDQUOT"])
def test_a_disk_filling_up_mid_shard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: str
) -> None:
    for budget in (0, 500, 3000, 9000):
        run = Run(tmp_path / f"{budget}")
        plan = run.plan(monkeypatch, error, ops=("write",), after_bytes=budget)
        res = run.create()
        assert plan.fired(), budget
        assert_one_line_fault(res, plan)
        assert not run.leftovers()
        run.resumes(monkeypatch)


def test_a_fault_tidying_up_after_the_commit_is_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = Run(tmp_path)
    plan = run.plan(monkeypatch, "EIO", ops=("delete",))  # the old run state stays
    res = run.create()
    assert res.exit_code == 0, res.output
    assert "the snapshot is committed" in res.output and "run snap gc" in res.output
    assert plan.fired()[0]["path"].startswith(f"{run.out}/_runs/")
    monkeypatch.delenv(faultfs.ENV, raising=False)
    assert run.records() == RECORDS
    assert "_runs/" in run.command("gc", run.url, "--json").output


def made(tmp_path: Path) -> Run:
    run = Run(tmp_path)
    assert run.create().exit_code == 0
    return run


def test_a_read_fault_in_the_loader_is_a_clean_error_and_never_wrong_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = made(tmp_path)
    total = calls_of(run, monkeypatch, ("read", "list"), run.records)
    for ops in (("read",), ("list",)):
        for after in range(total):
            plan = run.plan(monkeypatch, "EIO", ops=ops, after_calls=after)
            try:
                got = run.records()
            except snap.SnapError as err:
                assert plan.fired()
                assert "Input/output error" in str(err) and str(run.out) in str(err), err
            else:
                assert got == RECORDS  # the fault came after the last call the loader made
                assert not plan.fired()
            monkeypatch.delenv(faultfs.ENV, raising=False)
        plan = run.plan(monkeypatch, "timeout", ops=ops, after_calls=total // 2, times=2)
        assert run.records() == RECORDS  # a transient fault is retried
        monkeypatch.delenv(faultfs.ENV, raising=False)
        for error in FOREIGN:  # a library's own failure is a StorageError naming the path
            plan = run.plan(monkeypatch, error, ops=ops)  # the first such call fails
            try:
                got = run.records()
            except snap.StorageError as err:
                assert plan.fired()
                assert faultfs.SAYS[error] in str(err) and str(run.out) in str(err), err
            else:
                assert got == RECORDS and not plan.fired()  # the loader makes no such call
            monkeypatch.delenv(faultfs.ENV, raising=False)


@pytest.mark.parametrize("command", ["inspect", "verify", "head"])
def test_a_read_fault_in_a_reading_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    run = made(tmp_path)
    total = calls_of(run, monkeypatch, ("read", "list"), lambda: run.command(command, run.url))
    for after in range(total):
        for error in (ERRNOS[after % len(ERRNOS)], FOREIGN[after % len(FOREIGN)]):
            plan = run.plan(monkeypatch, error, ops=("read", "list"), after_calls=after)
            res = run.command(command, run.url)
            assert plan.fired()
            assert_one_line_fault(res, plan)
    monkeypatch.delenv(faultfs.ENV, raising=False)
    assert run.command("verify", run.url).exit_code == 0


def with_leftovers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Run:
    """A snapshot, and an --overwrite with other params that failed half-way (its run state
    and shards stay behind): gc has work to do."""
    run = Run(tmp_path)
    assert run.create().exit_code == 0
    plan = run.plan(monkeypatch, "EIO", ops=("write",), after_calls=17)
    assert run.create("--param", "tag=1", "--overwrite").exit_code == 1
    assert plan.fired()[0]["path"].endswith(".json")  # a task's result: its shard is written
    monkeypatch.delenv(faultfs.ENV, raising=False)
    return run


def copy_of(template: Run, tmp: Path) -> Run:
    """A copy of ``template``'s directory (its snapshot, its files' times kept) as a Run of
    its own: the same state without the creates that made it (most of a sweep's time)."""
    skip = shutil.ignore_patterns("count-*")  # (the template's fault plans' counters)
    shutil.copytree(template.tmp, tmp, copy_function=shutil.copy2, ignore=skip)
    return Run(tmp)


def test_a_fault_at_any_call_of_gc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    template = with_leftovers(tmp_path / "template", monkeypatch)
    probe = copy_of(template, tmp_path / "count")
    answers = []
    total = calls_of(probe, monkeypatch, OPS,
                     lambda: answers.append(probe.command("gc", probe.url, "--json")))  # fmt: skip
    removed = json.loads(answers[0].output)["removed"]
    assert {g["kind"] for g in removed} == {"run", "shard"}, removed
    kinds = [*ERRNOS, *FOREIGN]
    for after in range(total):
        run = copy_of(template, tmp_path / str(after))
        error = kinds[after % len(kinds)]
        plan = run.plan(monkeypatch, error, ops=OPS, after_calls=after)
        res = run.command("gc", run.url)
        assert plan.fired()
        monkeypatch.delenv(faultfs.ENV, raising=False)
        if res.exit_code == 0:  # the fault came after the work (releasing the lease): done
            dry = json.loads(run.command("gc", run.url, "--dry-run", "--json").output)
            assert dry["would_remove"] == [], (after, plan.fired(), dry)
        else:
            assert_one_line_fault(res, plan)
        assert run.records() == RECORDS, after
        assert run.command("gc", run.url).exit_code == 0
        assert json.loads(run.command("gc", run.url, "--json").output)["removed"] == []
        assert run.command("verify", run.url).exit_code == 0


@pytest.mark.parametrize(
    ("error", "why"),
    [
        ("EACCES", "this user may not write there"),
        ("EROFS", "it is on a read-only filesystem"),
        ("denied", "this user may not write there"),
    ],  # fmt: skip
)
def test_gc_where_it_may_not_write_says_what_gc_needs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: str, why: str
) -> None:
    """Another user's snapshot (or a read-only mount): gc's error said "choose another
    OUTPUT", a writer's advice; gc needs write access, reading the snapshot does not."""
    run = with_leftovers(tmp_path, monkeypatch)
    for ops in (("write",), ("delete",)):  # the lease's file, then the garbage
        plan = run.plan(monkeypatch, error, ops=ops)
        res = run.command("gc", run.url)
        assert_one_line_fault(res, plan)
        assert f"snap gc cannot remove anything from {run.url}: {why}" in res.output
        assert "needs no write access" in res.output and "OUTPUT" not in res.output
        assert run.command("verify", run.url).exit_code == 0  # reading needs no writing
    monkeypatch.delenv(faultfs.ENV, raising=False)
    assert run.command("gc", run.url).exit_code == 0


def create_process(
    forks: Forks, run: Run, plan: Plan | None, workers: str
) -> subprocess.CompletedProcess[str]:
    """snap create in a process of its own (forked: :mod:`tests.forks`), its workers too."""
    args = ["create", f"{run.pipe}:preprocess", run.url, "--inputs-from", f"{run.pipe}:items",
            "--workers", workers, "--inputs-per-task", "1", "--json"]  # fmt: skip
    return forks.run(args, run.tmp, faultfs.subprocess_env(run.tmp, plan), 180)


@pytest.mark.slow
# one errno (EIO and the rest take the same path in a worker as ENOSPC, and every errno is
# swept in process by test_every_fault_at_every_call_of_create) and one error without errno
@pytest.mark.parametrize("error", ["ENOSPC", "nocreds"])
def test_faults_in_worker_processes(tmp_path: Path, forks: Forks, error: str) -> None:
    count = Run(tmp_path / "count")
    counting = Plan("none", str(tmp_path / "counted"), ops=("write",))
    assert create_process(forks, count, counting, "2").returncode == 0
    total = counting.calls()  # ~50 writes: 5 points, from the first to the commit's (each
    # point ~3 s; every call is swept in process by test_every_fault_at_every_call_of_create)
    for after in range(0, total, max(1, total // 5)):
        run = Run(tmp_path / str(after))
        plan = Plan(error, str(tmp_path / f"plan-{after}"), ops=("write",), after_calls=after)
        res = create_process(forks, run, plan, "2")
        assert plan.fired()
        if res.returncode == 0:  # it hit the lease's release, after the commit: harmless, the
            assert [f["path"] for f in plan.fired()][0].rsplit("/", 1)[-1].startswith("lease-")
            assert run.records() == RECORDS  # lease then expires or is removed
            continue
        assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
        (line,) = [x for x in res.stderr.splitlines() if x.startswith("snap: error:")]
        assert faultfs.SAYS.get(error, error) in line and str(run.out) in line, line
        assert not run.leftovers() and not (run.out / "manifest.json").exists()
        again = create_process(forks, run, None, "2")
        assert again.returncode == 0, again.stderr
        assert run.records() == RECORDS


@pytest.mark.slow
@pytest.mark.parametrize("error", ["nocreds", "foreign"])  # no OSError (a gaierror is one)
def test_a_storage_library_failing_mid_shard_in_a_worker_is_one_line(
    tmp_path: Path, forks: Forks, error: str
) -> None:
    """An S3 server gone while a worker uploaded a shard: botocore's EndpointConnectionError
    (no OSError) came out of the shard's close as "internal error in a worker process (a bug
    in snap): Traceback ...". Failures mid-file and at the close, in worker processes."""
    # the bytes a create writes: shards are ~97 % of them (of PIPE's compressible records' 28 %,
    # and six budgets could all fall in the manifest, task records and leases: a CI run did)
    count = Run(tmp_path / "count", NOISY_PIPE)
    counting = Plan("none", str(tmp_path / "counted"), ops=("write",), after_bytes=1 << 40)
    assert create_process(forks, count, counting, "2").returncode == 0
    total = json.loads(Path(counting.counter).read_text())["bytes"]
    in_shards = []
    for part in (0.5, 0.3, 0.7, 0.85, 0.15, 0.95):  # until one fires in a shard: which write
        budget = int(total * part)  # crosses the budget depends on the workers' interleaving
        if any(in_shards):
            break
        run = Run(tmp_path / f"{budget}", NOISY_PIPE)
        plan = Plan(error, str(tmp_path / f"plan-{budget}"), ops=("write",), after_bytes=budget)
        res = create_process(forks, run, plan, "2")
        assert plan.fired()
        in_shards.append(any("/shards/" in f["path"] for f in plan.fired()))
        assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
        assert "a bug in snap" not in res.stderr, res.stderr
        (line,) = [x for x in res.stderr.splitlines() if x.startswith("snap: error:")]
        assert faultfs.SAYS.get(error, error) in line, line
        assert not run.leftovers() and not (run.out / "manifest.json").exists()
    assert any(in_shards)  # (a shard's write or close failed, in a worker)
