"""``snap create --executor ray`` against a real local Ray cluster (``ray start --head``).

The cluster is started once per session with 2 CPUs; every create connects to it through
RAY_ADDRESS as a user's driver would. Covered: the same snapshot as the local executor, a
driver killed mid-run and resumed, a worker killed mid-task (Ray retries it), a failing user
function, and the checks on options.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import snapshot_cli as snap
from snapshot_cli.errors import OptionError, PipelineError
from tests.conftest import REPO
from tests.writers.conftest import RAY_ENV  # (and the ray_cluster fixture)
from tests.writers.test_processes import calls, make_inputs, pid_alive, records, wait_for

pytestmark = pytest.mark.slow


PIPE = """
import os, signal, time
import numpy as np

def preprocess(path, *, calls, gate="", die_once="", fail_on=-1):
    name = os.path.basename(path)
    i = int(name.split("-")[1].split(".")[0])
    with open(calls, "a") as f:
        f.write(f"{name} {os.getpid()}\\n")
    if i == fail_on:
        raise ValueError(f"cannot decode input {i}")
    for j in range(4):
        yield {"x": np.random.default_rng(i * 10 + j).integers(0, 100, 500, dtype=np.int32),
               "id": f"{i}-{j}"}
        if j == 1 and die_once and i == 2 and not os.path.exists(die_once):
            open(die_once, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)  # the worker dies mid-task, once
        if j == 1 and gate and i >= 3:
            while not os.path.exists(gate):
                time.sleep(0.01)
