"""A create that failed or was killed keeps its finished tasks when inputs change before it is
run again (:mod:`snapshot_cli.writers.adopt`): only the tasks whose key (code, params, each
input's name, size and content) the new plan has are kept, their shards whole; the rest is
computed, and the records are a fresh create's.

Before: one more file in the input directory (the next day's data) threw every finished task
away ("resumed 0": the run was resumed only if its whole fingerprint matched)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import snapshot_cli as snap
from snapshot_cli import layout
from snapshot_cli.readers import verify as verify_mod

PIPE = """
import os
HERE = os.path.dirname(os.path.abspath(__file__))
SCALE = 1
def preprocess(path):
    name = os.path.basename(path)
    with open(os.path.join(HERE, "calls.txt"), "a") as f:
        f.write(name + "\\n")
    fail = os.path.join(HERE, "FAIL")
    if os.path.exists(fail):
        with open(fail) as f:
            if name == f.read().strip():
                raise RuntimeError("stopped on purpose")
    if os.environ.get("SNAP_TEST_SLOW"):
        import time; time.sleep(float(os.environ["SNAP_TEST_SLOW"]))
    with open(path, "rb") as f:
        body = f.read()
    yield {"name": name, "body": body * SCALE}
"""


class Project:
    """A pipeline file, an input directory and one OUTPUT, as a user's project holds them."""

    def __init__(self, tmp: Path, count: int) -> None:
        self.tmp, self.data, self.out = tmp, tmp / "data", tmp / "out"
        self.data.mkdir(parents=True)
        self.pipe = tmp / "pipe.py"
        self.pipe.write_text(PIPE)
        for i in range(count):
            self.add(i)

    def add(self, i: int, body: str | None = None) -> None:
        (self.data / f"f{i:04d}.bin").write_text(body if body is not None else f"input {i}")

    def fail_at(self, i: int | None) -> None:
        flag = self.tmp / "FAIL"
        if i is None:
            flag.unlink(missing_ok=True)
        else:
            flag.write_text(f"f{i:04d}.bin")

    def calls(self) -> list[str]:
        """The inputs the pipeline was called on since the last :meth:`reset`."""
        path = self.tmp / "calls.txt"
        return path.read_text().split() if path.exists() else []

    def reset(self) -> None:
        (self.tmp / "calls.txt").unlink(missing_ok=True)

    def create(self, out: Path | None = None, **kw: Any) -> snap.CreateInfo:
        kw = {"workers": 0, "progress": False, **kw}
        return snap.create(f"{self.pipe}:preprocess", out or self.out,
                           inputs=str(self.data / "*.bin"), **kw)  # fmt: skip

    def create_as_planned(self, **kw: Any) -> snap.CreateInfo:
        """:meth:`create`, after a dry run of it: the dry run calls the pipeline on nothing
        and plans what the create then does (it planned an adoptable run's finished tasks
        as if none were done, and counted a run --overwrite does not resume)."""
        calls = self.calls()
        planned = self.create(dry_run=True, **kw)
        assert planned.dry_run and self.calls() == calls
        info = self.create(**kw)
        said = ("tasks", "tasks_reused", "tasks_resumed")
        assert [getattr(planned, k) for k in said] == [getattr(info, k) for k in said]
        return info

    def failed_create(self, at: int, **kw: Any) -> None:
        self.fail_at(at)
        with pytest.raises(snap.PipelineError, match="stopped on purpose"):
            self.create(**kw)
        self.fail_at(None)

    def records(self, out: Path | None = None) -> list[tuple[str, bytes]]:
        loader = snap.open(out or self.out).loader(batch_size=64, shuffle=False)
        return sorted((n, bytes(b)) for batch in loader
                      for n, b in zip(batch["name"], batch["body"], strict=True))  # fmt: skip

    def fresh(self, **kw: Any) -> list[tuple[str, bytes]]:
        """The records of a create from scratch over the inputs as they are now."""
        other = self.tmp / "fresh"
        self.create(other, overwrite=True, **kw)
        return self.records(other)

    def runs(self) -> list[str]:
        runs = self.out / layout.RUNS_DIR
        return sorted(p.name for p in runs.iterdir() if p.is_dir()) if runs.exists() else []


