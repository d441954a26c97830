"""One server per storage backend, started the first time a test needs it, stopped at the end.

``backend`` is parametrized over :data:`BACKENDS`; each test gets a :class:`Backend` whose
``root`` is a directory URL of its own (``gs://BUCKET/<test>-<uuid>``, ...), so tests never see
each other's files. The servers (fake-gcs-server, moto, a single-node Hadoop) are
session-scoped fixtures requested only by the parameters that need them: ``-k local`` starts
nothing. Each server's client configuration goes into ``os.environ`` (inherited by ``snap``
subprocesses and the worker processes they spawn, which see only a plain URL) and into
fsspec's configuration of this process; both are restored when the session ends.
"""

from __future__ import annotations

import contextlib
import copy
import os
import re
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fsspec
import fsspec.config
import pytest

from snapshot_cli import storage
from tests.infra.hdfs import HdfsCluster, apply_client_env
from tests.infra.servers import GcsServer, S3Server, apply_client_config

BACKENDS = ("local", "memory", "gcs", "s3", "webhdfs", "hdfs")
#: Backends whose tests take more than a few seconds (a JVM; the object stores are quick).
SLOW = frozenset({"webhdfs", "hdfs"})
BUCKET = "snap-backend-tests"


@dataclass(frozen=True)
class Backend:
    """One storage backend, seen from one test."""

    name: str
    root: str  # this test's directory: a local path for "local", else a URL
    storage_options: dict[str, Any] | None = None  # None: the fsspec configuration suffices

    @property
    def fs(self) -> fsspec.AbstractFileSystem:
        """The client snap itself makes for this URL (the same instance: fsspec caches them by
        their options, and snap adds some, as gcsfs's timeout), so what snap wrote or deleted
        is in its listings."""
        return storage.resolve(self.root, self.storage_options)[0]

    @property
    def shared(self) -> bool:
        """Whether other processes see the same files (all but fsspec's in-memory store)."""
        return self.name != "memory"

    @property
    def workers(self) -> int:
        """``--workers`` for ``snap create``: spawned processes, unless they cannot see memory."""
        return 2 if self.shared else 0

    def url(self, suffix: str = "snap") -> str:
        """A URL under this test's directory (the same ``suffix`` gives the same URL)."""
        return f"{self.root}/{suffix}"

    def path(self, url: str) -> str:
        """The filesystem path of ``url`` (what ``fs`` methods take)."""
        return str(fsspec.core.url_to_fs(url, **(self.storage_options or {}))[1])

    def refresh(self) -> None:
        """Forget listings this process cached (another process wrote since)."""
        self.fs.invalidate_cache()


@contextlib.contextmanager
def restored_env(keys: Mapping[str, str] | list[str]) -> Iterator[None]:
    """Put back the values ``keys`` have now (or their absence) on exit."""
    saved = {k: os.environ.get(k) for k in keys}
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def restored_fsspec_conf(*protocols: str) -> Iterator[None]:
    """Put back fsspec's configuration of ``protocols`` on exit, and drop cached instances."""
    conf = fsspec.config.conf
    saved = {p: copy.deepcopy(conf[p]) for p in protocols if p in conf}
    try:
        yield
    finally:
        for protocol in protocols:
            if protocol in saved:
                conf[protocol] = saved[protocol]
            else:
                conf.pop(protocol, None)
            with contextlib.suppress(ImportError, ValueError):
                fsspec.get_filesystem_class(protocol).clear_instance_cache()


def use_core_gcsfs() -> None:
    """gcsfs chooses its class when imported: with GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT unset, one
    that probes every bucket over gRPC (60 s against the emulator). The server's client
    environment sets it to false; if gcsfs was imported before, register the core class."""
    import gcsfs
    import gcsfs.core

    if gcsfs.GCSFileSystem is not gcsfs.core.GCSFileSystem:
        for protocol in ("gs", "gcs"):
            fsspec.register_implementation(protocol, gcsfs.core.GCSFileSystem, clobber=True)


@pytest.fixture(scope="session")
def gcs_server() -> Iterator[GcsServer]:
    with (
        GcsServer() as server,
        restored_env(server.client_env()),
        restored_fsspec_conf("gcs", "gs"),
    ):
        apply_client_config(server)
        use_core_gcsfs()
        server.make_bucket(BUCKET)
        yield server


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    with S3Server() as server, restored_env(server.client_env()), restored_fsspec_conf("s3", "s3a"):
        apply_client_config(server)
        server.make_bucket(BUCKET)
        yield server


@pytest.fixture(scope="session")
def hdfs_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HdfsCluster]:
    """One Hadoop cluster (NameNode + DataNode) serving both ``webhdfs://`` and ``hdfs://``."""
    with HdfsCluster(base_dir=tmp_path_factory.mktemp("hdfs")) as cluster:
        env = {**cluster.client_env(), **cluster.fsspec_env()}
        with restored_env(env), restored_fsspec_conf("webhdfs", "hdfs"):
            apply_client_env(cluster)  # before the first pyarrow HadoopFileSystem here
            os.environ.update(cluster.fsspec_env())  # for subprocesses given bare URLs
            conf = fsspec.config.conf
            conf.setdefault("webhdfs", {}).update(user=cluster.user)
            conf.setdefault("hdfs", {}).update(user=cluster.user, replication=1)
            yield cluster


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-")


def _param(name: str) -> Any:
    return pytest.param(name, id=name, marks=[pytest.mark.slow] if name in SLOW else [])


@pytest.fixture(params=[_param(name) for name in BACKENDS])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """Every storage backend in turn, with a fresh directory for this test."""
    name: str = request.param
    unique = f"{_slug(request.node.name)}-{uuid.uuid4().hex[:8]}"
    if name == "local":
        root = str(tmp_path / "store")
    elif name == "memory":
        root = f"memory:///snap-backends/{unique}"  # the form snap reports
    elif name == "gcs":
        request.getfixturevalue("gcs_server")
        root = f"gs://{BUCKET}/{unique}"
    elif name == "s3":
        request.getfixturevalue("s3_server")
        root = f"s3://{BUCKET}/{unique}"
    elif name in ("webhdfs", "hdfs"):
        cluster: HdfsCluster = request.getfixturevalue("hdfs_cluster")
        # The HDFS path is this test's local tmp_path: a write that wrongly goes to the local
        # disk (an hdfs:// URL that lost its host) lands there, where tests look for it,
        # rather than in a directory under / of this machine.
        root = cluster.url(name, f"{tmp_path}/{name}-namespace")
    else:
        raise AssertionError(f"unknown backend {name!r}")
    backend = Backend(name, root)
    yield backend
    if name == "memory":  # shared with the rest of this process: leave nothing behind
        with contextlib.suppress(FileNotFoundError):
            backend.fs.rm(backend.path(root), recursive=True)
