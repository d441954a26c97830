"""OUTPUT's files somewhere else than OUTPUT: a ``shards/`` (``_runs/``, ``_versions/``,
``manifest.json``) linked to a bigger disk, and an OUTPUT moved or deleted while a create
writes it.

Before, ``snap create`` wrote through such a link and reported success (or "up to date", or
committed a grow) for a snapshot every reader refuses ("is a link to ..., outside the
snapshot"); now it refuses the link before any work, by the readers' own rule. And a create
whose OUTPUT was moved (``mv out elsewhere/``) went on: its heartbeat wrote the lease file
again at the old path, every remaining task was computed into a freshly made ``out/``, and
the commit failed with "its parent directory does not exist"; now the heartbeat notices its
lease file gone, the create stops, says OUTPUT was moved or deleted, leaves nothing at the
old path, and the moved copy resumes where it stopped. Locally and on the GCS emulator.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import snapshot_cli as snap
from snapshot_cli import storage
from snapshot_cli.errors import LeaseError
from snapshot_cli.writers import lease as lease_mod
from tests.backends.conftest import Backend, backend, gcs_server  # noqa: F401
from tests.commands.conftest import run
from tests.conftest import REPO, wait_for

PIPE = """
    def preprocess(path):
        yield {"name": path.rsplit("/", 1)[-1]}
"""


def inputs(tmp_path: Path, n: int) -> str:
    (tmp_path / "in").mkdir(exist_ok=True)
    for i in range(n):
        (tmp_path / "in" / f"{i:02d}.txt").write_text(str(i))
    return str(tmp_path / "in" / "*.txt")


def create(spec: str, out: Path, glob: str) -> tuple[int, str, str]:
    return run("create", spec, str(out), "--input", glob, "--workers", "0", "--quiet")


def refused_as_a_link(ran: tuple[int, str, str], link: Path, target: Path) -> None:
    """One line, no traceback: the link, where it leads, the readers' rule, what to do."""
    code, _, stderr = ran
    assert code == 1, stderr
    assert stderr.count("\n") == 1 and "Traceback" not in stderr, stderr
    assert f"{link} is a link to {target.resolve()}, outside the snapshot" in stderr, stderr
    assert "make OUTPUT itself the link" in stderr and "(cp -rL)" in stderr, stderr
    assert "nothing was written" in stderr, stderr


@pytest.mark.parametrize("name", ["shards", "_runs", "_versions"])
def test_a_first_create_refuses_a_directory_linked_out_of_output(
    tmp_path: Path, write_pipeline: Callable[..., str], name: str
) -> None:
    """The README's case: ``shards/`` on a bigger disk. Before: "created", rc 0, and
    ``snap head`` refused every shard."""
    spec, glob = write_pipeline(PIPE), inputs(tmp_path, 5)
    bigdisk, out = tmp_path / "bigdisk" / name, tmp_path / "out"
    bigdisk.mkdir(parents=True)
    out.mkdir()
    (out / name).symlink_to(Path("..") / "bigdisk" / name)
    refused_as_a_link(create(spec, out, glob), out / name, bigdisk)
    assert sorted(p.name for p in out.iterdir()) == [name]
    assert list(bigdisk.iterdir()) == []  # nothing was written through it


@pytest.mark.parametrize("name", ["shards", "_runs", "_versions", "manifest.json"])
def test_an_up_to_date_check_and_a_grow_refuse_what_became_a_link_out_of_output(
    tmp_path: Path, write_pipeline: Callable[..., str], name: str
) -> None:
    """A snapshot whose ``shards/`` was moved to another disk and linked back: before, the
    same create said "up to date" and a grow committed version 2, neither readable."""
    spec, glob = write_pipeline(PIPE), inputs(tmp_path, 3)
    out, bigdisk = tmp_path / "out", tmp_path / "bigdisk"
    assert create(spec, out, glob)[0] == 0
    bigdisk.mkdir()
    (out / name).rename(bigdisk / name)
    (out / name).symlink_to(bigdisk / name)
    refused_as_a_link(create(spec, out, glob), out / name, bigdisk / name)  # up to date
    grown = inputs(tmp_path, 4)
    refused_as_a_link(create(spec, out, grown), out / name, bigdisk / name)  # a grow
    kept = bigdisk / "_versions" if name == "_versions" else out / "_versions"
    assert sorted(p.name for p in kept.iterdir()) == ["v00000001.json", "v00000001.tasks.json"]