def names(*numbers: int) -> list[str]:
    return sorted(f"f{i:04d}.bin" for i in numbers)


def test_a_failed_first_create_keeps_its_finished_tasks_when_an_input_lands(
    tmp_path: Path,
) -> None:
    """One task per input, in order (workers=0): f0000..f0029 finished, f0030 failed."""
    p = Project(tmp_path, 60)
    p.failed_create(30, inputs_per_task=1)
    p.add(60)  # the next day's file
    p.reset()
    info = p.create_as_planned(inputs_per_task=1)
    assert (info.tasks, info.tasks_resumed) == (61, 30)
    assert sorted(p.calls()) == names(*range(30, 61))  # only the unfinished and the new
    assert p.records() == p.fresh(inputs_per_task=1)
    assert p.runs() == []  # the adopted run went with its commit
    code = subprocess.run([sys.executable, "-m", "snapshot_cli", "gc", str(p.out), "--dry-run",
                           "--json"], capture_output=True, text=True, check=True)  # fmt: skip
    assert json.loads(code.stdout)["would_remove"] == []  # no shard of it left behind


def test_content_defined_tasks_are_kept_when_the_count_of_inputs_changes_their_target(
    tmp_path: Path,
) -> None:
    """255 inputs choose tasks of 2 inputs, 256 of 4 (Chunking.choose): a first create taking
    over a run keeps the run's grouping, or no task of it would be found again."""
    p = Project(tmp_path, 255)
    p.failed_create(120)
    p.add(255)
    p.reset()
    info = p.create_as_planned()
    assert info.tasks_resumed > 100
    computed = set(p.calls())
    assert len(computed) == 256 - info.tasks_resumed  # (here one input a task)
    assert names(120) == sorted(computed & set(names(120)))
    assert names(255) == sorted(computed & set(names(255)))
    assert p.records() == p.fresh()


def test_a_changed_input_of_a_finished_task_is_computed_again(tmp_path: Path) -> None:
    p = Project(tmp_path, 20)
    p.failed_create(12, inputs_per_task=1)
    p.add(3, "changed, another size")
    p.add(5, "input X")  # the same size: its content tells it
    p.add(20)
    p.reset()
    info = p.create_as_planned(inputs_per_task=1)
    assert info.tasks_resumed == 10
    assert sorted(p.calls()) == names(3, 5, *range(12, 21))
    records = dict(p.records())
    assert records["f0003.bin"] == b"changed, another size" and records["f0005.bin"] == b"input X"
    assert p.records() == p.fresh(inputs_per_task=1)


def test_changed_code_reuses_nothing(tmp_path: Path) -> None:
    p = Project(tmp_path, 12)
    p.failed_create(8, inputs_per_task=1)
    p.pipe.write_text(PIPE.replace("SCALE = 1", "SCALE = 2"))
    p.add(12)
    p.reset()
    info = p.create_as_planned(inputs_per_task=1)
    assert info.tasks_resumed == 0
    assert sorted(p.calls()) == names(*range(13))
    assert all(body == f"input {n[1:5].lstrip('0') or 0}".encode() * 2 for n, body in p.records())
    assert p.runs() == []  # the dead run of the old code went at the commit


def test_a_failed_grow_keeps_its_finished_tasks_when_another_input_lands(tmp_path: Path) -> None:
    p = Project(tmp_path, 10)
    p.create(inputs_per_task=1)
    for i in range(10, 30):
        p.add(i)
    p.failed_create(20, inputs_per_task=1)  # f0010..f0019 computed and finished
    p.add(30)
    p.reset()
    info = p.create_as_planned(inputs_per_task=1)
    assert (info.version, info.tasks_reused, info.tasks_resumed) == (2, 10, 10)
    assert sorted(p.calls()) == names(*range(20, 31))
    assert p.records() == p.fresh(inputs_per_task=1)


def test_adopted_again_and_again_nothing_is_lost_or_counted_twice(tmp_path: Path) -> None:
    p = Project(tmp_path, 20)
    p.failed_create(5, inputs_per_task=1)
    p.add(20)
    p.failed_create(15, inputs_per_task=1)  # adopted: 5 kept, 5..14 computed, then failed
    p.add(21)
    p.reset()
    info = p.create_as_planned(inputs_per_task=1)
    assert info.tasks_resumed == 15
    assert sorted(p.calls()) == names(*range(15, 22))
    assert p.records() == p.fresh(inputs_per_task=1)
    assert info.num_records == 22


