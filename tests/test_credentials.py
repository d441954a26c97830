"""A GCS token that gcsfs cannot load, whatever is wrong with it, is an OptionError naming the
token and where it came from (see snapshot_cli/credentials.py): a damaged key file was
"unexpected KeyError: 'refresh_token' (a bug in snap)", a file that is not JSON "Expecting
value: line 1 column 1 (char 0)", and a token naming no file went to Google in a URL.

gcsfs loads a token file as the client is made, before any request: these run against the
real gcsfs, with nothing to answer (no request may be needed to refuse them).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import fsspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from snapshot_cli import storage
from snapshot_cli.errors import OptionError
from tests.conftest import REPO

pytest.importorskip("gcsfs", reason="the gcs extra is part of the test extras")

FIELDS = ["type", "client_id", "client_secret", "refresh_token", "client_email", "token_uri",
          "private_key", "private_key_id", "project_id", "audience",
          "credential_source"]  # fmt: skip
ADVICE = (
    "give a service-account or authorized-user key file (JSON) as the token, or no token for "
    "the machine's own credentials (gcloud auth application-default login, "
    "GOOGLE_APPLICATION_CREDENTIALS)"
)
TYPES = ["service_account", "authorized_user", "external_account", "impersonated_service_account"]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=3),
    max_leaves=6,
)  # fmt: skip
key_like = st.fixed_dictionaries(
    {}, optional={f: st.sampled_from(TYPES) if f == "type" else json_values for f in FIELDS}
)
damaged = st.one_of(
    st.binary(max_size=64),  # not JSON, or not UTF-8
    json_values.map(lambda v: json.dumps(v).encode()),  # JSON, not a key
    key_like.map(lambda v: json.dumps(v).encode()),  # a key with fields missing or wrong
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(content=damaged)
def test_any_damaged_key_file_is_named_never_a_bug(tmp_path: Path, content: bytes) -> None:
    key = tmp_path / "key.json"
    key.write_bytes(content)
    try:
        storage.resolve("gs://bucket/snap", {"token": str(key), "skip_instance_cache": True})
    except OptionError as err:
        said = str(err)
        assert said.startswith("cannot open gs://bucket/snap: the storage client could not "
                               f"load the token {key} (storage_options): "), said  # fmt: skip
        assert said.endswith(f"; {ADVICE}"), said
    # (or the client was made: a key well-formed enough is for Google to judge)


@pytest.mark.parametrize("token", ["~/no-such-key.json", "/nonexistent/key.json", "keys/k.json"])
def test_a_token_that_names_no_file_is_refused_before_any_client(
    token: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(fsspec.config.conf, "gcs", {"token": token})  # FSSPEC_GCS_TOKEN
    with pytest.raises(OptionError) as caught:
        storage.resolve("gs://bucket/snap", {"skip_instance_cache": True})
    assert str(caught.value).startswith(
        f"cannot open gs://bucket/snap: the token (FSSPEC_GCS_TOKEN) names no file: {token}; "
    )


def test_a_directory_as_the_token_is_named(tmp_path: Path) -> None:
    with pytest.raises(OptionError, match=rf"could not load the token {tmp_path} \(storage_"
                       r"options\): IsADirectoryError"):  # fmt: skip
        storage.resolve("gs://bucket/snap", {"token": str(tmp_path), "skip_instance_cache": True})


def test_the_cli_says_it_in_one_line(tmp_path: Path) -> None:
    key = tmp_path / "key.json"
    key.write_text(json.dumps({"type": "authorized_user", "client_id": "x"}))
    env = {**os.environ, "FSSPEC_GCS_TOKEN": str(key)}
    done = subprocess.run([sys.executable, "-m", "snapshot_cli", "inspect", "gs://bucket/snap"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
                          check=False)  # fmt: skip
    assert done.returncode != 0
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(
        "snap: error: cannot open gs://bucket/snap: the storage client could not load the "
        f"token {key} (FSSPEC_GCS_TOKEN): MalformedError: Service account info was not in the "
        "expected format, missing fields "
    ), lines
    assert lines[0].endswith(f"; KeyError: 'refresh_token'; {ADVICE}"), lines