"""


def _shard_layout(path: str) -> list[tuple[str, int]]:
    """(task-seq, records) per shard, without the run id (which differs between runs)."""
    return sorted((s.path.split("-", 1)[1], s.records) for s in snap.open(path).shards)


def test_ray_makes_the_same_snapshot_as_the_local_executor(
    ray_cluster: str, tmp_path: Path, write_pipeline
) -> None:  # type: ignore[no-untyped-def]
    spec = write_pipeline(PIPE)
    make_inputs(tmp_path / "in", 6)
    kwargs: dict[str, Any] = {
        "inputs": str(tmp_path / "in" / "*.txt"),
        "inputs_per_task": 1,
        "batch_rows": 2,
        "params": {"calls": str(tmp_path / "calls")},
    }
    local = snap.create(spec, str(tmp_path / "local"), workers=2, **kwargs)
    handler = signal.signal(signal.SIGTERM, signal.SIG_DFL)  # (as a new process has it)
    try:
        ray = snap.create(spec, str(tmp_path / "ray"), executor="ray", **kwargs)
        # ray.init's own SIGTERM handler went with the Ray the call started (it stayed, and
        # a later fork of this process inherited it)
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, handler)
    assert ray.fingerprint == local.fingerprint and ray.num_records == 24
    assert _shard_layout(str(tmp_path / "ray")) == _shard_layout(str(tmp_path / "local"))
    assert records(str(tmp_path / "ray")) == records(str(tmp_path / "local"))
    # the tasks really ran in Ray's worker processes, not here or in a local pool
    ray_pids = {pid for name, pid in calls(tmp_path / "calls")[6:]}
    assert os.getpid() not in ray_pids
    # incremental on Ray: one input changed and one added run as Ray tasks, the rest reused
    (tmp_path / "in" / "in-002.txt").write_text("102")
    (tmp_path / "in" / "in-006.txt").write_text("6")
    grown = snap.create(spec, str(tmp_path / "ray"), executor="ray", **kwargs)
    assert (grown.version, grown.tasks, grown.tasks_reused) == (2, 7, 5)
    assert sorted(name for name, _ in calls(tmp_path / "calls")[12:]) == ["in-002.txt",
                                                                         "in-006.txt"]  # fmt: skip
    snap.create(spec, str(tmp_path / "local2"), workers=2, **kwargs)
    assert records(str(tmp_path / "ray")) == records(str(tmp_path / "local2"))


def test_ray_through_the_cli_as_a_real_process(ray_cluster: str, tmp_path: Path) -> None:
    subprocess.run([sys.executable, "examples/quickstart/make_inputs.py", str(tmp_path / "raw"),
                    "10"], cwd=REPO, check=True)  # fmt: skip
    out = tmp_path / "snap"
    res = subprocess.run(
        [sys.executable, "-m", "snapshot_cli", "create",
         "examples/quickstart/pipeline.py:preprocess", str(out),
         "--input", str(tmp_path / "raw" / "*.bin"), "--executor", "ray",
         "--ray-address", ray_cluster, "--json"],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["num_records"] == 10
    assert snap.open(str(out)).num_records == 10


def test_the_driver_s_storage_configuration_reaches_the_ray_workers(
    ray_cluster: str, tmp_path: Path
) -> None:
    """A cluster started without the driver's storage variables (a real cluster's own
    environment): its tasks wrote to storage.googleapis.com while the driver took the lease
    on the emulator (FSSPEC_*, STORAGE_EMULATOR_HOST), or found no S3 endpoint."""
    (tmp_path / "seen.py").write_text(
        "import os\n"
        "def items():\n    return list(range(4))\n"
        "def f(i):\n"
        "    yield {'i': i, 'fsspec': os.environ.get('FSSPEC_SNAPTEST_OPTION', ''),\n"
        "           'gcsfs': os.environ.get('GCSFS_SNAPTEST', ''),\n"
        "           'secret': os.environ.get('SNAPTEST_NOT_STORAGE', '')}\n"
    )
    env = {**os.environ, "FSSPEC_SNAPTEST_OPTION": "yes", "GCSFS_SNAPTEST": "1",
           "SNAPTEST_NOT_STORAGE": "kept here"}  # fmt: skip
    out = tmp_path / "snap"
    res = subprocess.run(
        [sys.executable, "-m", "snapshot_cli", "create", f"{tmp_path / 'seen.py'}:f", str(out),
         "--inputs-from", f"{tmp_path / 'seen.py'}:items", "--executor", "ray",
         "--ray-address", ray_cluster, "--json"],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False, env=env,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    rows = snap.open(str(out)).read_shard(0).to_pylist()
    for i in range(1, len(snap.open(str(out)).shards)):
        rows += snap.open(str(out)).read_shard(i).to_pylist()
    assert sorted(r["i"] for r in rows) == [0, 1, 2, 3]
    assert {(r["fsspec"], r["gcsfs"], r["secret"]) for r in rows} == {("yes", "1", "")}


@pytest.mark.parametrize("sig", ["SIGKILL", "SIGTERM"])
def test_driver_killed_mid_run_resumes_on_ray(
    ray_cluster: str, tmp_path: Path, write_pipeline, sig: str
) -> None:  # type: ignore[no-untyped-def]
    """A driver killed mid-run resumes; a SIGTERM (a scheduler's preemption) stops it with
    one line and exit 143 (ray.init's own handler exited 15 without a word)."""
    spec = write_pipeline(PIPE)
    make_inputs(tmp_path / "in", 6)
    out, calls_file, gate = tmp_path / "snap", tmp_path / "calls", tmp_path / "gate"
    cmd = [sys.executable, "-m", "snapshot_cli", "create", spec, str(out), "--input",
           str(tmp_path / "in" / "*.txt"), "--executor", "ray", "--inputs-per-task", "1",
           "--batch-rows", "1", "--param", f"calls={json.dumps(str(calls_file))}",
           "--param", f"gate={json.dumps(str(gate))}", "--json"]  # fmt: skip
    # the killed driver cannot remove the pipeline copy it ships: it goes in tmp_path
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    driver = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)  # fmt: skip

    def blocked() -> set[int]:
        done = out / "_runs"
        wait_for(lambda: len(list(done.glob("*/tasks/*.json"))) == 3, "tasks 0-2 done", 120)
        wait_for(lambda: len(calls(calls_file)) >= 5, "tasks 3+ blocked mid-task", 120)
        return {pid for _, pid in calls(calls_file)}

    workers, err = _signalled(driver, blocked, getattr(signal, sig))
    if sig == "SIGTERM":
        assert driver.returncode == 143, err
        assert err.decode().splitlines()[-1] == TERMINATED, err
    # Ray stops a dead driver's tasks: no stale attempt may write beside the resumed run.
    wait_for(lambda: not any(pid_alive(p) for p in workers), "the dead driver's tasks to stop",
             120)  # fmt: skip
    assert not (out / "manifest.json").exists()
    gate.write_text("open")
    second = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300,
                            check=False)  # fmt: skip
    assert second.returncode == 0, second.stderr
    info = json.loads(second.stdout)
    assert info["tasks_resumed"] == 3 and info["num_records"] == 24
    names = [n for n, _ in calls(calls_file)]
    assert names.count("in-000.txt") == 1  # finished tasks are not redone
    baseline = tmp_path / "baseline"
    snap.create(spec, str(baseline), inputs=str(tmp_path / "in" / "*.txt"), workers=0,
                inputs_per_task=1, batch_rows=1,
                params={"calls": str(tmp_path / "c2"), "gate": str(gate)})  # fmt: skip
    assert records(str(out)) == records(str(baseline))


