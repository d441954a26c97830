"""HDFS's failures as snap says them, against a real single-node Hadoop (tests/infra/hdfs.py).

A cluster of its own, with permissions checked (the shared one of ``conftest.py`` checks none),
whose safe mode these tests enter and leave and whose NameNode they reach through a relay that
can go down. ``hdfs://`` loads libhdfs's JVM into this process, which then must not fork: what
forks (torch DataLoader workers) runs in a process of its own.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import fsspec.config
import pytest

import snapshot_cli as snap
from snapshot_cli import storage
from snapshot_cli.errors import StorageError
from tests.backends.conftest import restored_env, restored_fsspec_conf
from tests.conftest import REPO, snap_subprocess
from tests.infra.hdfs import CLIENT_JDK_FLAGS, HOST, HdfsCluster, apply_client_env

pytestmark = pytest.mark.slow

N_INPUTS = 4
PER_INPUT = 8
N = N_INPUTS * PER_INPUT

PIPELINE = """
import numpy as np


def preprocess(path):
    with open(path) as f:
        start, count = (int(v) for v in f.read().split())
    for i in range(start, start + count):
        yield {"label": i, "x": np.full(4, i, np.int32)}
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HdfsCluster]:
    """NameNode + DataNode checking permissions; this process and ``snap`` subprocesses act
    as the user that started it (HDFS's superuser) unless a test says otherwise."""
    with HdfsCluster(
        base_dir=tmp_path_factory.mktemp("hdfs-faults"),
        heap="256m",
        extra_conf={"dfs.permissions.enabled": "true"},
    ) as hdfs:
        env = {**hdfs.client_env(), **hdfs.fsspec_env()}
        with restored_env([*env, "HADOOP_USER_NAME"]), restored_fsspec_conf("webhdfs", "hdfs"):
            apply_client_env(hdfs)  # before the first pyarrow HadoopFileSystem here
            os.environ.update(hdfs.fsspec_env())
            os.environ.pop("HADOOP_USER_NAME", None)
            conf = fsspec.config.conf
            conf.setdefault("webhdfs", {}).update(user=hdfs.user)
            conf.setdefault("hdfs", {}).update(user=hdfs.user, replication=1)
            yield hdfs


@pytest.fixture
def pipeline(write_pipeline: Any) -> str:
    spec: str = write_pipeline(PIPELINE)
    return spec


def write_inputs(folder: Path, count: int = N_INPUTS, first: int = 0) -> str:
    """``count`` input files (``PER_INPUT`` labels each from ``first * PER_INPUT``): a glob."""
    folder.mkdir(parents=True, exist_ok=True)
    for k in range(first, first + count):
        (folder / f"in-{k:03d}.txt").write_text(f"{k * PER_INPUT} {PER_INPUT}")
    return str(folder / "in-*.txt")


def made(pipeline: str, url: str, inputs: str) -> str:
    """A snapshot at ``url`` (one shard an input), made in this process."""
    snap.create(pipeline, url, inputs=inputs, workers=0, inputs_per_task=1)
    return url


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def error_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The one ``snap: error:`` line of a failed command (libhdfs's Java traces aside)."""
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr[-3000:])
    lines = [line for line in proc.stderr.splitlines() if line.startswith("snap: error: ")]
    assert len(lines) == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return lines[0]


