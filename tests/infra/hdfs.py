"""A real single-node HDFS (Hadoop 2.7.3: NameNode, DataNode, WebHDFS) for tests.

``HdfsCluster`` runs the build that ``ensure_built()`` (:mod:`tests.infra.hdfs_build`,
re-exported here) assembles once per cache directory: it formats a fresh NameNode in a temporary
directory, starts a NameNode and a DataNode on free loopback ports, waits until the DataNode has
reported its blocks, and kills both JVMs (with their process groups) on exit::

    with HdfsCluster() as cluster:
        apply_client_env(cluster)  # before the first pyarrow HadoopFileSystem in this process
        fs, path = fsspec.core.url_to_fs(
            cluster.hdfs_url("/x"), **cluster.storage_options("hdfs")
        )

Needs, at test time, the build's JDK, setpriv (util-linux; optional, kills the JVMs if the test
process dies), ``requests`` (fsspec's webhdfs) and ``pyarrow`` (fsspec's hdfs).

How fsspec's two clients behave against it (fsspec 2026.9, pyarrow 26, Hadoop 2.7.3):

- ``open(path, "xb")`` works with neither: webhdfs writes nothing and fails on close
  (requests' MissingSchema), hdfs raises ValueError. WebHDFS ``CREATE`` with
  ``overwrite=false`` is atomic (a loser gets HTTP 403, FileAlreadyExistsException or
  AlreadyBeingCreatedException); pyarrow offers no exclusive create.
- ``mv`` onto an existing file: webhdfs silently does nothing (RENAME answers
  ``{"boolean": false}``, which fsspec ignores; so too for a missing source or parent); hdfs
  overwrites, not atomically (pyarrow deletes the target, then renames).
- A missing file raises FileNotFoundError from cat_file, info and open on both; ``rm`` of a
  missing file passes silently on webhdfs and raises OSError (EIO) on hdfs.
- Closing a written file takes 0-400 ms (Hadoop 2.7's client retries completeFile after 400 ms
  when the DataNode has not reported the block yet).
"""

from __future__ import annotations

import atexit
import contextlib
import getpass
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from string import Template
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any, Literal
from xml.sax.saxutils import escape

from tests.infra.hdfs_build import (
    BUILD_NAME,
    CACHE_ENV,
    HdfsBuildError,
    _is_complete,
    _read_build,
    _tail,
    default_cache_dir,
    ensure_built,
    find_java_home,
)

if TYPE_CHECKING:
    import fsspec

__all__ = [
    "BUILD_NAME",
    "CACHE_ENV",
    "HOST",
    "HdfsBuildError",
    "HdfsCluster",
    "HdfsStartError",
    "Scheme",
    "apply_client_env",
    "client_env_for",
    "default_cache_dir",
    "ensure_built",
    "find_java_home",
    "format_env",
]

Scheme = Literal["hdfs", "webhdfs"]
HOST = "127.0.0.1"
#: Hadoop 2.7 on JDK 17: what the libhdfs client needs ...
CLIENT_JDK_FLAGS = (
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-exports=java.base/sun.nio.ch=ALL-UNNAMED",
)
#: ... and what the servers need on top.
SERVER_JDK_FLAGS = (
    *CLIENT_JDK_FLAGS,
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
    "--add-exports=java.security.jgss/sun.security.krb5=ALL-UNNAMED",
)
#: -Xrs: the JVM that libhdfs starts inside a Python process leaves SIGTERM, SIGINT and SIGHUP
#: to Python (without it, SIGTERM runs the JVM's shutdown hooks and exits with status 143).
# -Xrs starts the attach listener at the JVM's start, and a JVM inside a Python process is
# never shut down: its socket, /tmp/.java_pid<pid>, outlived every test process (12 a run).
CLIENT_JVM_OPTS = (
    *CLIENT_JDK_FLAGS, "-Djava.net.preferIPv4Stack=true", "-Xrs", "-XX:+DisableAttachMechanism",
    "-XX:-UsePerfData",  # (a client's JVM is not shut down: its /tmp/hsperfdata_* file stayed)
)  # fmt: skip

BLOCK_REPORT_LINE = "Successfully sent block report"
JMX_STATE = "/jmx?qry=Hadoop:service=NameNode,name=FSNamesystemState"


class HdfsStartError(RuntimeError):
    """The cluster did not come up; the message ends with the tail of the JVMs' logs."""


# --------------------------------------------------------------------------------------------
# Client environment (pyarrow's libhdfs)
# --------------------------------------------------------------------------------------------


