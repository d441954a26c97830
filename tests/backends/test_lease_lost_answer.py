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
