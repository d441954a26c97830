"""The same behaviour on every storage backend: local disk, memory, GCS, S3, WebHDFS and HDFS.

Through the real command line (``CliRunner`` in this process, and ``snap`` subprocesses whose
worker processes reach the servers through the inherited environment) and through the library.
Snapshots are tiny (32 records in 4 shards): what is tested is the storage, not the volume.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import traceback
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner, Result

import snapshot_cli as snap
from snapshot_cli import storage
from snapshot_cli.cli import cli
from snapshot_cli.errors import CorruptShardError
from tests.backends.conftest import Backend
from tests.conftest import create_at_once, snap_subprocess, wait_for

N_INPUTS = 4
PER_INPUT = 8
N = N_INPUTS * PER_INPUT  # records; input k holds labels k*PER_INPUT .. (k+1)*PER_INPUT-1
DEAD_RUN = "deadbeef00"
JAVA_FRAME = re.compile(r"^\s+at [\w.$/]+\(", re.MULTILINE)

PIPELINE = """
import numpy as np


def preprocess(path, *, scale=1):
    with open(path) as f:
        start, count = (int(v) for v in f.read().split())
    for i in range(start, start + count):
        yield {"label": i, "x": np.full(4, i * scale, np.int32), "name": f"record-{i}"}