def test_worker_killed_mid_task_is_retried_once_in_the_manifest(
    ray_cluster: str, tmp_path: Path, write_pipeline
) -> None:  # type: ignore[no-untyped-def]
    spec = write_pipeline(PIPE)
    make_inputs(tmp_path / "in", 4)
    params = {"calls": str(tmp_path / "calls"), "die_once": str(tmp_path / "died")}
    info = snap.create(spec, str(tmp_path / "snap"), inputs=str(tmp_path / "in" / "*.txt"),
                       executor="ray", inputs_per_task=1, batch_rows=1, params=params)  # fmt: skip
    assert (tmp_path / "died").exists()  # the first attempt of task 2 did die
    names = [n for n, _ in calls(tmp_path / "calls")]
    assert names.count("in-002.txt") == 2  # ... and Ray ran it again
    assert info.num_records == 16
    ids = [r[0] for r in records(str(tmp_path / "snap"))]
    assert sorted(ids) == sorted(f"{i}-{j}" for i in range(4) for j in range(4))  # no copies


def test_failing_function_names_the_input_with_its_traceback(
    ray_cluster: str, tmp_path: Path, write_pipeline
) -> None:  # type: ignore[no-untyped-def]
    spec = write_pipeline(PIPE)
    make_inputs(tmp_path / "in", 4)
    with pytest.raises(PipelineError) as caught:
        snap.create(spec, str(tmp_path / "snap"), inputs=str(tmp_path / "in" / "*.txt"),
                    executor="ray", inputs_per_task=1,
                    params={"calls": str(tmp_path / "calls"), "fail_on": 1})  # fmt: skip
    message = str(caught.value)
    assert "in-001.txt" in message and "ValueError: cannot decode input 1" in message
    assert not (tmp_path / "snap" / "manifest.json").exists()


def test_ray_runs_a_closure_and_refuses_bad_options(ray_cluster: str, tmp_path: Path) -> None:
    make_inputs(tmp_path / "in", 2)
    offset = 40  # a closure: shipped to the Ray workers by value, with what it uses
    info = snap.create(lambda path: iter([{"x": offset + int(path[-5])}]), str(tmp_path / "a"),
                       inputs=str(tmp_path / "in" / "*.txt"), executor="ray")  # fmt: skip
    got = sorted(int(x) for b in snap.open(str(tmp_path / "a")).loader(8) for x in b["x"])
    assert info.num_records == 2 and got == [40, 41]
    with socket.socket() as held:  # (bound, never listened on: refused, and not taken)
        held.bind(("127.0.0.1", 0))
        nobody = f"127.0.0.1:{held.getsockname()[1]}"  # ray.init kept retrying for minutes
        with pytest.raises(OptionError, match=rf"cannot reach the Ray cluster at {nobody} \("):
            snap.create(lambda path: iter([{"x": 1}]), str(tmp_path / "c"),
                        inputs=str(tmp_path / "in" / "*.txt"), executor="ray",
                        ray_address=nobody)  # fmt: skip
    with pytest.raises(OptionError, match="ray_address= applies to executor='ray' only"):
        snap.create("x.py:f", str(tmp_path / "b"), inputs=str(tmp_path / "in" / "*.txt"),
                    ray_address="127.0.0.1:1")  # fmt: skip