def client_env_for(build_dir: Path) -> dict[str, str]:
    """What a process needs so that pyarrow.fs.HadoopFileSystem works with this build.

    The same for every cluster started from ``build_dir``: the client configuration names no
    address (the host and port are passed to HadoopFileSystem).
    """
    info = _read_build(build_dir)
    classpath = [str(build_dir / "client-conf")]
    classpath += [str(build_dir / "lib" / jar) for jar in info["jars"]]  # no wildcards in libhdfs
    no_proxy = [p for p in os.environ.get("no_proxy", "").split(",") if p]
    no_proxy += [h for h in (HOST, "localhost") if h not in no_proxy]
    return {
        "JAVA_HOME": info["java_home"],
        "ARROW_LIBHDFS_DIR": str(build_dir / "native"),
        "CLASSPATH": ":".join(classpath),
        "LIBHDFS_OPTS": " ".join(CLIENT_JVM_OPTS),
        "no_proxy": ",".join(no_proxy),
        "NO_PROXY": ",".join(no_proxy),
    }


def _jvm_loaded() -> bool:
    try:
        return "libjvm.so" in Path("/proc/self/maps").read_text()
    except OSError:
        return False


def apply_client_env(cluster: HdfsCluster | Path) -> dict[str, str]:
    """Set ``client_env`` in ``os.environ`` (also inherited by processes started later).

    libhdfs reads them once, when the first HadoopFileSystem of the process starts its JVM:
    call this before. Raises if a JVM already runs here with another CLASSPATH.
    """
    build_dir = cluster.build_dir if isinstance(cluster, HdfsCluster) else cluster
    env = client_env_for(build_dir)
    if _jvm_loaded() and os.environ.get("CLASSPATH") != env["CLASSPATH"]:
        raise RuntimeError(
            "a JVM already runs in this process with another CLASSPATH: call apply_client_env()"
            " before the first pyarrow HadoopFileSystem is created"
        )
    os.environ.update(env)
    return env


# --------------------------------------------------------------------------------------------
# Cluster
# --------------------------------------------------------------------------------------------