def dfsadmin(cluster: HdfsCluster, *args: str) -> str:
    """``hdfs dfsadmin ARGS`` against ``cluster``, as its superuser."""
    build = cluster.build_dir
    classpath = f"{cluster.conf_dir}:{build / 'res'}:{build / 'lib'}/*"
    keep = {k: v for k, v in os.environ.items() if k not in ("CLASSPATH", "LIBHDFS_OPTS")}
    done = subprocess.run(
        [str(cluster.java_home / "bin" / "java"), *CLIENT_JDK_FLAGS, "-XX:-UsePerfData",
         f"-Dhadoop.home.dir={build}", "-cp", classpath,
         "org.apache.hadoop.hdfs.tools.DFSAdmin", *args],
        env={**keep, "HADOOP_USER_NAME": cluster.user},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


# --- fork -----------------------------------------------------------------------------------

FORKED_WORKERS = """
import json, sys, warnings
warnings.simplefilter("ignore", DeprecationWarning)  # (3.12+: fork with threads)
import torch
from snapshot_cli.readers.torch import SnapshotDataset


def labels(dataset, context):
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=None, num_workers=2, multiprocessing_context=context, timeout=60
    )
    return sorted(int(v) for batch in loader for v in batch["label"])


if __name__ == "__main__":
    dataset = SnapshotDataset(sys.argv[1], batch_size=4, seed=1)  # libhdfs's JVM starts here
    try:
        forked = {"labels": labels(dataset, "fork")}
    except Exception as err:
        forked = {"error": f"{type(err).__name__}: {err}"}
    print(json.dumps({"fork": forked, "spawn": labels(dataset, "spawn")}))
"""


def test_hdfs_in_a_dataloader_worker_forked_after_the_jvm_is_refused_at_once(
    cluster: HdfsCluster, pipeline: str, tmp_path: Path
) -> None:
    """A SnapshotDataset of an hdfs:// URL starts the JVM in the parent; a forked worker's
    own client blocked for good inside libhdfs (the DataLoader hung). Now the worker says why
    and what to use instead, and the advice (spawn) reads every record."""
    made(pipeline, cluster.webhdfs_url("/fork/snap"), write_inputs(tmp_path / "in"))
    script = tmp_path / "forked_workers.py"
    script.write_text(FORKED_WORKERS)
    proc = subprocess.Popen(
        [sys.executable, str(script), cluster.hdfs_url("/fork/snap")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, PYTHONPATH=str(REPO)),  # the snap under test (a worktree's too)
        start_new_session=True,  # its workers too are killed if it hangs
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail("the DataLoader with forked workers hung")
    assert proc.returncode == 0, err[-3000:]
    got = json.loads(out.splitlines()[-1])
    assert "labels" not in got["fork"], got
    said = got["fork"]["error"]
    assert said.startswith("StorageError"), said
    assert "cannot be used in a process forked after it started" in said, said
    assert "multiprocessing_context='spawn'" in said and "webhdfs://" in said, said
    assert got["spawn"] == list(range(N))


def test_snaps_own_processes_start_in_a_process_that_runs_the_jvm(
    cluster: HdfsCluster, pipeline: str, tmp_path: Path
) -> None:
    """snap's worker and decode processes are new interpreters (spawned), never forks: a
    process that has started libhdfs's JVM creates and reads with them."""
    url = cluster.hdfs_url("/spawned/snap")
    storage.resolve(url)  # libhdfs's JVM starts here, if no test before started it
    assert "libjvm" in Path("/proc/self/maps").read_text()
    inputs = write_inputs(tmp_path / "in")
    snap.create(pipeline, url, inputs=inputs, workers=2, inputs_per_task=1)
    with snap.open(url).loader(4, shuffle=False, processes=2, columns=["label", "x"]) as loader:
        labels = sorted(int(v) for batch in loader for v in batch["label"])
    assert labels == list(range(N))


# --- libhdfs's errno 255 --------------------------------------------------------------------


def test_a_namenode_that_takes_no_connection_is_retried_then_named(cluster: HdfsCluster) -> None:
    """Nothing listens at the URL's port: libhdfs says only "[Errno 255] Unknown error 255"
    (and answers "not found" to a stat), which snap neither retried nor explained."""
    # a port bound, never listened on: refused, and no other test's server may take it
    # meanwhile (a free port picked and let go was taken by one under xdist: a CI failure)
    with socket.socket() as held:
        held.bind((HOST, 0))
        port = held.getsockname()[1]
        proc = snap_subprocess("inspect", f"hdfs://{HOST}:{port}/snaps/train", timeout=300)
    line = error_line(proc)
    assert "storage kept failing while" in line and "(tried 6 times)" in line, line
    assert f"the NameNode at {HOST}:{port} (its RPC port) cannot be reached" in line, line
    assert "Connection refused" in line and "Unknown error 255" not in line, line


class Relay:
    """A TCP relay on a loopback port of its own to ``target``: :meth:`down` closes the port
    (connections refused) and cuts the connections it carried; :meth:`up` opens it again."""

    def __init__(self, target: int) -> None:
        self.target = (HOST, target)
        self.port = free_port()
        self._listener: socket.socket | None = None
        self._carried: list[socket.socket] = []
        self._lock = threading.Lock()

    def up(self) -> None:
        with self._lock:
            if self._listener is not None:
                return
            listener = socket.socket()
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((HOST, self.port))
            listener.listen(64)
            self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def down(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            carried, self._carried = self._carried, []
        for sock in [s for s in (listener,) if s is not None] + carried:
            _close(sock)

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
                upstream = socket.create_connection(self.target)
            except OSError:
                return
            with self._lock:
                self._carried += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(a, b), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):  # (the relay went down)
        while data := source.recv(1 << 16):
            sink.sendall(data)
    for sock in (source, sink):
        _close(sock)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # (wakes a thread blocked in accept or recv)
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


class UpOnRetry(logging.Handler):
    """Brings ``relay`` up when snap logs its first retry: the NameNode is back before the
    next try (no sleep: the retry itself is the signal)."""

    def __init__(self, relay: Relay) -> None:
        super().__init__(logging.INFO)
        self.relay, self.retries = relay, 0

    def emit(self, record: logging.LogRecord) -> None:
        if "transient storage error" in record.getMessage():
            self.retries += 1
            self.relay.up()


def test_a_namenode_back_within_the_retries_is_read_through(
    cluster: HdfsCluster, pipeline: str, tmp_path: Path
) -> None:
    """The NameNode goes away between two reads (a restart, a failover) and comes back: the
    reads are retried as a dropped connection is, and the epoch is whole."""
    made(pipeline, cluster.webhdfs_url("/relay/snap"), write_inputs(tmp_path / "in"))
    relay = Relay(cluster.rpc_port)
    relay.up()
    logger = logging.getLogger("snapshot_cli.retry")
    handler, level = UpOnRetry(relay), logger.level
    try:
        opened = snap.open(f"hdfs://{HOST}:{relay.port}/relay/snap")  # through the relay
        relay.down()
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        labels = sorted(int(v) for b in opened.loader(4, shuffle=False) for v in b["label"])
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        relay.down()
    assert handler.retries >= 1  # it was down when read
    assert labels == list(range(N))


def test_safe_mode_is_named_on_both_clients(cluster: HdfsCluster) -> None:
    """In safe mode a write failed with "Unknown error 255" (hdfs://) and with "HTTPError:
    403 Client Error: Forbidden for url: ..." (webhdfs://, the DataNode's answer)."""
    web = storage.resolve(cluster.webhdfs_url("/safe"))[0]
    native = storage.resolve(cluster.hdfs_url("/safe"))[0]
    storage.makedirs(web, "/safe")
    dfsadmin(cluster, "-safemode", "enter")
    try:
        with pytest.raises(StorageError) as over_http:
            storage.write_atomic(web, "/safe/a.json", b"{}")
        with pytest.raises(StorageError) as over_libhdfs:
            storage.write_atomic(native, "/safe/b.json", b"{}")
    finally:
        dfsadmin(cluster, "-safemode", "leave")
    said = str(over_http.value)
    assert "SafeModeError" in said and "Name node is in safe mode" in said, said
    assert "403 Client Error" not in said and "\tat org.apache" not in said, said
    said = str(over_libhdfs.value)
    assert f"NameNode at {HOST}:{cluster.rpc_port} is not in safe mode" in said, said
    assert "(hdfs dfsadmin -safemode get)" in said and "Unknown error" not in said, said
    storage.write_atomic(native, "/safe/b.json", b"{}")  # out of safe mode: written
    assert web.cat_file("/safe/b.json") == b"{}"


# --- WebHDFS: the DataNode's refusals, the user ---------------------------------------------


def test_webhdfs_user_refusals_and_hadoop_user_name(
    cluster: HdfsCluster, pipeline: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """alice makes a snapshot (HADOOP_USER_NAME, which webhdfs:// ignored: the files were
    dr.who's); bob may not add to it: the DataNode refuses the lease's CREATE, which read
    "HTTPError: 403 Client Error: Forbidden for url: ...". Without any user WebHDFS acts as
    dr.who, and the refusal says how to give one."""
    web = storage.resolve(cluster.webhdfs_url("/shared"))[0]
    web.makedirs("/shared", exist_ok=True)
    web.chmod("/shared", "777")
    url = cluster.webhdfs_url("/shared/snap")
    monkeypatch.delenv("FSSPEC_WEBHDFS")  # no user for snap's subprocesses but theirs

    monkeypatch.setenv("HADOOP_USER_NAME", "alice")
    first = snap_subprocess("create", pipeline, url, "--input", write_inputs(tmp_path / "a"),
                            "--inputs-per-task", "1", "--workers", "0")  # fmt: skip
    assert first.returncode == 0, first.stderr
    web.invalidate_cache()
    assert web.info("/shared/snap/manifest.json")["owner"] == "alice"
    assert web.info("/shared/snap/_runs")["permission"] == "755"

    more = write_inputs(tmp_path / "b", count=1, first=N_INPUTS)
    args = ("create", pipeline, url, "--input", more, "--workers", "0")
    monkeypatch.setenv("HADOOP_USER_NAME", "bob")
    line = error_line(snap_subprocess(*args))
    assert line.startswith("snap: error: permission denied while ") and f"{url}/_runs/" in line
    assert "(Permission denied: user=bob, access=WRITE, inode=" in line, line
    assert "alice" in line and "403 Client Error" not in line and "\tat org" not in line, line

    monkeypatch.delenv("HADOOP_USER_NAME")
    line = error_line(snap_subprocess(*args))
    assert "(Permission denied: user=dr.who, access=WRITE" in line, line
    assert "WebHDFS acted as dr.who, Hadoop's anonymous user" in line, line
    assert "set HADOOP_USER_NAME, or give one" in line, line


def test_webhdfs_verify_reuses_its_connections(
    cluster: HdfsCluster, pipeline: str, tmp_path: Path
) -> None:
    """snap's 16 fetch streams outnumbered requests' pool of 10 connections a host: verify
    printed urllib3's "Connection pool is full, discarding connection" warnings."""
    url = cluster.webhdfs_url("/pool/snap")
    inputs = write_inputs(tmp_path / "in", count=24)
    proc = snap_subprocess("create", pipeline, url, "--input", inputs, "--inputs-per-task", "1")
    assert proc.returncode == 0, proc.stderr
    for command in (("verify", url), ("bench", url, "--epochs", "1")):
        done = snap_subprocess(*command)
        assert done.returncode == 0, done.stderr
        assert "Connection pool is full" not in done.stderr, done.stderr
        assert "urllib3" not in done.stderr, done.stderr