def test_without_an_address_a_local_ray_is_started_not_a_stale_cluster_joined(
    tmp_path: Path, write_pipeline
) -> None:  # type: ignore[no-untyped-def]
    """A ``ray start`` records its cluster's address in ``ray_current_cluster``, which plain
    ``ray.init()`` joins: left by a cluster long stopped, a create without an address
    waited on it for good (Ray's "Failed to connect to GCS" every 40 s, nothing from snap)."""
    spec = write_pipeline(PIPE)
    make_inputs(tmp_path / "in", 2)
    temp = tempfile.mkdtemp(prefix="snapray-", dir="/tmp")  # short: Ray's socket paths
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_ENV, TMPDIR=temp, RAY_TMPDIR=temp)
    cmd = [sys.executable, "-m", "snapshot_cli", "create", spec, str(tmp_path / "snap"),
           "--input", str(tmp_path / "in" / "*.txt"), "--executor", "ray", "--quiet",
           "--param", f"calls={json.dumps(str(tmp_path / 'calls'))}"]  # fmt: skip
    try:
        with socket.socket() as held:  # (bound, never listened on: nothing answers there)
            held.bind(("127.0.0.1", 0))
            os.makedirs(os.path.join(temp, "ray"))
            with open(os.path.join(temp, "ray", "ray_current_cluster"), "w") as f:
                f.write(f"127.0.0.1:{held.getsockname()[1]}")
            done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, timeout=600)
        assert done.returncode == 0, done.stderr.decode()
        assert snap.open(str(tmp_path / "snap")).num_records == 8
    finally:
        shutil.rmtree(temp, ignore_errors=True)


TERMINATED = "snap: terminated (SIGTERM); run the same command again to resume"


def _signalled(driver: subprocess.Popen, ready: Any, sig: int) -> tuple[Any, bytes]:
    """What ``ready()`` returns once it has waited for its moment, and the driver's stderr
    after ``sig`` was sent then and it exited (killed if it would not)."""
    try:
        found = ready()
        driver.send_signal(sig)
        _, err = driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            driver.kill()
        driver.wait()
        assert driver.stderr is not None
        driver.stderr.close()
    return found, err


def _children(pid: int) -> dict[int, str]:
    """The child processes of ``pid``, by pid: their names."""
    found = {}
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = (entry / "stat").read_text()
            name, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat.rsplit(")", 1)[1]
            if int(rest.split()[1]) == pid:
                found[int(entry.name)] = name
    return found


@pytest.mark.slow
def test_a_sigterm_while_ray_starts_stops_the_create_with_a_word(
    tmp_path: Path, write_pipeline
) -> None:  # type: ignore[no-untyped-def]
    """A scheduler's SIGTERM while ``ray.init`` starts a local Ray met Ray's handler, set for
    the start: exit 15, no word. Now as any SIGTERM: one line, exit 143, and the Ray
    processes started so far stopped."""
    spec = write_pipeline(PIPE)
    make_inputs(tmp_path / "in", 2)
    cmd = [sys.executable, "-m", "snapshot_cli", "create", spec, str(tmp_path / "snap"),
           "--input", str(tmp_path / "in" / "*.txt"), "--executor", "ray",
           "--param", f"calls={json.dumps(str(tmp_path / 'calls'))}"]  # fmt: skip
    temp = tempfile.mkdtemp(prefix="snapray-", dir="/tmp")  # short: Ray's socket paths
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # a local Ray
    env.update(RAY_ENV, TMPDIR=temp, RAY_TMPDIR=temp)
    try:
        driver = subprocess.Popen(cmd, cwd=REPO, env=env, stderr=subprocess.PIPE)

        def gcs_up() -> set[int]:  # the GCS is Ray's first process; the driver connects later
            wait_for(lambda: "gcs_server" in _children(driver.pid).values(), "Ray's GCS", 120)
            return set(_children(driver.pid))

        started, err = _signalled(driver, gcs_up, signal.SIGTERM)
        assert driver.returncode == 143, err
        assert err.decode().splitlines()[-1] == TERMINATED, err
        wait_for(lambda: not any(pid_alive(p) for p in started), "Ray's processes to stop", 60)
    finally:
        shutil.rmtree(temp, ignore_errors=True)  # (also when the test fails)