"""


@pytest.fixture
def pipeline(write_pipeline: Any) -> str:
    spec: str = write_pipeline(PIPELINE)
    return spec


@pytest.fixture
def inputs(tmp_path: Path) -> str:
    """``--input`` glob of N_INPUTS local files; each names the labels its records get."""
    folder = tmp_path / "inputs"
    folder.mkdir()
    for k in range(N_INPUTS):
        (folder / f"in-{k}.txt").write_text(f"{k * PER_INPUT} {PER_INPUT}")
    return str(folder / "in-*.txt")


# --- helpers ---------------------------------------------------------------------------------


def invoke(*args: str) -> Result:
    """``snap ARGS`` through CliRunner; an exception other than SystemExit fails the test."""
    result = CliRunner().invoke(cli, list(args))
    exc = result.exception
    if exc is not None and not isinstance(exc, SystemExit):
        shown = "".join(traceback.format_exception(exc))
        pytest.fail(f"snap {' '.join(args)} raised instead of reporting an error:\n{shown}")
    return result


def run_json(*args: str, code: int = 0) -> dict[str, Any]:
    result = invoke(*args, "--json")
    assert result.exit_code == code, result.stderr
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def create_args(pipeline: str, inputs: str, url: str, *extra: str) -> list[str]:
    return ["create", pipeline, url, "--input", inputs, "--inputs-per-task", "1", *extra]


def create_here(pipeline: str, inputs: str, url: str, *extra: str) -> dict[str, Any]:
    """``snap create`` in this process (no worker processes: fast, and memory:// works)."""
    info = run_json(*create_args(pipeline, inputs, url, "--workers", "0", *extra))
    assert info["path"] == url  # the URL as given, usable again (hdfs://HOST:PORT/...)
    return info


def assert_reported(result: Result | subprocess.CompletedProcess[str], *needles: str) -> str:
    """Exit 1, one error message on stderr naming every needle, no traceback (neither Python's
    nor a Java stack trace from libhdfs), nothing on stdout."""
    code = result.exit_code if isinstance(result, Result) else result.returncode
    assert code == 1, (code, result.stdout, result.stderr)
    stderr: str = result.stderr
    assert [line for line in stderr.splitlines() if line.startswith("snap: error: ")], stderr
    assert "Traceback" not in stderr, stderr
    assert not JAVA_FRAME.search(stderr), f"a Java stack trace on stderr:\n{stderr[:3000]}"
    for needle in needles:
        assert needle in stderr, (needle, stderr)
    assert result.stdout == ""
    return stderr


def replay(
    url: str, shuffle: bool, seed: int = 0, version: int | None = None
) -> dict[str, np.ndarray]:
    """Every record the loader hands out in one epoch, columns concatenated."""
    s = snap.open(url, version=version)
    with s.loader(batch_size=5, shuffle=shuffle, seed=seed) as loader:
        batches = list(loader)
    return {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}


def assert_records(records: dict[str, np.ndarray], scale: int = 1) -> None:
    """Exactly the records the pipeline produced (each label once), each one consistent."""
    labels = records["label"].tolist()
    assert Counter(labels) == Counter(range(N))
    assert (records["x"] == records["label"][:, None] * scale).all()
    assert records["x"].shape == (N, 4) and records["x"].dtype == np.int32
    assert [str(n) for n in records["name"]] == [f"record-{i}" for i in labels]


# --- 1. the whole life of a snapshot ---------------------------------------------------------


def test_create_inspect_verify_replay_head_gc(backend: Backend, pipeline: str, inputs: str) -> None:
    url = backend.url()
    args = create_args(pipeline, inputs, url, "--workers", str(backend.workers))
    if backend.shared:  # a real process, whose spawned workers reach the storage on their own
        proc = snap_subprocess(*args, "--json")
        assert proc.returncode == 0, proc.stderr
        info = json.loads(proc.stdout)
        backend.refresh()
    else:  # memory:// lives in this process only
        info = run_json(*args)
    if backend.name not in ("local", "memory"):
        leaked = Path(backend.path(url))
        assert not leaked.exists(), f"{url} was written to the local disk at {leaked}"
    assert info["path"] == url
    assert (info["num_records"], info["num_shards"], info["tasks"]) == (N, N_INPUTS, N_INPUTS)
    assert info["reused"] is False and info["bytes"] > 0

    doc = run_json("inspect", url)
    assert doc["path"] == url and doc["finished"] is True
    assert doc["fingerprint"] == info["fingerprint"] and doc["run"] == info["run"]
    assert (doc["num_records"], doc["num_shards"], doc["num_inputs"]) == (N, N_INPUTS, N_INPUTS)
    assert [(c["name"], c["dtype"], c["shape"]) for c in doc["schema"]] == [
        ("label", "int64", []), ("x", "int32", [4]), ("name", "string", [])
    ]  # fmt: skip
    assert doc["bytes"] == info["bytes"]

    checked = run_json("verify", url)
    assert checked["ok"] is True and checked["num_damaged"] == 0 and checked["damaged"] == []
    assert checked["num_shards"] == N_INPUTS and checked["checks"] == {"full": N_INPUTS}
    assert checked["bytes_checked"] == info["bytes"]

    s = snap.open(url)
    assert s.num_records == N and len(s.shards) == N_INPUTS
    in_order = replay(url, shuffle=False)
    assert in_order["label"].tolist() == list(range(N))  # the order written
    assert_records(in_order)
    shuffled = replay(url, shuffle=True, seed=7)
    assert_records(shuffled)
    assert shuffled["label"].tolist() != list(range(N))
    assert replay(url, shuffle=True, seed=7)["label"].tolist() == shuffled["label"].tolist()

    head = run_json("head", url, "-n", "3")
    assert head["num_records"] == N
    assert [r["label"] for r in head["records"]] == [0, 1, 2]
    assert [r["name"] for r in head["records"]] == ["record-0", "record-1", "record-2"]
    assert head["records"][2]["x"]["first"] == [2, 2, 2, 2]

    dry = run_json("gc", url, "--dry-run")
    assert dry["dry_run"] is True and dry["would_remove"] == [] and dry["bytes"] == 0
    done = run_json("gc", url)
    assert done["dry_run"] is False and done["removed"] == [] and done["kept_runs"] == []
    assert run_json("verify", url)["ok"] is True  # gc took nothing a reader needs


def test_a_real_process_reports_a_missing_snapshot(backend: Backend) -> None:
    url = backend.url("nothing-here")
    proc = snap_subprocess("inspect", url)
    assert_reported(proc, url, "does not exist: check the path")


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
def test_worker_processes_on_memory(backend: Backend, pipeline: str, inputs: str) -> None:
    """memory:// is private to a process: spawned workers cannot write into it. Either snap
    refuses (naming --workers) or it runs the tasks here; a snapshot that claims to be
    complete must be."""
    url = backend.url()
    result = invoke(*create_args(pipeline, inputs, url, "--workers", "2", "--json"))
    if result.exit_code != 0:
        assert_reported(result, "--workers")
        return
    assert json.loads(result.stdout)["num_records"] == N
    checked = json.loads(invoke("verify", url, "--json").stdout)
    assert checked["ok"] is True, [(d["path"], d["problem"]) for d in checked["damaged"]]
    assert_records(replay(url, shuffle=False))


# A snapshot opened before a fork, read in the child: torch DataLoader workers (fork) of a
# SnapshotDataset, and a forked child of a process that opened the Snapshot. In a process of
# its own: a process that has loaded HDFS's JVM must not fork (hdfs:// is left out here).
FORKED_READS = """
import json, os, pickle, sys, warnings
warnings.simplefilter("ignore", DeprecationWarning)  # (3.12+: fork with threads)
import torch
import snapshot_cli as snap
from snapshot_cli.readers.torch import SnapshotDataset

url = sys.argv[1]
s = snap.open(url)
s.head(1)  # the parent's client has connected
ds = SnapshotDataset(url, batch_size=4, seed=1)
dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="fork")
workers = sorted(int(v) for b in dl for v in b["label"])
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r)
    labels = sorted(int(v) for b in s.loader(4, epochs=1) for v in b["label"])
    with os.fdopen(w, "wb") as f:
        pickle.dump([len(s.head(3)), labels, len(s.versions())], f)
    os._exit(0)
os.close(w)
with os.fdopen(r, "rb") as f:
    data = f.read()
os.waitpid(pid, 0)
print(json.dumps({"workers": workers, "child": pickle.loads(data) if data else None}))
"""


@pytest.mark.parametrize("backend", ["local", "gcs", "s3", "webhdfs"], indirect=True)
def test_a_snapshot_opened_before_a_fork_is_read_in_the_child(
    backend: Backend, pipeline: str, inputs: str
) -> None:
    """The Snapshot kept the parent's client: gcsfs refused it in a DataLoader worker ("This
    class is not fork-safe"), so SnapshotDataset of a gs:// URL failed with workers."""
    url = backend.url()
    proc = snap_subprocess(*create_args(pipeline, inputs, url, "--workers", "0"))
    assert proc.returncode == 0, proc.stderr
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    done = subprocess.run([sys.executable, "-c", FORKED_READS, url], capture_output=True,
                          text=True, timeout=180, env=env, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.splitlines()[-1])
    assert got["workers"] == list(range(N))
    assert got["child"] == [3, list(range(N)), 1], done.stderr


# --- 2. one snapshot per URL -----------------------------------------------------------------


def test_second_create_needs_overwrite(backend: Backend, pipeline: str, inputs: str) -> None:
    url = backend.url()
    first = create_here(pipeline, inputs, url)
    again = create_here(pipeline, inputs, url)  # same everything: reused
    assert again["reused"] is True and again["fingerprint"] == first["fingerprint"]

    other = invoke(*create_args(pipeline, inputs, url, "--workers", "0", "--param", "scale=2"))
    assert_reported(other, url, "--overwrite")
    assert run_json("inspect", url)["fingerprint"] == first["fingerprint"]
    assert run_json("verify", url)["ok"] is True
    assert_records(replay(url, shuffle=False))  # still the first snapshot's records

    replaced = create_here(pipeline, inputs, url, "--param", "scale=2", "--overwrite")
    assert replaced["reused"] is False and replaced["fingerprint"] != first["fingerprint"]
    assert run_json("inspect", url)["fingerprint"] == replaced["fingerprint"]
    assert run_json("verify", url)["ok"] is True
    assert_records(replay(url, shuffle=True), scale=2)
    fs, root = backend.fs, backend.path(url)

    def on_disk() -> list[str]:
        return sorted(n.rsplit("/", 1)[-1] for n in fs.ls(storage.join(root, "shards"), False))

    def names(version: int | None = None) -> set[str]:
        return {s.path.split("/")[-1] for s in snap.open(url, version=version).shards}

    assert replaced["version"] == 2 and snap.open(url, version=1).num_records == N
    assert on_disk() == sorted(names(1) | names())  # version 1's stay for its readers
    assert_records(replay(url, shuffle=False, version=1))
    assert run_json("gc", url, "--retention", "0")["removed"]
    assert on_disk() == sorted(names())  # then gc after the retention removes them


def test_a_grown_input_list_is_a_new_version_of_its_changed_tasks(
    backend: Backend, pipeline: str, inputs: str
) -> None:
    """On every backend: one input added and one changed make version 2, which computes two
    tasks and reuses the others' shards (the commit is still one write of manifest.json);
    version 1 stays readable until gc after the retention period."""
    url = backend.url()
    first = create_here(pipeline, inputs, url)
    folder = Path(inputs).parent
    (folder / f"in-{N_INPUTS}.txt").write_text(f"{N} {PER_INPUT}")  # a new input
    (folder / "in-1.txt").write_text(f"{PER_INPUT} {PER_INPUT - 1}")  # one record fewer
    grown = create_here(pipeline, inputs, url)
    assert (grown["version"], grown["tasks"], grown["tasks_reused"]) == (2, N_INPUTS + 1, 3)
    assert (grown["inputs_added"], grown["inputs_changed"]) == (1, 1)
    assert grown["num_records"] == N + PER_INPUT - 1
    labels = sorted(replay(url, shuffle=True)["label"].tolist())
    assert labels == sorted(
        [*range(N + PER_INPUT)][: 2 * PER_INPUT - 1] + [*range(2 * PER_INPUT, N + PER_INPUT)]
    )
    old = replay(url, shuffle=False, version=1)
    assert sorted(old["label"].tolist()) == list(range(N)) and first["version"] == 1
    history = run_json("inspect", url, "--versions")["versions"]
    assert [v["version"] for v in history] == [1, 2]
    assert run_json("verify", url)["ok"] is True


# --- 3. and 4. the storage primitives --------------------------------------------------------


def test_create_exclusive(backend: Backend) -> None:
    fs, root = backend.fs, backend.path(backend.root)
    path = storage.join(root, "exclusive", "lock")
    assert storage.create_exclusive(fs, path, b"first") is True
    assert storage.create_exclusive(fs, path, b"second") is False
    assert storage.read_bytes(fs, path) == b"first"

    if backend.name == "hdfs":
        # libhdfs cannot create exclusively: hdfs.create checks, writes a temporary
        # file and renames it, so writers racing within milliseconds can both win (documented
        # there; webhdfs:// is the atomic client). Only the sequential case is promised.
        return
    for race in range(3):
        path = storage.join(root, "exclusive", f"race-{race}")
        payloads = [f"writer {i} ".encode() * 2000 for i in range(4)]
        won = create_at_once(fs, path, payloads)
        assert won.count(True) == 1, (race, won)
        assert storage.read_bytes(fs, path) == payloads[won.index(True)]


def test_write_atomic_readers_see_old_or_new(backend: Backend) -> None:
    fs, root = backend.fs, backend.path(backend.root)
    folder = storage.join(root, "atomic")
    path = storage.join(folder, "state.json")
    versions = [bytes([65 + i]) * (40_000 + 7_000 * i) for i in range(10)]  # sizes differ too
    storage.write_atomic(fs, path, versions[0])
    assert storage.read_bytes(fs, path) == versions[0]

    # HDFS cannot rename over a file: the old one is deleted first, so a reader may find the
    # path missing for a moment (hdfs.replace) -- but never half-written.
    may_vanish = backend.name in ("webhdfs", "hdfs")
    seen: list[bytes] = []
    missing = 0
    stop = threading.Event()
    failure: list[BaseException] = []

    def read_continuously() -> None:
        nonlocal missing
        try:
            while not stop.is_set():
                try:
                    seen.append(storage.read_bytes(fs, path))
                except FileNotFoundError:
                    if not may_vanish:
                        raise
                    missing += 1
        except BaseException as err:
            failure.append(err)

    reader = threading.Thread(target=read_continuously, name="atomic-reader")
    reader.start()
    try:
        wait_for(lambda: len(seen) > 0 or bool(failure), "the reader's first read")
        for version in versions[1:]:
            storage.write_atomic(fs, path, version)
            count = len(seen) + missing
            wait_for(lambda c=count: len(seen) + missing > c or bool(failure), "another read")
    finally:
        stop.set()
        reader.join(60)
    assert not failure, failure
    torn = [s[:60] + b"..." + s[-20:] for s in seen if s not in versions]
    assert seen and not torn, f"{len(torn)} of {len(seen)} reads saw neither version: {torn[:3]}"
    assert storage.read_bytes(fs, path) == versions[-1]
    assert [n.rsplit("/", 1)[-1] for n in fs.ls(folder, detail=False)] == ["state.json"]


# --- 5. gc ------------------------------------------------------------------------------------


def test_gc_removes_what_an_interrupted_writer_left(
    backend: Backend, pipeline: str, inputs: str
) -> None:
    url = backend.url()
    create_here(pipeline, inputs, url)
    fs, root = backend.fs, backend.path(url)
    planted = {
        f"_runs/{DEAD_RUN}/run.json": json.dumps(
            {"run": DEAD_RUN, "fingerprint": "0" * 64, "plan": [[0, 1], [1, 2]], "created": 0}
        ).encode(),
        f"_runs/{DEAD_RUN}/tasks/00000.json": json.dumps({"run": DEAD_RUN, "task": 0}).encode(),
        f"shards/{DEAD_RUN}-00000-0000.arrow": b"partial shard" * 100,  # never committed
        f".manifest.json.{'ab' * 16}.tmp": b"{",  # an atomic write that died before its rename
    }
    for rel, data in planted.items():
        fs.makedirs(storage.join(root, rel).rsplit("/", 1)[0], exist_ok=True)
        fs.pipe_file(storage.join(root, rel), data)
    expected = {
        f"_runs/{DEAD_RUN}": "run",
        f"shards/{DEAD_RUN}-00000-0000.arrow": "shard",
        f".manifest.json.{'ab' * 16}.tmp": "temporary",
    }
    committed = {s.path for s in snap.open(url).shards}

    dry = run_json("gc", url, "--dry-run")
    assert {g["path"]: g["kind"] for g in dry["would_remove"]} == expected
    assert all(fs.exists(storage.join(root, rel)) for rel in planted)  # a dry run removes nothing

    done = run_json("gc", url)
    assert {g["path"]: g["kind"] for g in done["removed"]} == expected
    assert done["bytes"] >= len(planted[f"shards/{DEAD_RUN}-00000-0000.arrow"])
    backend.refresh()
    assert not any(fs.exists(storage.join(root, rel)) for rel in planted)
    assert not fs.exists(storage.join(root, "_runs", DEAD_RUN))
    left = {n.rsplit("/", 1)[-1] for n in fs.ls(storage.join(root, "shards"), detail=False)}
    assert {f"shards/{n}" for n in left} == committed
    assert run_json("verify", url)["ok"] is True
    assert_records(replay(url, shuffle=True))
    assert run_json("gc", url)["removed"] == []


# --- 6. damage is found and named ------------------------------------------------------------


def test_a_changed_byte_is_found_and_named(backend: Backend, pipeline: str, inputs: str) -> None:
    url = backend.url()
    create_here(pipeline, inputs, url)
    fs, root = backend.fs, backend.path(url)
    shards = snap.open(url).shards
    victim = shards[1]
    path = storage.join(root, victim.path)
    data = bytearray(fs.cat_file(path))
    data[len(data) // 2] ^= 0x01
    fs.pipe_file(path, bytes(data))
    backend.refresh()
    assert fs.info(path)["size"] == victim.bytes  # same size: only the checksum can tell

    result = invoke("verify", url, "--json")
    assert result.exit_code == 1, result.stderr
    doc = json.loads(result.stdout)
    assert doc["ok"] is False and doc["num_damaged"] == 1
    assert [d["path"] for d in doc["damaged"]] == [victim.path]
    assert doc["damaged"][0]["problem"]
    assert [s["path"] for s in doc["shards"] if s["ok"]] == [
        s.path for s in shards if s.path != victim.path
    ]
    human = invoke("verify", url, "--quiet")
    assert human.exit_code == 1 and "Traceback" not in human.output
    named = [s.path for s in shards if s.path.split("/")[-1] in human.stdout]
    assert named == [victim.path], human.stdout

    # the shard's own URL (what the messages print): verify checks it alone, inspect shows it
    victim_url = snap.open(url).shard_url(victim)
    alone = invoke("verify", victim_url, "--json")
    assert alone.exit_code == 1, alone.stderr
    assert json.loads(alone.stdout)["num_shards"] == 1 and victim_url in alone.stdout
    intact = run_json("verify", snap.open(url).shard_url(shards[0]))
    assert intact["ok"] is True and intact["num_shards"] == 1
    shown = run_json("inspect", victim_url)
    assert (shown["path"], shown["crc32c"], shown["index"]) == (victim_url, victim.crc32c, 1)

    with pytest.raises(CorruptShardError) as caught:
        for _ in snap.open(url).loader(batch_size=4, shuffle=False):
            pass
    message = str(caught.value)
    assert victim.path.split("/")[-1] in message
    assert not any(s.path.split("/")[-1] in message for s in shards if s is not victim)


# --- 7. object stores: a bucket that does not exist ------------------------------------------


@pytest.mark.parametrize("backend", ["gcs", "s3"], indirect=True)
def test_missing_bucket_is_a_clear_error(backend: Backend, pipeline: str, inputs: str) -> None:
    scheme = backend.root.split("://", 1)[0]
    bucket = f"snap-no-such-bucket-{uuid.uuid4().hex[:8]}"
    url = f"{scheme}://{bucket}/snap"
    for args in (["inspect", url], create_args(pipeline, inputs, url, "--workers", "0")):
        started = time.monotonic()
        result = invoke(*args)
        took = time.monotonic() - started
        assert_reported(result, url)
        assert took < 5, f"snap {args[0]} took {took:.1f} s: a missing bucket is not transient"
    assert not backend.fs.exists(bucket), "snap create made the bucket it was not given"

    missing = backend.url("missing")
    started = time.monotonic()
    assert_reported(invoke("inspect", missing), missing, "does not exist: check the path")
    assert time.monotonic() - started < 5
    # inputs in a bucket that does not exist: said of the pattern (gcsfs's glob raised
    # FileNotFoundError, reported as "<OUTPUT>: b/<bucket>/o")
    pattern = f"{scheme}://{bucket}/raw/*.bin"
    result = invoke("create", pipeline, backend.url("in-missing"), "--input", pattern)
    assert_reported(
        result, f"--input {pattern!r} matched no files; the bucket {bucket!r} does not exist"
    )


# --- 8. object stores: no credentials -------------------------------------------------------


@pytest.mark.parametrize("backend", ["s3"], indirect=True)
def test_no_credentials_is_a_clear_error(backend: Backend, tmp_path: Path) -> None:
    """A new user without credentials runs a reading command: botocore refuses to sign the
    request (NoCredentialsError: no errno, no HTTP status), which reached the user as a
    traceback. Now one line naming the URL and where credentials come from."""
    url = backend.url("snap")
    no_credentials = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AWS_", "FSSPEC_S3_KEY", "FSSPEC_S3_SECRET"))
    }
    no_credentials.update(
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
        AWS_CONFIG_FILE=str(tmp_path / "none"),
        AWS_EC2_METADATA_DISABLED="true",  # no instance role to ask for
        AWS_DEFAULT_REGION="us-east-1",
    )
    for command in ("inspect", "verify", "head"):
        proc = subprocess.run(
            [sys.executable, "-m", "snapshot_cli", command, url],
            env=no_credentials, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        stderr = assert_reported(proc, url, "cannot authenticate", "AWS_ACCESS_KEY_ID")
        assert "NoCredentialsError" in stderr
        errors = [line for line in stderr.splitlines() if line.startswith("snap: error: ")]
        assert len(errors) == 1, stderr


@pytest.mark.parametrize("backend", ["gcs", "s3"], indirect=True)
def test_more_shards_than_128_are_fetched_once_for_every_epoch(
    backend: Backend, write_pipeline: Any
) -> None:
    """A remote snapshot of more than 128 small shards (600 of 3 KiB) was fetched again every
    epoch: the loader kept 128 shards open, as for files, though a fetched shard holds no
    file and the 1 GiB memory budget had room for all of them."""
    spec = write_pipeline(
        """
        import numpy as np
        def preprocess(i):
            yield {"x": np.full(64, i, np.float32)}
        """,
        "many",
    )
    url = backend.url("many")
    snap.create(spec, url, inputs=list(range(160)), inputs_per_task=1, workers=0,
                storage_options=backend.storage_options)  # fmt: skip
    s = snap.open(url, storage_options=backend.storage_options)
    assert len(s.shards) == 160
    with s.loader(32, seed=0) as loader:
        read = []
        for _ in range(3):
            assert sum(len(b["x"]) for b in loader) == 160
            read.append(loader.stats()["bytes_read"])
    assert read[0] == read[1] == read[2] == sum(e.bytes for e in s.shards), read
