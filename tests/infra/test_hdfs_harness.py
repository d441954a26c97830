"""The HDFS harness itself: a real NameNode and DataNode, through fsspec's two HDFS clients.

The first run builds the harness into the cache (about 20-30 s, downloads ~250 MB from PyPI and
Debian); later runs only start the cluster (about 4 s).
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import fsspec
import pytest

from tests.infra.hdfs import HdfsCluster, Scheme, apply_client_env

pytestmark = pytest.mark.slow

SCHEMES: list[Scheme] = ["webhdfs", "hdfs"]
BLOCK = 4 * 2**20  # dfs.blocksize of the harness


@pytest.fixture(scope="module")
def hdfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HdfsCluster]:
    missing = [t for t in ("java", "javac", "gcc", "apt-get", "dpkg-deb") if not shutil.which(t)]
    if missing:
        pytest.skip(f"the HDFS harness needs {', '.join(missing)}")
    # Under pytest's basetemp: whatever a killed run leaves there is rotated away by pytest.
    with HdfsCluster(base_dir=tmp_path_factory.mktemp("hdfs")) as cluster:
        apply_client_env(cluster)  # before the first pyarrow HadoopFileSystem of this process
        yield cluster


@pytest.mark.parametrize("scheme", SCHEMES)
def test_write_read_range_rm_round_trip(hdfs: HdfsCluster, scheme: Scheme) -> None:
    fs, root = fsspec.core.url_to_fs(
        hdfs.url(scheme, f"/harness/{scheme}"), **hdfs.storage_options(scheme)
    )
    assert root == f"/harness/{scheme}"
    fs.makedirs(f"{root}/d", exist_ok=True)
    data = os.urandom(BLOCK + 2**20)  # spans two blocks
    fs.pipe_file(f"{root}/d/blob", data)
    with fs.open(f"{root}/d/small", "wb") as f:
        f.write(b"hello ")
        f.write(b"world")

    assert fs.cat_file(f"{root}/d/blob") == data
    assert (
        fs.cat_file(f"{root}/d/blob", start=BLOCK - 5, end=BLOCK + 5) == data[BLOCK - 5 : BLOCK + 5]
    )
    with fs.open(f"{root}/d/blob", "rb") as f:
        f.seek(BLOCK + 100)
        assert f.read(64) == data[BLOCK + 100 : BLOCK + 164]
    assert fs.info(f"{root}/d/blob")["size"] == len(data)
    listing = fs.ls(f"{root}/d", detail=True)
    assert {(e["name"], e["type"], e["size"]) for e in listing} == {
        (f"{root}/d/blob", "file", len(data)),
        (f"{root}/d/small", "file", 11),
    }

    fs.mv(f"{root}/d/small", f"{root}/d/moved")
    assert fs.cat_file(f"{root}/d/moved") == b"hello world"
    assert not fs.exists(f"{root}/d/small")
    with pytest.raises(FileNotFoundError):
        fs.cat_file(f"{root}/d/small")
    with pytest.raises(FileNotFoundError):
        fs.info(f"{root}/d/small")

    fs.rm(root, recursive=True)
    assert not fs.exists(root)


def test_both_clients_see_one_namespace(hdfs: HdfsCluster) -> None:
    web, native = hdfs.filesystem("webhdfs"), hdfs.filesystem("hdfs")
    web.pipe_file("/harness-shared/from-web", b"written over webhdfs")
    native.pipe_file("/harness-shared/from-native", b"written over hdfs")
    assert native.cat_file("/harness-shared/from-web") == b"written over webhdfs"
    assert web.cat_file("/harness-shared/from-native") == b"written over hdfs"
    web.rm("/harness-shared", recursive=True)
    assert not native.exists("/harness-shared")


def _write_from_child(url: str, storage_options: dict[str, object], payload: bytes) -> None:
    fs, path = fsspec.core.url_to_fs(url, **storage_options)
    fs.pipe_file(path, payload)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_spawned_process_writes(hdfs: HdfsCluster, scheme: Scheme) -> None:
    """The project's workers are spawned: they inherit the client environment and connect."""
    url = hdfs.url(scheme, f"/harness-spawn/{scheme}")
    child = multiprocessing.get_context("spawn").Process(
        target=_write_from_child, args=(url, hdfs.storage_options(scheme), b"from a child")
    )
    child.start()
    child.join(120)
    assert child.exitcode == 0
    assert hdfs.filesystem(scheme).cat_file(f"/harness-spawn/{scheme}") == b"from a child"


def test_addresses_and_client_env(hdfs: HdfsCluster) -> None:
    assert hdfs.hdfs_url("/a/b") == f"hdfs://127.0.0.1:{hdfs.rpc_port}/a/b"
    assert hdfs.webhdfs_url("a/b") == f"webhdfs://127.0.0.1:{hdfs.http_port}/a/b"
    assert len(set(hdfs.ports.values())) == len(hdfs.ports)
    assert not {9000, 9870} & set(hdfs.ports.values())
    assert (
        f"<value>127.0.0.1:{hdfs.rpc_port}</value>" in (hdfs.conf_dir / "hdfs-site.xml").read_text()
    )
    env = hdfs.client_env()
    entries = env["CLASSPATH"].split(":")
    assert all(Path(e).exists() for e in entries)
    assert sum(e.endswith(".jar") for e in entries) >= 40  # one by one: libhdfs has no wildcards
    assert (Path(env["ARROW_LIBHDFS_DIR"]) / "libhdfs.so").is_file()
    assert "--add-opens=java.base/java.lang=ALL-UNNAMED" in env["LIBHDFS_OPTS"].split()
    assert all(os.environ[k] == v for k, v in env.items())