# --- the pipeline's code on Ray workers (see writers/ray_code.py) -----------------------------

BESIDE = {  # a pipeline's directory as a user has it
    "statistics.py": "def mean(xs):  # the user's own module, unrelated to the pipeline\n"
    "    return -1.0\n",
    "prep.py": textwrap.dedent("""
        import os
        import statistics

        HERE = os.path.dirname(os.path.abspath(__file__))

        def f(x):
            yield {"x": x, "mean": statistics.mean([x, x + 2])}

        def g(x):
            yield {"n": len(open(os.path.join(HERE, "vocab.txt")).read().split())}
    """),
    "with_package.py": textwrap.dedent("""
        from mylib.ops import double

        def f(x):
            yield {"x": double(x), "mean": float(x)}
    """),
    "mylib/__init__.py": "",
    "mylib/ops.py": "def double(x):\n    return 2 * x\n",
    "vocab.txt": "a b c",
}
EXPECTED = [(1, 2.0), (2, 3.0), (3, 4.0)]  # the standard library's mean


def _beside(root: Path) -> Path:
    for name, text in BESIDE.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def _values(path: Path) -> list[tuple[int, float]]:
    return sorted((int(x), float(m)) for b in snap.open(str(path)).loader(8, shuffle=False)
                  for x, m in zip(b["x"], b["mean"], strict=True))  # fmt: skip


def test_a_module_beside_the_pipeline_hides_no_standard_module_on_ray(
    ray_cluster: str, tmp_path: Path
) -> None:
    """A ``statistics.py`` beside the pipeline hid the standard library's on Ray only (Ray
    puts its working_dir first on sys.path): -1.0 there, 2 locally, under one fingerprint
    (a local create then called the Ray snapshot up to date)."""
    proj = _beside(tmp_path / "proj")
    spec = f"{proj}/prep.py:f"
    local = snap.create(spec, str(tmp_path / "local"), inputs=[1, 2, 3], workers=1)
    on_ray = snap.create(spec, str(tmp_path / "ray"), inputs=[1, 2, 3], executor="ray")
    assert _values(tmp_path / "local") == EXPECTED
    assert _values(tmp_path / "ray") == EXPECTED
    assert on_ray.fingerprint == local.fingerprint


def test_a_package_beside_the_pipeline_is_shipped_to_ray(ray_cluster: str, tmp_path: Path) -> None:
    """``from mylib.ops import double``, mylib a package beside the pipeline: it imports
    locally, and was ModuleNotFoundError on Ray (only top-level .py files were shipped)."""
    proj = _beside(tmp_path / "proj")
    snap.create(f"{proj}/with_package.py:f", str(tmp_path / "ray"), inputs=[1, 2, 3],
                executor="ray")  # fmt: skip
    assert _values(tmp_path / "ray") == [(2, 1.0), (4, 2.0), (6, 3.0)]


def test_a_data_file_missing_on_ray_says_what_was_shipped_in_the_users_paths(
    ray_cluster: str, tmp_path: Path
) -> None:
    proj = _beside(tmp_path / "proj")
    with pytest.raises(PipelineError) as caught:
        snap.create(f"{proj}/prep.py:g", str(tmp_path / "g"), inputs=[1], executor="ray")
    message = str(caught.value)
    frames, _, rest = message.partition("FileNotFoundError: ")
    assert f'File "{proj}/prep.py", line' in frames  # the user's file, not Ray's copy of it
    assert "working_dir_files" not in frames
    assert "vocab.txt" in rest.splitlines()[0]  # what the function really opened
    assert (
        f"\non Ray the worker runs from a copy of the .py files of {proj} and of its packages "
        "(directories with __init__.py), no other file, in the working directory Ray gave it ("
    ) in message
    assert "read data files from shared storage (gs://, s3://, ...) or pass them" in message