def _free_ports(count: int) -> list[int]:
    """Distinct loopback ports free right now (held together, so never the same twice)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(sock)
            sock.bind((HOST, 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for sock in socks:
            sock.close()


def _has_exited(proc: subprocess.Popen[bytes]) -> bool:
    """Whether ``proc`` exited, without reaping it (its pid, the group id, stays reserved)."""
    if proc.returncode is not None:
        return True
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _kill_group(proc: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM the process group of ``proc`` (its own session), then SIGKILL it, then reap."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while not _has_exited(proc) and time.monotonic() < deadline:
            time.sleep(0.05)
        # The leader is at worst a zombie here, so its pid cannot have been reused yet.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=30)


_LIVE: set[HdfsCluster] = set()


@atexit.register
def _stop_leftovers() -> None:
    for cluster in list(_LIVE):
        cluster.stop()


class HdfsCluster:
    """NameNode + DataNode on free loopback ports, in a fresh temporary directory.

    ``with HdfsCluster() as cluster: ...`` starts it (about 3-5 s once built) and kills both JVMs
    on exit, also when the body raised. ``die_with_parent`` (default) asks Linux to SIGKILL the
    JVMs when the thread that started them ends, so that even a killed test run leaves no JVM
    behind: start clusters from a long-lived thread (pytest's main thread is one).
    """

    host = HOST

    def __init__(
        self,
        build_dir: Path | None = None,
        *,
        base_dir: Path | None = None,
        ready_timeout: float = 90.0,
        heap: str = "512m",
        user: str | None = None,
        keep_dir: bool = False,
        die_with_parent: bool = True,
        extra_conf: Mapping[str, str] | None = None,
    ) -> None:
        self.build_dir = Path(build_dir) if build_dir is not None else ensure_built()
        if not _is_complete(self.build_dir):
            raise HdfsStartError(f"{self.build_dir} is not a complete HDFS build (ensure_built)")
        self.java_home = Path(_read_build(self.build_dir)["java_home"])
        self.base_dir = base_dir
        self.ready_timeout = ready_timeout
        self.heap = heap
        self.user = user or _current_user()
        self.keep_dir = keep_dir
        self.die_with_parent = die_with_parent
        self.extra_conf = dict(extra_conf or {})
        self.workdir: Path | None = None
        self.ports: dict[str, int] = {}
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: list[IO[bytes]] = []

    # -- addresses ---------------------------------------------------------------------------

    @property
    def rpc_port(self) -> int:
        return self._port("nn_rpc")

    @property
    def http_port(self) -> int:
        """The NameNode's HTTP port, which serves WebHDFS and JMX."""
        return self._port("nn_http")

    @property
    def conf_dir(self) -> Path:
        """This cluster's server configuration (core-site.xml, hdfs-site.xml)."""
        if self.workdir is None:
            raise RuntimeError("the cluster is not started")
        return self.workdir / "conf"

    def _port(self, name: str) -> int:
        if name not in self.ports:
            raise RuntimeError("the cluster is not started")
        return self.ports[name]

    def hdfs_url(self, path: str = "/") -> str:
        return f"hdfs://{self.host}:{self.rpc_port}/{path.lstrip('/')}"

    def webhdfs_url(self, path: str = "/") -> str:
        return f"webhdfs://{self.host}:{self.http_port}/{path.lstrip('/')}"

    def url(self, scheme: Scheme, path: str = "/") -> str:
        return self.hdfs_url(path) if scheme == "hdfs" else self.webhdfs_url(path)

    def storage_options(self, scheme: Scheme) -> dict[str, Any]:
        """Keyword arguments for fsspec: ``fsspec.core.url_to_fs(url, **storage_options)``.

        For "hdfs", call ``apply_client_env`` (or set ``client_env()``) first in the process.
        """
        if scheme == "webhdfs":
            return {"host": self.host, "port": self.http_port, "user": self.user}
        if scheme == "hdfs":
            # fsspec's HadoopFileSystem creates files with replication=3 unless told otherwise.
            return {"host": self.host, "port": self.rpc_port, "user": self.user, "replication": 1}
        raise ValueError(f"unknown scheme {scheme!r}: 'hdfs' or 'webhdfs'")

    def filesystem(self, scheme: Scheme) -> fsspec.AbstractFileSystem:
        import fsspec

        return fsspec.filesystem(scheme, **self.storage_options(scheme))

    def client_env(self) -> dict[str, str]:
        """JAVA_HOME, ARROW_LIBHDFS_DIR, CLASSPATH (every jar), LIBHDFS_OPTS (and no_proxy)."""
        return client_env_for(self.build_dir)

    def fsspec_env(self) -> dict[str, str]:
        """The user and replication as fsspec configuration, for subprocesses given bare URLs.

        fsspec reads ``FSSPEC_<PROTOCOL>`` (JSON) from the environment when it is imported, so a
        ``snap`` subprocess that only sees ``hdfs://127.0.0.1:PORT/...`` gets them too.
        """
        return {
            "FSSPEC_WEBHDFS": json.dumps({"user": self.user}),
            "FSSPEC_HDFS": json.dumps({"user": self.user, "replication": 1}),
        }

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> HdfsCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"rpc={self.ports.get('nn_rpc')} http={self.ports.get('nn_http')}"
        return f"<HdfsCluster {state} dir={self.workdir}>"

    def start(self) -> HdfsCluster:
        if self._procs:
            raise RuntimeError("the cluster is already started")
        self.workdir = Path(tempfile.mkdtemp(prefix="hdfs-cluster-", dir=self.base_dir))
        for sub in ("conf", "logs", "tmp"):
            (self.workdir / sub).mkdir()
        _LIVE.add(self)
        try:
            for attempt in range(1, 4):
                self.ports = dict(
                    zip(
                        ("nn_rpc", "nn_http", "snn_http", "dn_data", "dn_http", "dn_ipc"),
                        _free_ports(6),
                        strict=True,
                    )
                )
                self._write_conf()
                if attempt == 1:
                    self._format()
                self._launch("namenode", "org.apache.hadoop.hdfs.server.namenode.NameNode")
                self._launch("datanode", "org.apache.hadoop.hdfs.server.datanode.DataNode")
                try:
                    self._wait_ready()
                    return self
                except HdfsStartError as exc:
                    logs = self.log_tails()
                    self._kill()
                    clash = "BindException" in logs or "Address already in use" in logs
                    if not clash or attempt == 3:
                        raise HdfsStartError(f"{exc}\n{logs}") from None
                    # Another process took one of the ports in between: new ports, same name dir.
                    shutil.rmtree(self.workdir / "data", ignore_errors=True)
            raise AssertionError("unreachable")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Kill both JVMs and their process groups; delete the directory unless keep_dir."""
        self._kill()
        _LIVE.discard(self)
        if self.workdir is not None and not self.keep_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _kill(self) -> None:
        for name in ("datanode", "namenode"):
            proc = self._procs.pop(name, None)
            if proc is not None:
                _kill_group(proc, grace=5.0)
        for handle in self._logs:
            handle.close()
        self._logs.clear()

    def _write_conf(self) -> None:
        assert self.workdir is not None
        values = {"host": self.host, "workdir": str(self.workdir), "level": "INFO", **self.ports}
        for name in ("core-site.xml", "hdfs-site.xml", "log4j.properties"):
            text = Template((self.build_dir / "templates" / name).read_text()).substitute(values)
            if name == "hdfs-site.xml" and self.extra_conf:
                props = "".join(
                    f"  <property><name>{escape(k)}</name><value>{escape(str(v))}</value>"
                    "</property>\n"
                    for k, v in self.extra_conf.items()
                )
                text = text.replace("</configuration>", f"{props}</configuration>")
            (self.conf_dir / name).write_text(text)

    def _java(self, main: str, *args: str) -> list[str]:
        assert self.workdir is not None
        classpath = f"{self.conf_dir}:{self.build_dir / 'res'}:{self.build_dir / 'lib'}/*"
        return [
            str(self.java_home / "bin" / "java"),
            f"-Xmx{self.heap}",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-XX:-UsePerfData",
            "-Djava.net.preferIPv4Stack=true",
            f"-Djava.io.tmpdir={self.workdir / 'tmp'}",  # Jetty's scratch: not /tmp, deleted
            f"-Dhadoop.home.dir={self.build_dir}",
            f"-Dhadoop.log.dir={self.workdir / 'logs'}",
            *SERVER_JDK_FLAGS,
            "-cp",
            classpath,
            main,
            *args,
        ]

    def _server_env(self) -> dict[str, str]:
        drop = {
            "CLASSPATH",
            "LIBHDFS_OPTS",
            "JAVA_TOOL_OPTIONS",
            "_JAVA_OPTIONS",
            "JDK_JAVA_OPTIONS",
        }
        env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("HADOOP")}
        env["JAVA_HOME"] = str(self.java_home)
        return env

    def _format(self) -> None:
        assert self.workdir is not None
        cmd = self._java(
            "org.apache.hadoop.hdfs.server.namenode.NameNode",
            "-format",
            "-force",
            "-nonInteractive",
        )
        log = self.workdir / "logs" / "format.log"
        with open(log, "wb") as handle:
            try:
                code = subprocess.run(
                    cmd,
                    stdin=subprocess.DEVNULL,
                    stdout=handle,
                    stderr=subprocess.STDOUT,
                    cwd=self.workdir,
                    env=self._server_env(),
                    timeout=120,
                    check=False,
                ).returncode
            except subprocess.TimeoutExpired:
                code = None
        if code != 0:
            raise HdfsStartError(
                f"formatting the NameNode failed ({'timed out' if code is None else code}):\n"
                f"--- {log} (tail) ---\n{_tail(log.read_bytes())}"
            )

    def _launch(self, name: str, main: str) -> None:
        assert self.workdir is not None
        prefix: list[str] = []
        if self.die_with_parent and sys.platform == "linux" and shutil.which("setpriv"):
            prefix = ["setpriv", "--pdeathsig", "KILL"]
        handle = open(self.workdir / "logs" / f"{name}.log", "ab")  # noqa: SIM115 (closed in _kill)
        self._logs.append(handle)
        self._procs[name] = subprocess.Popen(
            [*prefix, *self._java(main)],
            stdin=subprocess.DEVNULL,
            stdout=handle,
            stderr=subprocess.STDOUT,
            cwd=self.workdir,
            env=self._server_env(),
            start_new_session=True,  # own process group: killed as a whole
        )

    def _read_log(self, name: str) -> str:
        assert self.workdir is not None
        try:
            return (self.workdir / "logs" / f"{name}.log").read_text(errors="replace")
        except OSError:
            return ""

    def log_tails(self, lines: int = 30) -> str:
        """The last lines of the NameNode's and DataNode's logs, for error messages."""
        parts = [
            f"--- {name}.log (tail) ---\n{_tail(self._read_log(name), lines)}"
            for name in ("namenode", "datanode")
        ]
        return "\n".join(parts)

    def _wait_ready(self) -> None:
        """Until the NameNode counts one live DataNode, is out of safe mode, and the DataNode
        logged its first block report."""
        url = f"http://{self.host}:{self.http_port}{JMX_STATE}"
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        deadline = time.monotonic() + self.ready_timeout
        last = "no answer yet"
        while True:
            for name, proc in self._procs.items():
                if _has_exited(proc):
                    raise HdfsStartError(f"the {name} JVM exited during start-up")
            try:
                with opener.open(url, timeout=2) as response:
                    beans = json.load(response).get("beans") or [{}]
                live, state = beans[0].get("NumLiveDataNodes"), beans[0].get("FSState")
                last = f"NumLiveDataNodes={live}, FSState={state}"
                if (
                    live == 1
                    and state == "Operational"
                    and BLOCK_REPORT_LINE in self._read_log("datanode")
                ):
                    return
            except (OSError, ValueError) as exc:  # URLError is an OSError
                last = f"{url}: {exc!r}"
            if time.monotonic() > deadline:
                raise HdfsStartError(
                    f"HDFS was not ready after {self.ready_timeout:.0f} s (last: {last})"
                )
            time.sleep(0.1)


def _current_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry for the uid (some containers)
        return "root"


def format_env(env: Mapping[str, str]) -> str:
    """``env`` as shell ``export`` lines (to reproduce a client environment by hand)."""
    return "\n".join(f"export {k}={shlex.quote(v)}" for k, v in env.items())
