"""Snapshots whose names hold glob characters or ``#``, on the stores whose fsspec clients read
more than a name in a path: gc, the lease's release and the cleanup after a create remove
exact files only.

gcsfs's, s3fs's and the in-memory store's ``rm`` expand ``*``, ``?`` and ``[..]``: gc of
``gs://b/v/a?c`` deleted ``gs://b/v/abc``'s old versions, gc of ``st*ar`` every shard of its
copy ``st-backup-ar``, and gc of ``b[1]`` said it removed five files and removed none (each
create left its lease and run there). gcsfs read ``gs://b/v/h#1`` as generation 1 of the object
``h``: gc said the snapshot did not exist."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

import snapshot_cli as snap
from snapshot_cli import storage
from tests.backends.conftest import Backend
from tests.commands.conftest import run

# a snapshot's name, and a sibling's that the name read as a pattern matches (or, for "#",
# the object gcsfs took it for)
NAMES = [("a?c", "abc"), ("st*ar", "st-backup-ar"), ("b[1]", "b1"), ("h#1", "h")]
STORES = ["gcs", "s3", "memory"]
DEAD_RUN = "deadbeef00"


def tagged(*, tag: str) -> Iterator[dict[str, Any]]:
    yield {"tag": tag}


def files(backend: Backend, url: str) -> set[str]:
    """Every file under the snapshot at ``url``, relative to it, as the store lists them."""
    backend.refresh()
    root = storage.resolve(url)[1]  # (as snap reads the name: Backend.path chains at "::")
    return {p[len(root) + 1 :] for p in backend.fs.find(root)}


def make(backend: Backend, url: str, versions: int) -> None:
    for tag in range(versions):
        snap.create(tagged, url, params={"tag": str(tag)}, overwrite=True, workers=0,
                    progress=False)  # fmt: skip


def writer_state(backend: Backend, url: str) -> set[str]:
    """What ``_runs/`` holds once writers are done: the last one's (released) lease only, no
    run's state and no earlier lease."""
    state = {f for f in files(backend, url) if f.startswith("_runs/")}
    assert len(state) == 1 and next(iter(state)).startswith("_runs/lease-"), state
    return state


def current_files(backend: Backend, url: str) -> set[str]:
    """What a snapshot holds once only its current version is kept: its manifest, its copy
    and task table, its shards and its last writer's lease."""
    s = snap.open(url)
    v = s.version
    return {"manifest.json", f"_versions/v{v:08d}.json", f"_versions/v{v:08d}.tasks.json",
            *(e.path for e in s.shards), *writer_state(backend, url)}  # fmt: skip


@pytest.mark.parametrize("backend", STORES, indirect=True)
@pytest.mark.parametrize(("name", "sibling"), NAMES, ids=[n for n, _ in NAMES])
def test_gc_of_an_awkward_name_removes_its_old_versions_only(
    backend: Backend, name: str, sibling: str
) -> None:
    other, url = backend.url(sibling), backend.url(name)
    make(backend, other, 2)
    make(backend, url, 3)
    writer_state(backend, url)  # (the creates left no run's state, no earlier lease)
    writer_state(backend, other)
    for root in (url, other):  # a dead run's state in both (gc removes a directory there)
        for rel in (f"_runs/{DEAD_RUN}/run.json", f"_runs/{DEAD_RUN}/tasks/00000.json"):
            backend.fs.pipe_file(storage.resolve(f"{root}/{rel}")[1], b"{}")
    others_before = files(backend, other)
    before = files(backend, url)
    assert len({f for f in before if f.startswith("shards/")}) == 3

    code, stdout, stderr = run("gc", url, "--retention", "0", "--json")
    assert code == 0, stderr
    removed = {g["path"] for g in json.loads(stdout)["removed"]}
    after = files(backend, url)
    assert after == current_files(backend, url)
    # every removal reported is real, and no other (but the lease gc's own replaced): a run
    # is reported as its directory
    gone = {f for f in before - after if not f.startswith("_runs/lease-")}
    assert removed == {"/".join(f.split("/")[:2]) if f.startswith("_runs/") else f for f in gone}
    assert f"_runs/{DEAD_RUN}" in removed
    assert {f for f in removed if f.startswith("_versions/")} == {
        f"_versions/v{v:08d}{kind}.json" for v in (1, 2) for kind in ("", ".tasks")
    }
    assert run("verify", url)[0] == 0

    # the sibling the name matches as a pattern keeps every file, and both its versions
    assert files(backend, other) == others_before
    assert [v["version"] for v in snap.open(other).versions()] == [1, 2]
    code, _, stderr = run("verify", other)
    assert code == 0, stderr
    code, stdout, _ = run("gc", url)
    assert code == 0 and stdout.strip().endswith("nothing to remove")


@pytest.mark.parametrize("backend", STORES, indirect=True)
def test_a_double_colon_in_a_url_is_part_of_the_name(backend: Backend) -> None:
    """fsspec's chaining read ``gs://b/snaps/a::b`` as ``gs://b/snaps/a``: written there."""
    url = backend.url("a::b")
    snap.create(tagged, url, params={"tag": "x"}, workers=0, progress=False)
    assert "manifest.json" in files(backend, url)
    assert not backend.fs.exists(storage.resolve(backend.url("a"))[1])
    assert snap.open(url).manifest.pipeline["params"]["tag"] == "x"
    code, stdout, stderr = run("gc", url)
    assert code == 0 and stdout.strip() == f"{url}: nothing to remove", stderr