def test_links_that_stay_inside_the_snapshot_and_output_itself_as_a_link_are_written(
    tmp_path: Path, write_pipeline: Callable[..., str]
) -> None:
    """What the error advises works, and a link inside OUTPUT is the readers' too."""
    spec, glob = write_pipeline(PIPE), inputs(tmp_path, 3)
    (tmp_path / "bigdisk" / "snap").mkdir(parents=True)
    out = tmp_path / "out"
    out.symlink_to(tmp_path / "bigdisk" / "snap")  # the whole OUTPUT on the other disk
    (out / ".kept").mkdir()
    (out / "shards").symlink_to(".kept")  # a link that stays inside
    assert create(spec, out, glob)[0] == 0
    code, stdout, stderr = run("head", str(out), "-n", "3", "--json")
    assert code == 0, stderr
    assert sorted(r["name"] for r in json.loads(stdout)["records"]) == [
        "00.txt",
        "01.txt",
        "02.txt",
    ]
    assert len(list((tmp_path / "bigdisk" / "snap" / ".kept").iterdir())) == 3


# --- OUTPUT moved or deleted while a create writes it ---------------------------------------

GATED = """
    import os
    import time

    def preprocess(path, *, gate: str, first: int):
        i = int(open(path).read())
        deadline = time.monotonic() + 120
        while i >= first and not os.path.exists(gate):  # the test opens it
            if time.monotonic() > deadline:
                raise TimeoutError(gate)
            time.sleep(0.02)
        yield {"i": i}
"""