def test_a_missing_or_cut_shard_of_a_finished_task_is_computed_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Adopted or resumed, a task is kept only with its shards whole (one listing)."""
    p = Project(tmp_path, 10)
    p.failed_create(6, inputs_per_task=1)
    (run,) = p.runs()
    results = {
        int(r.stem): json.loads(r.read_text()) for r in (p.out / "_runs" / run / "tasks").iterdir()
    }
    (p.out / results[1]["shards"][0]["path"]).unlink()
    with open(p.out / results[2]["shards"][0]["path"], "r+b") as f:
        f.truncate(10)
    p.add(10)
    p.reset()
    info = p.create_as_planned(inputs_per_task=1)
    assert info.tasks_resumed == 4
    assert sorted(p.calls()) == names(1, 2, *range(6, 11))
    assert p.records() == p.fresh(inputs_per_task=1)
    assert "missing or cut short" in caplog.text
    # the same for a run resumed with its inputs unchanged
    q = Project(tmp_path / "same", 6)
    q.failed_create(4, inputs_per_task=1)
    (run,) = q.runs()
    first = json.loads((q.out / "_runs" / run / "tasks" / "00000.json").read_text())
    (q.out / first["shards"][0]["path"]).unlink()
    q.reset()
    info = q.create_as_planned(inputs_per_task=1)
    assert info.tasks_resumed == 3
    assert sorted(q.calls()) == names(0, 4, 5)
    assert q.records() == q.fresh(inputs_per_task=1)


def test_a_result_file_of_the_old_plan_is_not_taken_for_another_task(tmp_path: Path) -> None:
    """The run is adopted in place: a result the old plan numbered ``i`` (or one a paused
    writer of it writes late) is not the new plan's task ``i`` unless its key is that task's."""
    p = Project(tmp_path, 10)
    p.failed_create(6, inputs_per_task=1)
    (run,) = p.runs()
    tasks = p.out / "_runs" / run / "tasks"
    stale = json.loads((tasks / "00003.json").read_text())
    p.add(0, "other")  # f0000 changed: tasks keep their numbers, task 0's key changes
    p.failed_create(8, inputs_per_task=1)  # adopted: 1..5 kept, 0, 6, 7 computed
    (tasks / "00000.json").write_text(json.dumps({**stale, "task": 0}))  # a late write
    p.reset()
    info = p.create_as_planned(inputs_per_task=1)
    assert info.tasks_resumed == 7
    assert sorted(p.calls()) == names(0, 8, 9)
    assert dict(p.records())["f0000.bin"] == b"other"
    assert p.records() == p.fresh(inputs_per_task=1)


def test_the_run_of_a_live_writer_is_never_taken(tmp_path: Path) -> None:
    """A create with a changed input while another is writing waits for it (or, with
    wait=False, stops): it never adopts the run being written."""
    p = Project(tmp_path, 8)
    env = {**os.environ, "SNAP_TEST_SLOW": "0.3"}
    cmd = [sys.executable, "-m", "snapshot_cli", "create", f"{p.pipe}:preprocess", str(p.out),
           "--input", str(p.data / "*.bin"), "--workers", "0", "--inputs-per-task", "1",
           "--json"]  # fmt: skip
    first = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 60
        while len(p.calls()) < 3 and time.time() < deadline:
            time.sleep(0.02)
        p.add(8)
        with pytest.raises(snap.LeaseError):
            p.create(inputs_per_task=1, wait=False)
        (run,) = p.runs()
        assert "taken" not in json.loads((p.out / "_runs" / run / "run.json").read_text())
    finally:
        out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert json.loads(out)["num_records"] in (8, 9)  # (its listing may have had f0008)


def test_a_first_create_killed_with_sigkill_keeps_its_tasks_when_an_input_lands(
    tmp_path: Path,
) -> None:
    """The probe's case through the CLI: ``kill -9`` mid-create with worker processes and
    the default grouping; one more file; the same command again."""
    p = Project(tmp_path, 120)
    env = {**os.environ, "SNAP_TEST_SLOW": "0.02"}
    cmd = [sys.executable, "-m", "snapshot_cli", "create", f"{p.pipe}:preprocess", str(p.out),
           "--input", str(p.data / "*.bin"), "--workers", "2", "--json"]  # fmt: skip
    first = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True)  # fmt: skip
    deadline = time.time() + 120
    while len(p.calls()) < 60 and time.time() < deadline:
        time.sleep(0.005)
    os.killpg(first.pid, signal.SIGKILL)
    first.communicate()
    assert not (p.out / "manifest.json").exists()
    (run,) = p.runs()
    done = len(list((p.out / "_runs" / run / "tasks").glob("*.json")))
    assert done > 10
    p.add(120)
    p.reset()
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300,
                           check=False)  # fmt: skip
    assert again.returncode == 0, again.stderr
    info = json.loads(again.stdout)
    # (120 inputs and 121 choose one input a task: Chunking.choose)
    assert (info["tasks"], info["tasks_resumed"]) == (121, done)
    assert len(p.calls()) == 121 - done  # only the unfinished and the new
    assert f"run {run} ended unfinished (it failed or was stopped)" in again.stderr
    computed = 121 - info["tasks_reused"]
    assert (
        f"resuming run {run}: {done} of those {computed} tasks were done by it; computing the "
        f"other {computed - done}"
    ) in again.stderr
    assert p.records() == p.fresh()


def repeated(x: int) -> Any:
    """Items that repeat (two tasks of one key); stops at the item SNAP_TEST_STOP names."""
    if str(x) == os.environ.get("SNAP_TEST_STOP"):
        raise RuntimeError("stopped on purpose")
    yield {"v": str(x)}


def test_two_tasks_of_one_key_take_one_finished_result_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """[1, 1] is the first task and the third: the one finished went to both, and the
    manifest listed its shard twice (a snapshot verify called damaged)."""
    out = str(tmp_path / "s")
    monkeypatch.setenv("SNAP_TEST_STOP", "2")
    with pytest.raises(snap.PipelineError, match="stopped on purpose"):
        snap.create(repeated, out, inputs=[1, 1, 2, 2, 1, 1, 3], inputs_per_task=2, workers=0)
    monkeypatch.delenv("SNAP_TEST_STOP")
    info = snap.create(repeated, out, inputs=[1, 1, 2, 2, 1, 1, 3, 4], inputs_per_task=2,
                       workers=0, progress=False)  # fmt: skip
    assert (info.tasks, info.tasks_resumed) == (4, 1)
    paths = [s.path for s in snap.open(out).shards]
    assert len(paths) == len(set(paths)) == 4
    assert verify_mod.verify(snap.open(out)).ok  # (it listed one shard twice: damaged)
    got = sorted(v for b in snap.open(out).loader(16, shuffle=False) for v in b["v"])
    assert got == sorted(str(x) for x in [1, 1, 2, 2, 1, 1, 3, 4])


def test_no_result_of_the_old_plan_is_left_for_an_older_snap(tmp_path: Path) -> None:
    """An older snap resumes the adopted run (its fingerprint matches) and reads results by
    their numbers: the old plan's are removed before run.json names the new plan."""
    p = Project(tmp_path, 12)
    p.failed_create(8, inputs_per_task=1)
    (p.data / "f0000.bin").unlink()  # every task after it has another number now
    p.failed_create(10, inputs_per_task=1)  # the adopting create, stopped in its turn
    (run,) = p.runs()
    info = json.loads((p.out / layout.RUNS_DIR / run / "run.json").read_text())
    files = list((p.out / layout.RUNS_DIR / run / "tasks").iterdir())
    results = [json.loads(f.read_text()) for f in files]
    assert results and all(r["key"] == info["keys"][r["task"]] for r in results)
    assert len(results) == 2  # f0008 and f0009, computed by the adopting create
    p.reset()
    assert p.create(inputs_per_task=1).tasks_resumed == 9  # 7 taken, 2 of its own
    assert p.records() == p.fresh(inputs_per_task=1)


