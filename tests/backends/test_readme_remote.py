"""The README's remote-storage commands run as shown, against a real S3 server (moto).

Only the endpoint (the README's example port) and the cache directory are swapped for this
test's own; the commands run through bash in a directory laid out like the repo after
``make demo``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO
from tests.infra.servers import S3Server
from tests.readme import block_with

MARKER = "FSSPEC_S3_ENDPOINT_URL="  # how tests/test_readme.py knows this block runs here


def _readme_block() -> str:
    return block_with(MARKER).code


def test_readme_remote_block_runs_against_s3(tmp_path: Path) -> None:
    block = _readme_block()
    assert "s3://my-bucket/snaps/quickstart" in block
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    subprocess.run(
        [sys.executable, "examples/quickstart/make_inputs.py", "demo-output/raw", "30"],
        cwd=tmp_path,
        check=True,
    )
    cache = tmp_path / "cache"
    with S3Server() as server:
        server.make_bucket("my-bucket")
        script = block.replace("http://127.0.0.1:9000", server.endpoint).replace(
            "/tmp/snap-cache", str(cache)
        )
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("FSSPEC_")},
            **{k: v for k, v in server.client_env().items() if k != "FSSPEC_S3_ENDPOINT_URL"},
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        }
        res = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    assert res.returncode == 0, res.stderr
    assert "s3://my-bucket/snaps/quickstart: ok" in res.stdout
    doc = json.loads(res.stdout[res.stdout.index("{") :])
    assert doc["records"] == 2 * 30  # bench's default: 2 epochs
    shards = int(res.stdout.split(" records in ")[1].split(" shards")[0])  # create's summary
    assert shards > 1
    assert doc["cache"]["fills"] == shards  # every shard downloaded once, over 2 epochs
    assert len(list(cache.glob("*.arrow"))) == shards
