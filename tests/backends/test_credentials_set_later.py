"""Credentials set in a running Python process after a refusal, or after an earlier loader,
are used: a notebook's ``os.environ["AWS_ACCESS_KEY_ID"] = ...`` then the same cell again.

- fsspec keeps one client per set of options for the life of the process, with the
  credentials it loaded once: after "Unable to locate credentials", credentials set in the
  environment were never read, and the same call was refused until Python was restarted.
- Decode processes (``processes=N``) start once per Python process and serve every loader
  after; they read with the environment as it was at their start: S3 refused them, and an
  ``hdfs://`` read set up after a local one lost them to a failed start.

Against the S3 server (moto), credentials in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY only.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import fsspec
import fsspec.config
import numpy as np
import pytest

import snapshot_cli as snap
from snapshot_cli.errors import StorageError
from snapshot_cli.readers import procs
from tests.backends.conftest import BUCKET
from tests.infra.servers import S3Server

RECORDS = 600
CREDENTIALS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


@pytest.fixture
def credentials_from_environment(
    s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """S3's credentials in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY only (the server's
    client set-up also gives them as fsspec options, which would hide what is tested)."""
    conf = fsspec.config.conf
    s3 = {k: v for k, v in conf.get("s3", {}).items() if k not in ("key", "secret")}
    monkeypatch.setitem(conf, "s3", s3)
    for name in ("FSSPEC_S3_KEY", "FSSPEC_S3_SECRET"):
        monkeypatch.delenv(name, raising=False)
    fsspec.get_filesystem_class("s3").clear_instance_cache()
    yield
    fsspec.get_filesystem_class("s3").clear_instance_cache()


def records() -> Iterator[snap.Batch]:
    for start in range(0, RECORDS, 100):
        n = np.arange(start, start + 100)
        yield snap.Batch(label=n, x=np.repeat(n % 251, 64).astype(np.uint8).reshape(100, 64))


@pytest.fixture
def fresh_pool() -> Iterator[procs.DecodePool]:
    """This process's decode processes ended: the test starts its own."""
    pool = procs.pool()
    pool.close()
    yield pool
    pool.close()  # started without the credentials: not for the tests after this one


def test_credentials_set_after_the_processes_started_reach_them(
    credentials_from_environment: None,
    fresh_pool: procs.DecodePool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}/snap"
    snap.create(records, url, workers=0, shard_size="16KiB")
    local = str(tmp_path / "local")
    snap.create(records, local, workers=0, shard_size="16KiB")
    with monkeypatch.context() as unset:
        for name in CREDENTIALS:
            unset.delenv(name)
        # a first loader, of a local snapshot, before the credentials are set
        assert len(fresh_pool.wait_ready(2)) == 2
        with snap.open(local).loader(50, processes=2, seed=1) as loader:
            assert sorted(int(v) for b in loader for v in b["label"]) == list(range(RECORDS))
    # the credentials are back in os.environ; the processes are the ones started without
    with snap.open(url).loader(50, processes=2, seed=1) as loader:
        batches = list(loader)
        stats = loader.stats()
    assert stats["stage_seconds"]["decode_process_cpu"] > 0  # the processes decoded
    labels = np.concatenate([b["label"] for b in batches])
    assert sorted(labels.tolist()) == list(range(RECORDS))
    for b in batches:
        assert (b["x"] == (b["label"] % 251)[:, None]).all()


def test_credentials_set_after_a_refusal_are_used_by_the_next_call(
    credentials_from_environment: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}/snap"
    saved = {name: os.environ[name] for name in CREDENTIALS}
    for name in CREDENTIALS:
        monkeypatch.delenv(name)
    with pytest.raises(StorageError, match="cannot authenticate to the storage") as refused:
        snap.create(records, url, workers=0, shard_size="16KiB")
    assert "Unable to locate credentials" in str(refused.value)
    for name, value in saved.items():
        monkeypatch.setenv(name, value)
    made = snap.create(records, url, workers=0, shard_size="16KiB")
    assert made.num_records == RECORDS
    assert snap.open(url).num_records == RECORDS
