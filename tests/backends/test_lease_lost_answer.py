"""A grow whose lease create reached the store but whose answer was lost (the connection reset
after the server made the file): the client's retry is refused (412, it exists), and the
create must see that the file is its own, not wait for good on itself (REPORT finding 2: a
listing cached before the create still showed only the released lease of the last create).
Through :class:`FlakyProxy` in front of the real GCS emulator and moto."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import fsspec
import pytest

import snapshot_cli as snap
from tests.backends.conftest import BUCKET
from tests.conftest import REPO
from tests.infra.flaky_proxy import FlakyProxy

PIPELINE = """
def preprocess(path):
    with open(path) as f:
        start = int(f.read())
    for i in range(start, start + 4):
        yield {"label": i}
"""
# The request that creates the lease of a grow (the first create-if-absent of the run: the
# commit of a grow replaces manifest.json): GCS's precondition is in the query, S3's in a
# header, so there by its name.
LEASE_CREATE = {
    "gcs": ("gs", {"method": "POST", "path": "ifGenerationMatch=0"}),
    "s3": ("s3", {"method": "PUT", "path": "_runs/lease-00000001.json"}),
}
ENDPOINT_ENV = {"gcs": "STORAGE_EMULATOR_HOST", "s3": "FSSPEC_S3_ENDPOINT_URL"}


def create(
    pipeline: str, url: str, inputs: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    args = ["create", pipeline, url, "--input", f"{inputs}/*.txt", "--inputs-per-task", "1"]
    return subprocess.run(
        [sys.executable, "-m", "snapshot_cli", *args, "--workers", "0"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,  # (the fault made it wait for good: killed here, the test fails)
        check=False,
    )


@pytest.mark.parametrize("name", ["gcs", "s3"])
def test_a_grow_whose_lease_answer_was_lost_takes_its_own_lease(
    name: str, request: pytest.FixtureRequest, tmp_path: Path, write_pipeline: Any
) -> None:
    server = request.getfixturevalue(f"{name}_server")
    scheme, match = LEASE_CREATE[name]
    url = f"{scheme}://{BUCKET}/lease-lost-{uuid.uuid4().hex[:8]}/snap"
    pipeline = write_pipeline(PIPELINE)
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    for k in range(2):
        (inputs / f"{k}.txt").write_text(str(k * 4))
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    first = create(pipeline, url, inputs, env)
    assert first.returncode == 0, first.stderr
    (inputs / "2.txt").write_text("8")  # the grow: one input more
    with FlakyProxy(server.endpoint, every=10**9) as proxy:
        proxy.arm("lost", 1, **match)
        grow = create(pipeline, url, inputs, {**env, ENDPOINT_ENV[name]: proxy.endpoint})
    assert [kind for kind, _, _ in proxy.fired] == ["lost"], proxy.fired
    assert grow.returncode == 0, grow.stderr
    assert "waiting for the writer lease" not in grow.stderr, grow.stderr
    s = snap.open(url)
    assert s.version == 2
    with s.loader(batch_size=100, shuffle=False) as loader:
        assert sorted(int(v) for b in loader for v in b["label"]) == list(range(12))


@pytest.mark.parametrize("name", ["gcs", "s3"])
@pytest.mark.parametrize("command", ["create", "gc"])
def test_a_lease_refused_as_existing_that_is_not_there_ends_the_command(
    name: str, command: str, request: pytest.FixtureRequest, tmp_path: Path, write_pipeline: Any
) -> None:
    """A store (or a gateway before it) that answers every create of the lease with 412, as
    if it existed, while no such file is there: a create waited for good on "an unknown
    writer", and gc took it for a live writer's. A create gives up after 5 tries, gc after 3
    (a lease may go between a refusal and its read), naming the lease file; a create leaves
    no snapshot, gc removes nothing."""
    server = request.getfixturevalue(f"{name}_server")
    scheme, match = LEASE_CREATE[name]
    url = f"{scheme}://{BUCKET}/lease-absent-{uuid.uuid4().hex[:8]}/snap"
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    (inputs / "0.txt").write_text("0")
    pipeline = write_pipeline(PIPELINE)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    epoch = 0
    if command == "gc":  # a snapshot with a replaced version's shard for gc to keep
        for k in (1, 2):
            (inputs / "0.txt").write_text(str(k))
            assert create(pipeline, url, inputs, env).returncode == 0
        epoch = 2
    if name == "s3":
        match = {**match, "path": f"_runs/lease-{epoch:08d}.json"}
    args = [pipeline, url, "--input", f"{inputs}/*.txt", "--workers", "0"]
    argv = ["create", *args] if command == "create" else ["gc", url, "--retention", "0"]
    before = sorted(snap_files(url))
    with FlakyProxy(server.endpoint, every=10**9) as proxy:
        proxy.arm(412, 1, times=10**6, **match)
        proc = subprocess.run(
            [sys.executable, "-m", "snapshot_cli", *argv],
            cwd=REPO,
            env={**env, ENDPOINT_ENV[name]: proxy.endpoint},
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    assert f"lease-{epoch:08d}.json" in proc.stderr and "shows no such file" in proc.stderr
    assert len(proxy.fired) == (5 if command == "create" else 3), proxy.fired
    assert sorted(snap_files(url)) == before
    if command == "create":
        with pytest.raises(snap.ManifestError):
            snap.open(url)


def snap_files(url: str) -> list[str]:
    """Every file under ``url`` as the store holds it now."""
    fs, path = fsspec.core.url_to_fs(url)
    fs.invalidate_cache()
    return list(fs.find(path))