def _spy_on_put(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """What snap puts in Ray's object store, in order."""
    import ray

    puts: list[Any] = []
    put = ray.put
    monkeypatch.setattr(ray, "put", lambda value, **kw: puts.append(value) or put(value, **kw))
    return puts


def test_a_by_value_function_is_sent_to_ray_once_per_run(
    ray_cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job (with the function pickled by value) was sent again with every task: a
    closure over 40 MiB, 200 tasks took 38 s (2.8 s locally) and 1.1 GB of driver memory."""
    import numpy as np

    table = np.arange(1 << 18, dtype=np.float64)  # 2 MiB, in the closure

    def closure(x: int) -> Iterator[dict[str, Any]]:
        yield {"x": x, "mean": float(table[x])}

    puts = _spy_on_put(monkeypatch)
    info = snap.create(closure, str(tmp_path / "c"), inputs=list(range(8)), inputs_per_task=1,
                       executor="ray")  # fmt: skip
    assert info.tasks == 8 and _values(tmp_path / "c") == [(i, i) for i in range(8)]
    assert len(puts) == 1 and len(puts[0]["job"]["function"]) > 2 << 20  # once, for 8 tasks


def test_ray_after_the_users_own_ray_init_runs_a_file_pipeline(
    ray_cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After ``ray.init()`` (a Ray user's usual start) a file pipeline, or a function of it,
    was refused: Ray takes a local working_dir only at init. The code now travels in the
    run's one object in Ray's object store."""
    import ray

    from snapshot_cli.writers.importing import load_function

    proj = _beside(tmp_path / "proj")
    monkeypatch.chdir(proj)  # Ray puts the driver's directory first on its workers' sys.path
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    ray.init(address=ray_cluster, configure_logging=False, log_to_driver=False)
    puts = _spy_on_put(monkeypatch)
    copies = f"snap-code-{os.getuid()}-"
    before = {p for p in os.listdir(tempfile.gettempdir()) if p.startswith("snap-code-")}
    try:
        spec = f"{proj}/with_package.py:f"
        snap.create(spec, str(tmp_path / "a"), inputs=[1, 2, 3], executor="ray")
        assert _values(tmp_path / "a") == [(2, 1.0), (4, 2.0), (6, 3.0)]
        assert puts[0]["code"]["files"]["mylib/ops.py"] == BESIDE["mylib/ops.py"].encode()
        # a helper module edited: the same worker processes ran the first run's (they outlive
        # it) and the snapshot of the new code held the old code's records (a probe)
        (proj / "mylib" / "ops.py").write_text("def double(x):\n    return 3 * x\n")
        snap.create(spec, str(tmp_path / "c"), inputs=[1, 2, 3], executor="ray")
        assert _values(tmp_path / "c") == [(3, 1.0), (6, 2.0), (9, 3.0)]
        function = load_function(f"{proj}/prep.py:f")  # a function object of a file
        snap.create(function, str(tmp_path / "b"), inputs=[1, 2, 3], executor="ray")
        assert _values(tmp_path / "b") == EXPECTED  # statistics.py there hides nothing
        assert ray.is_initialized()  # the user's Ray stays theirs
    finally:
        ray.shutdown()
        made = {p for p in os.listdir(tempfile.gettempdir()) if p.startswith("snap-code-")}
        made -= before
        for name in made:  # (the node's copies: kept as a cache, not by the suite)
            shutil.rmtree(os.path.join(tempfile.gettempdir(), name))
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    # one copy of each code for all the worker processes (each made its own, left in /tmp
    # when Ray killed it: two a run); a copy already there is used
    assert len(made) <= 3 and all(n.startswith(copies) and len(n) == len(copies) + 32
                                  for n in made), made  # fmt: skip
