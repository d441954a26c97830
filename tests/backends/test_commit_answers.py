"""A commit whose write landed but whose answer did not come back whole (damaged JSON, a
reset, any error after the request may have reached the store) is checked as a lost answer
is: the manifest is read again, and one that is this commit's is a success (REPORT finding 7:
``createW flip`` failed a create that had committed). A refused create-if-absent with nothing
there does not say another writer committed (REPORT finding 8). By injection at the commit's
write (every kind of error, both commits: the first, a create-if-absent, and a grow's
replace), and through a proxy in front of the real GCS emulator and moto."""

from __future__ import annotations

import errno
import json
import posixpath
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import snapshot_cli as snap
from snapshot_cli import storage
from snapshot_cli.errors import SnapshotExistsError, StorageError
from tests.backends.conftest import BUCKET
from tests.infra.flaky_proxy import FlakyProxy


def preprocess(k: int) -> Iterator[dict[str, Any]]:
    for j in range(3):
        yield {"label": k * 3 + j, "x": np.full(2, k, np.int16)}


# what a client may raise once its request reached the store: a damaged answer's parse
# error, a reset, a time-out, an I/O error, the storage error snap makes of any of them
AFTER_LANDING: dict[str, Callable[[], BaseException]] = {
    "invalid-json": lambda: json.JSONDecodeError("Expecting value", '{"kind": st', 10),
    "reset": lambda: ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"),
    "timeout": lambda: TimeoutError(errno.ETIMEDOUT, "timed out"),
    "EIO": lambda: OSError(errno.EIO, "Input/output error"),
    "storage": lambda: StorageError("failed while creating manifest.json: ValueError"),
}


def labels(url: str) -> list[int]:
    with snap.open(url).loader(batch_size=100, shuffle=False) as loader:
        return sorted(int(v) for b in loader for v in b["label"])


def make(url: str, n: int, **kw: Any) -> None:
    snap.create(preprocess, url, inputs_from=lambda: list(range(n)), workers=0,
                inputs_per_task=1, **kw)  # fmt: skip


def failing_manifest_write(
    monkeypatch: pytest.MonkeyPatch, name: str, error: BaseException, lands: bool
) -> list[str]:
    """``storage.name`` of ``manifest.json`` raises ``error``, after writing it if ``lands``."""
    real = getattr(storage, name)
    hits: list[str] = []

    def write(fs: Any, path: str, data: bytes) -> Any:
        if posixpath.basename(path) != "manifest.json":
            return real(fs, path, data)
        hits.append(path)
        if lands:
            real(fs, path, data)
        raise error

    monkeypatch.setattr(storage, name, write)
    return hits


@pytest.mark.parametrize("kind", sorted(AFTER_LANDING))
@pytest.mark.parametrize("grow", [False, True], ids=["first", "grow"])
def test_a_commit_that_landed_whatever_its_answer_is_a_success(
    kind: str, grow: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = str(tmp_path / "snap")
    if grow:
        make(url, 2)
    name = "write_atomic" if grow else "create_exclusive"
    hits = failing_manifest_write(monkeypatch, name, AFTER_LANDING[kind](), lands=True)
    make(url, 3)
    assert hits
    monkeypatch.undo()
    assert labels(url) == list(range(9))
    assert snap.open(url).version == (2 if grow else 1)


@pytest.mark.parametrize("kind", sorted(AFTER_LANDING))
@pytest.mark.parametrize("grow", [False, True], ids=["first", "grow"])
def test_a_commit_that_did_not_land_fails_with_its_own_error(
    kind: str, grow: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = str(tmp_path / "snap")
    if grow:
        make(url, 2)
    name = "write_atomic" if grow else "create_exclusive"
    error = AFTER_LANDING[kind]()
    failing_manifest_write(monkeypatch, name, error, lands=False)
    with pytest.raises(BaseException) as raised:
        make(url, 3)
    assert raised.value is error or raised.value.__cause__ is error, repr(raised.value)
    monkeypatch.undo()
    if grow:
        assert labels(url) == list(range(6))
    else:
        assert not Path(url, "manifest.json").exists()


def test_a_refused_first_commit_with_nothing_there_does_not_blame_another_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 412 (or an exists) whose object is not there: said as such, nothing committed."""
    url = str(tmp_path / "snap")
    real = storage.create_exclusive

    def refused(fs: Any, path: str, data: bytes) -> bool:
        return False if path.endswith("manifest.json") else real(fs, path, data)

    monkeypatch.setattr(storage, "create_exclusive", refused)
    with pytest.raises(StorageError) as raised:
        make(url, 2)
    assert not isinstance(raised.value, SnapshotExistsError)
    said = str(raised.value)
    assert "another writer" not in said and "nothing of this run was committed" in said, said
    assert "manifest.json" in said and "run the same snap create again" in said, said
    monkeypatch.undo()
    make(url, 2)
    assert labels(url) == list(range(6))


def test_a_first_commit_refused_by_another_writers_manifest_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = str(tmp_path / "snap")
    other = str(tmp_path / "other")
    make(other, 1)
    real = storage.create_exclusive

    def raced(fs: Any, path: str, data: bytes) -> bool:
        if path.endswith("manifest.json"):  # another writer's commit came first
            real(fs, path, Path(other, "manifest.json").read_bytes())
            return False
        return real(fs, path, data)

    monkeypatch.setattr(storage, "create_exclusive", raced)
    with pytest.raises(SnapshotExistsError, match="another writer committed"):
        make(url, 2)


# The commit's request, on each store: a first commit is the run's second create-if-absent
# on GCS (the lease's is the first; the precondition is in the query); S3's by its name.
COMMIT = {
    "gcs": ("gs", {"n": 2, "method": "POST", "path": "ifGenerationMatch=0"}),
    "s3": ("s3", {"n": 1, "method": "PUT", "path": "/manifest.json"}),
}


@pytest.mark.parametrize("name", ["gcs", "s3"])
@pytest.mark.parametrize("fault", ["lost", "flip", "cut"])
def test_a_first_commit_whose_answer_was_damaged_on_the_wire(
    name: str, fault: str, request: pytest.FixtureRequest
) -> None:
    server = request.getfixturevalue(f"{name}_server")
    scheme, match = COMMIT[name]
    url = f"{scheme}://{BUCKET}/commit-answer-{uuid.uuid4().hex[:8]}/snap"
    with FlakyProxy(server.endpoint, every=10**9) as proxy:
        proxy.arm(fault, **match)
        make(url, 3, storage_options={"endpoint_url": proxy.endpoint})
    assert [k for k, _, _ in proxy.fired] == [fault], proxy.fired
    assert labels(url) == list(range(9))
