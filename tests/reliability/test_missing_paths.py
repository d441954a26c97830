"""A path that does not exist is said to be one: ``inspect``, ``verify``, ``head``, ``bench``
and ``snap.open`` said "<path> is not a snapshot (no manifest.json)", locally and on remote
storage, where only ``gc`` said "<path> does not exist". A directory without a manifest keeps
its message."""

from __future__ import annotations

from pathlib import Path

import pytest

import snapshot_cli as snap
from tests.backends.conftest import Backend, backend, gcs_server, s3_server  # noqa: F401
from tests.commands.conftest import run

COMMANDS = ["inspect", "verify", "head", "bench", "gc"]


@pytest.mark.parametrize("backend", ["local", "memory", "gcs", "s3"], indirect=True)
def test_a_path_that_does_not_exist_says_so(backend: Backend) -> None:  # noqa: F811
    url = backend.url("no-such-snapshot")
    for command in COMMANDS:
        for extra in ([], ["--json"]):
            code, stdout, stderr = run(command, url, *extra)
            assert code == 1 and stdout == "", (command, stdout)
            # (memory:// is each process's own: a command sees nothing a script wrote)
            own = "; memory:// is each process's own: one sees only what it wrote itself"
            said = f"does not exist: check the path{own if url.startswith('memory') else ''}"
            assert stderr == f"snap: error: {url} {said}\n", stderr
    with pytest.raises(snap.ManifestError) as caught:
        snap.open(url)
    assert str(caught.value) == f"{url} {said}", caught.value


def test_a_bucket_that_does_not_exist_says_so_too(gcs_server: object) -> None:  # noqa: F811
    url = "gs://no-such-bucket-of-snap/snap"
    code, _, stderr = run("inspect", url)
    assert code == 1
    assert stderr.strip() == (
        f"snap: error: {url} does not exist: check the path; the bucket "
        "'no-such-bucket-of-snap' does not exist"
    )


@pytest.mark.parametrize("command", COMMANDS[:4])
def test_a_directory_without_a_manifest_is_still_no_snapshot(tmp_path: Path, command: str) -> None:
    code, _, stderr = run(command, str(tmp_path))
    assert code == 1
    assert stderr == f"snap: error: {tmp_path} is not a snapshot (no manifest.json)\n", stderr


@pytest.mark.parametrize("command", COMMANDS[:4])
def test_a_create_taking_its_first_lease_is_no_snapshot_yet(tmp_path: Path, command: str) -> None:
    """The moment between a first create's ``_runs/`` and its lease in it: snap.open beside
    it said "is not a snapshot", as of any directory."""
    (tmp_path / "_runs").mkdir()
    code, _, stderr = run(command, str(tmp_path))
    said = (
        f"{tmp_path} is not a snapshot yet (no manifest.json, an empty _runs/): a snap create "
        "is starting there, or one failed at once; once a create commits it, it can be read"
    )
    assert code == 1 and stderr == f"snap: error: {said}\n", stderr
    with pytest.raises(snap.ManifestError, match="is not a snapshot yet"):
        snap.open(str(tmp_path))