def test_the_command_stops_when_output_is_moved_and_the_moved_copy_resumes(
    tmp_path: Path, write_pipeline: Callable[..., str]
) -> None:
    """The tester's commands, with worker processes and the default heartbeat (5 s): tasks
    4 and on wait for a gate the test opens once the create said it noticed the move."""
    spec, glob = write_pipeline(GATED), inputs(tmp_path, 12)
    out, moved, gate = tmp_path / "out", tmp_path / "moved" / "out", tmp_path / "gate"
    moved.parent.mkdir()
    args = ["create", spec, str(out), "--input", glob, "--inputs-per-task", "1", "--workers",
            "2", "--param", f"gate={gate}", "--param", "first=4", "--quiet"]  # fmt: skip
    command = [sys.executable, "-m", "snapshot_cli", *args]
    env = dict(os.environ, PYTHONUNBUFFERED="1")

    def said() -> str:
        return (tmp_path / "err.txt").read_text()

    with open(tmp_path / "err.txt", "w") as err:
        proc = subprocess.Popen(command, cwd=REPO, env=env, stderr=err, start_new_session=True)
    try:
        wait_for(lambda: len(list(out.glob("_runs/*/tasks/*.json"))) == 4, "4 tasks done")
        out.rename(moved)
        wait_for(lambda: "is gone" in said(), "the heartbeat to notice", timeout=30)
        assert not out.exists()  # the heartbeat did not write its lease there again
        gate.touch()  # the two waiting tasks write at the old path, and the create stops
        assert proc.wait(timeout=120) == 1, said()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = said()
    assert "Traceback" not in text, text
    assert f"error: {out} was moved or deleted while this create ran" in text, text
    assert "run the same create with the new OUTPUT" in text and "committed nothing" in text
    assert not out.exists()  # what the stopped tasks wrote there was removed
    resumed = subprocess.run([sys.executable, "-m", "snapshot_cli",
                              *[str(moved) if a == str(out) else a for a in args], "--json"],
                             cwd=REPO, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    info = json.loads(resumed.stdout)
    assert info["tasks_resumed"] == 4 and info["num_records"] == 12, info
    ids = [int(i) for b in snap.open(str(moved)).loader(4, shuffle=False) for i in b["i"]]
    assert sorted(ids) == list(range(12))
    assert not out.exists()


# In-process creates (workers=0) on local disk and the GCS emulator: at input AT the
# pipeline says so (the file CONTROL/at) and waits for CONTROL/acted, which a thread of the
# test makes after it moved OUTPUT (or deleted its lease file) and, where it says, saw the
# heartbeat (lease_ttl 0.6: every 0.1 s) notice and stop. The task then ends, writing at the
# old path. (Files, not globals: what the pipeline's code reaches counts in its fingerprint.)
AT, TTL, INPUTS = 3, 0.6, list(range(8))


def preprocess(i: int, *, control: str) -> Iterator[dict[str, Any]]:
    if i == AT:
        Path(control, "at").touch()
        deadline = time.monotonic() + 60
        while not Path(control, "acted").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    yield {"i": np.int64(i)}


BEFORE: set[threading.Thread] = set()  # the threads before the create: not its heartbeat


def heartbeat_stopped() -> None:
    def beating() -> bool:  # (a lease another test of this process left is not the create's)
        return any(
            t.name.startswith("snap-lease-") and t not in BEFORE for t in threading.enumerate()
        )

    wait_for(lambda: not beating(), "the heartbeat to notice", timeout=20)


@contextlib.contextmanager
def acting(control: Path, act: Callable[[], None]) -> Iterator[None]:
    """Run ``act`` once the pipeline reaches input AT; its failure fails the test."""
    control.mkdir(exist_ok=True)
    failed: list[BaseException] = []
    BEFORE.clear()
    BEFORE.update(threading.enumerate())

    def run_act() -> None:
        try:
            wait_for(lambda: (control / "at").exists(), f"input {AT}")
            act()
        except BaseException as err:
            failed.append(err)
        finally:
            (control / "acted").touch()

    thread = threading.Thread(target=run_act, name="test-act", daemon=True)
    thread.start()
    try:
        yield
    finally:
        thread.join(timeout=120)
    if failed:
        raise failed[0]


def make(url: str, control: Path, ttl: float = TTL) -> snap.CreateInfo:
    return snap.create(preprocess, url, inputs=INPUTS, params={"control": str(control)},
                       workers=0, inputs_per_task=1, lease_ttl=ttl)  # fmt: skip


@pytest.mark.parametrize("backend", ["local", "gcs"], indirect=True)
def test_a_create_whose_output_is_moved_stops_and_the_moved_copy_resumes(
    backend: Backend,  # noqa: F811
    tmp_path: Path,
) -> None:
    url, to, control = backend.url("out"), backend.url("moved"), tmp_path / "control"
    fs, old = backend.fs, backend.path(url)

    def move() -> None:
        fs.mv(old, backend.path(to), recursive=True)
        backend.refresh()
        heartbeat_stopped()

    with pytest.raises(LeaseError) as raised, acting(control, move):  # (a failed act: said)
        make(url, control)
    said = str(raised.value)
    assert said.startswith(f"{url} was moved or deleted while this create ran"), said
    assert "run the same create with the new OUTPUT" in said, said
    backend.refresh()
    assert not fs.exists(old) or fs.find(old) == []  # task 3's shard and result removed
    info = make(to, control)
    assert (info.tasks_resumed, info.num_records) == (AT, 8)
    ids = [int(i) for b in snap.open(to).loader(4, shuffle=False) for i in b["i"]]
    assert sorted(ids) == INPUTS


@pytest.mark.parametrize("backend", ["local", "gcs"], indirect=True)
def test_a_create_whose_lease_file_is_deleted_stops_and_resumes_where_it_is(
    backend: Backend,  # noqa: F811
    tmp_path: Path,
) -> None:
    url, control = backend.url("out"), tmp_path / "control"
    fs, runs = backend.fs, backend.path(url) + "/_runs"

    def delete_lease() -> None:
        (lease,) = [p for p in fs.ls(runs, detail=False) if "/lease-" in p]
        fs.rm(lease)
        backend.refresh()
        heartbeat_stopped()

    with (
        pytest.raises(LeaseError) as raised,
        acting(control, delete_lease),
    ):  # (a failed act: its error)
        make(url, control)
    said = str(raised.value)
    assert "writer lease" in said and "was deleted while it ran" in said, said
    assert "run the same command to resume it" in said, said
    backend.refresh()
    assert not [p for p in fs.ls(runs, detail=False) if "/lease-" in p]  # not written again
    info = make(url, control)  # its run is left as it was
    assert (info.tasks_resumed, info.num_records) == (AT, 8)


def test_a_write_that_fails_because_output_went_away_is_said_as_that(tmp_path: Path) -> None:
    """Moved between a write's making of its directory and its rename (a race of the
    heartbeat's period), a task's write failed first: "cannot create ... broken link" or
    "its parent directory does not exist" was the error. Here OUTPUT is moved and a link to
    nothing put in its place, so the next write fails at once, before any heartbeat."""
    out, moved, control = tmp_path / "out", tmp_path / "moved", tmp_path / "control"

    def move() -> None:
        out.rename(moved)
        out.symlink_to(tmp_path / "nowhere")

    with pytest.raises(LeaseError) as raised, acting(control, move):  # (a failed act: said)
        make(str(out), control, ttl=lease_mod.DEFAULT_TTL)  # (no heartbeat meanwhile)
    assert str(raised.value).startswith(f"{out} was moved or deleted while this create ran")
    assert "broken link" in str(raised.value.__cause__)  # the failed write, as its cause
    assert out.is_symlink() and not (tmp_path / "nowhere").exists()  # nothing made there
    out.unlink()
    assert make(str(moved), control).tasks_resumed == AT


@pytest.mark.parametrize("backend", ["local", "gcs"], indirect=True)
def test_the_heartbeat_writes_no_lease_where_output_was(backend: Backend) -> None:  # noqa: F811
    """One heartbeat, driven here: the lease file gone with OUTPUT is not written again."""
    fs, root = storage.resolve(backend.url("out"))
    held = lease_mod.try_acquire(fs, root, ttl=600)  # (its own heartbeat: every 100 s)
    assert isinstance(held, lease_mod.Lease)
    try:
        path = f"{root}/_runs/lease-{held.epoch:08d}.json"
        assert held.beat() and fs.exists(path)
        fs.rm(backend.path(backend.url("out")), recursive=True)
        backend.refresh()
        assert held.beat() is False
        backend.refresh()
        assert not fs.exists(path)
        with pytest.raises(LeaseError, match="was moved or deleted while this create ran"):
            held.stop_if_lost()
    finally:
        held.release()
    backend.refresh()
    assert not fs.exists(path)  # nor marked released there