def test_a_run_of_other_layout_options_is_not_adopted(tmp_path: Path) -> None:
    """Adopted, the run's options are kept: another --compression would be dropped."""
    p = Project(tmp_path, 10)
    p.failed_create(6, inputs_per_task=1, compression="lz4")
    p.add(10)
    p.reset()
    info = p.create_as_planned(inputs_per_task=1, compression="none")
    assert info.tasks_resumed == 0 and sorted(p.calls()) == names(*range(11))
    assert snap.open(p.out).manifest.compression["codec"] == "none"


@pytest.mark.parametrize(
    "first, then",
    [
        ({"compression": "lz4"}, {"compression": "zstd", "level": 3}),
        ({}, {"compression": "none"}),
        ({}, {"shard_size": "1KiB"}),
        ({}, {"batch_rows": 2}),
        ({"batch_bytes": "2MiB"}, {}),
    ],
)
def test_a_run_of_other_layout_options_is_not_resumed_either(
    tmp_path: Path, first: dict[str, Any], then: dict[str, Any]
) -> None:
    """The same code, params and inputs run again with other layout options after a first
    create died (a new-user probe: killed with --compression lz4, run again with zstd level
    3): the run was resumed with its own options, those given now dropped without a word.
    It is left, as the README says, and every task computed with the options given."""
    p = Project(tmp_path, 8)
    p.failed_create(5, inputs_per_task=1, **first)
    p.reset()
    info = p.create_as_planned(inputs_per_task=1, **then)
    assert info.tasks_resumed == 0 and sorted(p.calls()) == names(*range(8))
    assert p.records() == p.fresh(inputs_per_task=1, **then)
    made = snap.open(p.out).manifest
    fresh = snap.open(p.tmp / "fresh").manifest
    assert made.compression == fresh.compression
    assert len(made.shards) == len(fresh.shards)
    assert [s.batch_rows for s in made.shards] == [s.batch_rows for s in fresh.shards]


