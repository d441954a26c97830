"""An endpoint nothing answers at is said with the setting that chose it (see
snapshot_cli/endpoints.py): the client's message named the address, not where it came from."""

from __future__ import annotations

import os
import subprocess
import sys

import fsspec
import pytest

from snapshot_cli.endpoints import endpoint_source
from tests.conftest import REPO

URL = "http://127.0.0.1:9"


@pytest.mark.parametrize("protocol", ["s3", "s3a", "gs", "gcs"])
def test_each_source_of_the_endpoint_is_named(
    protocol: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    variable = "STORAGE_EMULATOR_HOST" if protocol in ("gs", "gcs") else "AWS_ENDPOINT_URL"
    for name in ("s3", "s3a", "gs", "gcs"):
        monkeypatch.setitem(fsspec.config.conf, name, {})
    assert endpoint_source(protocol, {}, {}) == ""  # (the storage's own address)
    assert (
        endpoint_source(protocol, {}, {variable: URL}) == f" (the endpoint {URL}, from {variable})"
    )
    given = f" (the endpoint {URL}, from storage_options)"
    assert endpoint_source(protocol, {"endpoint_url": URL}, {}) == given
    assert endpoint_source(protocol, {"client_kwargs": {"endpoint_url": URL}}, {}) == given
    for name in ("s3", "s3a") if protocol.startswith("s3") else ("gs", "gcs"):
        monkeypatch.setitem(fsspec.config.conf, name, {"endpoint_url": URL})
        said = f" (the endpoint {URL}, from FSSPEC_{name.upper()}_ENDPOINT_URL)"
        # fsspec puts its configuration in the client's options: the same value is its
        assert endpoint_source(protocol, {"endpoint_url": URL}, {variable: "x"}) == said
        monkeypatch.setitem(fsspec.config.conf, name, {})
    assert endpoint_source("file", {"endpoint_url": URL}, {}) == ""


def test_the_cli_names_the_variable_that_set_an_endpoint_nothing_answers_at() -> None:
    url = "http://no-such-host.invalid:9000"  # (a name that resolves nowhere: no retries)
    env = {**os.environ, "FSSPEC_S3_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": "x",
           "AWS_SECRET_ACCESS_KEY": "y"}  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "snapshot_cli", "inspect", "s3://b/x"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
                          check=False)  # fmt: skip
    assert done.returncode == 1
    last = done.stderr.splitlines()[-1]
    assert last.startswith("snap: error: "), done.stderr
    assert last.endswith(f"(the endpoint {url}, from FSSPEC_S3_ENDPOINT_URL)"), last


@pytest.mark.parametrize("variable", ["FSSPEC_S3_ENDPOINT_URL", "AWS_ENDPOINT_URL"])
def test_an_endpoint_without_its_scheme_is_said_so_with_its_setting(variable: str) -> None:
    """``FSSPEC_S3_ENDPOINT_URL=127.0.0.1:9000`` said botocore's "ValueError: Invalid
    endpoint" and "check the URL and the storage", not what was wrong, nor where it was set
    (a probe). No server is needed: the client refuses it before any request."""
    env = {**os.environ, variable: "127.0.0.1:9", "AWS_ACCESS_KEY_ID": "x",
           "AWS_SECRET_ACCESS_KEY": "y", "AWS_DEFAULT_REGION": "us-east-1"}  # fmt: skip
    if variable != "FSSPEC_S3_ENDPOINT_URL":  # (one the suite's environment may hold)
        env.pop("FSSPEC_S3_ENDPOINT_URL", None)
    done = subprocess.run([sys.executable, "-m", "snapshot_cli", "inspect", "s3://b/x"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
                          check=False)  # fmt: skip
    assert done.returncode == 1, done.stderr
    last = done.stderr.splitlines()[-1]
    assert last.endswith(
        "an endpoint is a URL with its scheme, http://host:port (the endpoint 127.0.0.1:9, "
        f"from {variable})"
    ), last