def test_overwrite_adopts_nothing(tmp_path: Path) -> None:
    """--overwrite computes everything (README: "a new version computed in full")."""
    p = Project(tmp_path, 10)
    p.failed_create(6, inputs_per_task=1)
    p.add(10)
    p.reset()
    info = p.create_as_planned(inputs_per_task=1, overwrite=True)
    assert info.tasks_resumed == 0 and sorted(p.calls()) == names(*range(11))


@pytest.mark.parametrize("first", ["overwrite", "create"])
def test_overwrite_resumes_nothing_of_the_same_fingerprint(tmp_path: Path, first: str) -> None:
    """Nor a run of the same code, params and inputs: an --overwrite is given when what
    changed is outside the fingerprint (a file the pipeline reads), and a killed --overwrite
    run again after such an edit kept 45 of 60 tasks made with the file before (a storage
    probe). A killed first create followed by --overwrite alike."""
    p = Project(tmp_path, 10)
    if first == "overwrite":
        p.create(inputs_per_task=1)
        p.failed_create(6, inputs_per_task=1, overwrite=True)
    else:
        p.failed_create(6, inputs_per_task=1)
    p.reset()  # (the same code, params and inputs: what changed, snap cannot see)
    info = p.create_as_planned(inputs_per_task=1, overwrite=True)  # (a dry run said 6)
    assert info.tasks_resumed == 0 and sorted(p.calls()) == names(*range(10))
    assert p.runs() == []  # the run not taken went with the commit


@pytest.mark.parametrize(
    ("given", "said"),
    [({"shard_size": "1MiB"}, "--shard-size 1.0 MiB there, --shard-size 256.0 MiB now"),
     ({"compression": "lz4"}, "--compression lz4 there, --compression zstd now")],
)  # fmt: skip
def test_a_run_of_other_layout_options_not_resumed_is_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, given: dict[str, Any], said: str
) -> None:
    """ "The same command" run again less a ``--shard-size`` computed every finished task of
    the failed run again, unsaid (a probe): the run, kept for that command, is named, with
    its options and what to do."""
    p = Project(tmp_path, 10)
    p.failed_create(6, inputs_per_task=1, **given)
    run = p.runs()[0]
    with caplog.at_level("WARNING", logger="snapshot_cli"):
        info = p.create(inputs_per_task=1)
    assert info.tasks_resumed == 0
    (warned,) = [r.getMessage() for r in caplog.records if "is not resumed" in r.getMessage()]
    assert f"run {run} of this code, params and inputs, which finished 6 tasks" in warned
    assert said in warned and "run it with those options to resume that run" in warned
    assert p.records() == p.fresh(inputs_per_task=1)
