"""Paths taken as the names they are: ``::`` in a path or URL, ``~`` in an option, a link to
nothing as OUTPUT, a path near PATH_MAX; and the files a live writer is writing, which gc
keeps.

fsspec's ``url_to_fs`` read ``::`` as URL chaining: ``snap create ... snaps/exp::v2`` wrote
(with ``--overwrite``: replaced) ``snaps/exp``, and an input ``raw/a::b.bin`` was looked for
as ``raw/a``."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest

import snapshot_cli as snap
from snapshot_cli import storage
from snapshot_cli.errors import OptionError
from snapshot_cli.writers import commit as commit_mod
from snapshot_cli.writers import lease as lease_mod
from tests.commands.conftest import run, run_json
from tests.conftest import snap_subprocess

TAGGED = """
def preprocess(*, tag: str):
    yield {"tag": tag}
"""
READ_INPUT = """
def preprocess(path):
    with open(path) as f:
        yield {"text": f.read()}
"""


def tagged(*, tag: str) -> Iterator[dict[str, Any]]:
    yield {"tag": tag}


def create(spec: str, out: Path | str, *args: str) -> tuple[int, str, str]:
    return run("create", spec, str(out), "--workers", "0", "--quiet", *args)


def tag_of(path: Path | str) -> str:
    return str(snap.open(path).manifest.pipeline["params"]["tag"])


def test_a_double_colon_in_a_local_output_is_part_of_its_name(
    tmp_path: Path, write_pipeline: Callable[..., str]
) -> None:
    spec = write_pipeline(TAGGED)
    exp, v2 = tmp_path / "snaps" / "exp", tmp_path / "snaps" / "exp::v2"
    assert create(spec, exp, "--param", "tag=1")[0] == 0
    # (a worker process resolves OUTPUT again: the same name there)
    code, stdout, stderr = run("create", spec, str(v2), "--param", "tag=2", "--overwrite",
                               "--workers", "1", "--quiet")  # fmt: skip
    assert code == 0, stderr
    assert str(v2) in stdout
    assert tag_of(exp) == "1" and snap.open(exp).version == 1  # not replaced
    assert tag_of(v2) == "2" and (v2 / "manifest.json").is_file()
    assert sorted(p.name for p in (tmp_path / "snaps").iterdir()) == ["exp", "exp::v2"]
    code, stdout, _ = run("gc", str(v2))
    assert code == 0 and stdout.startswith(f"{v2}: ")


def test_an_input_named_with_a_double_colon_is_found_by_name_and_by_glob(
    tmp_path: Path, write_pipeline: Callable[..., str]
) -> None:
    spec = write_pipeline(READ_INPUT)
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "a::b.bin").write_text("ab")
    (raw / "c.bin").write_text("c")
    for pattern, want in ((raw / "a::b.bin", ["ab"]), (raw / "*", ["ab", "c"])):
        out = tmp_path / f"snap{len(want)}"
        code, _, stderr = create(spec, out, "--input", str(pattern))
        assert code == 0, stderr
        assert sorted(t for b in snap.open(out).iter_batches() for t in b["text"]) == want


def test_fsspec_chaining_still_reads_and_a_double_colon_after_it_is_refused(
    memfs: fsspec.AbstractFileSystem,
) -> None:
    snap.create(tagged, "memory://chain/a::b", params={"tag": "x"}, workers=0, progress=False)
    assert tag_of("memory://chain/a::b") == "x" and not memfs.exists("/chain/a")
    snap.create(tagged, "memory://chain/plain", params={"tag": "y"}, workers=0, progress=False)
    cached = snap.open("simplecache::memory://chain/plain")  # read through a local cache
    assert [t for b in cached.iter_batches() for t in b["tag"]] == ["y"]
    with pytest.raises(OptionError, match=r"give 'memory://chain/a::b' without the chain"):
        snap.open("simplecache::memory://chain/a::b")


@pytest.mark.parametrize("cache", ["filecache", "blockcache", "cached"])
@pytest.mark.parametrize("chain", ["{c}::{u}", "simplecache::{c}::{u}"])
def test_fsspecs_caches_that_are_not_safe_for_threads_are_refused(
    snapshot: Path, cache: str, chain: str
) -> None:
    """filecache:: and blockcache:: rewrite one index file on every open: under the loader's
    threads reads failed at random shards ("TypeError: cannot unpack non-iterable bool
    object", a KeyError and a traceback from a destructor; a probe), advised to "check the
    URL and the storage". Refused before any read, with the chain that works."""
    target = f"file://{snapshot}"
    url = chain.format(c=cache, u=target)
    said = f"fsspec's {cache}:: keeps its cache's index in a file that parallel reads overwrite"
    with pytest.raises(OptionError, match=said) as err:
        snap.open(url)
    advised = str(err.value).split("read through ")[1].split(", or give")[0]
    assert advised == f"simplecache::{target}"
    records = snap.open(str(snapshot)).num_records
    assert sum(len(next(iter(b.values()))) for b in snap.open(advised).loader(7)) == records


def test_bench_expands_a_tilde_in_trace(
    snapshot: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    doc = run_json("bench", str(snapshot), "--epochs", "1", "--trace", "~/t.json")
    assert doc["trace"] == str(home / "t.json")
    assert json.loads((home / "t.json").read_text())
    assert not (tmp_path / "~").exists()


def test_an_output_that_is_a_link_to_nothing_is_said_to_be_one(
    tmp_path: Path, write_pipeline: Callable[..., str]
) -> None:
    spec = write_pipeline(TAGGED)
    target = tmp_path / "gone" / "snap"
    for out in (tmp_path / "out", tmp_path / "out" / "inner"):
        (tmp_path / "out").unlink(missing_ok=True)
        (tmp_path / "out").symlink_to(target)
        code, _, stderr = create(spec, out, "--param", "tag=1")
        assert code == 1
        assert f"{tmp_path / 'out'} is a broken link (to {target}, which does not exist)" in stderr
        assert "File exists" not in stderr


def test_an_output_too_long_for_its_files_is_not_called_unfinished(
    tmp_path: Path, write_pipeline: Callable[..., str]
) -> None:
    spec = write_pipeline(TAGGED)
    limit = os.pathconf(tmp_path, "PC_PATH_MAX") - 1  # (the limit counts the NUL)
    parent = tmp_path
    while len(str(parent)) < limit - 300:
        parent = parent / ("d" * 200)
    parent.mkdir(parents=True)
    # OUTPUT and its _runs/ fit; the files a create writes in them do not
    out = parent / ("s" * (limit - 20 - len(str(parent)) - 1))
    assert len(str(out / "_runs")) <= limit
    code, _, stderr = create(spec, out, "--param", "tag=1")
    assert code == 1 and "too long" in stderr
    assert not out.exists()  # (the first lease not written: what the create made goes)
    code, _, stderr = run("inspect", str(out))
    assert code == 1 and "does not exist" in stderr
    assert "unfinished" not in stderr and "resume" not in stderr


def test_gc_keeps_the_files_a_live_writer_is_writing(tmp_path: Path) -> None:
    """A live writer writes its version's task table, then its manifest through a temporary
    file, then commits: gc removed both meanwhile (the version was committed without its
    task table; the commit failed: "its parent directory does not exist")."""
    out = tmp_path / "snap"
    snap.create(tagged, out, params={"tag": "1"}, workers=0, progress=False)
    fs, root = storage.resolve(str(out))
    lease = lease_mod.try_acquire(fs, root)
    assert isinstance(lease, lease_mod.Lease)
    temp = out / f".manifest.json.{uuid.uuid4().hex}.tmp"
    try:
        lease.set_run("abcdef0123")
        rel, _ = commit_mod.write_tasks_table(fs, root, 2, [])  # the next version's
        temp.write_text("{")  # its manifest, being written
        proc = snap_subprocess("gc", str(out), "--retention", "0", "--json")
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)
        assert doc["removed"] == [] and doc["writer"]["run"] == "abcdef0123"
        assert (out / rel).is_file() and temp.is_file()
    finally:
        lease.release()
    # that writer gone before its commit: they are its leftovers, and go
    doc = run_json("gc", str(out), "--retention", "0")
    assert {g["path"] for g in doc["removed"]} == {rel, temp.name}
    assert snap.open(out).version == 1 and run("verify", str(out))[0] == 0


def test_an_input_named_with_a_newline_stays_on_its_line_in_inspect(
    tmp_path: Path, write_pipeline: Callable[..., str]
) -> None:
    """A newline in an input's name split ``snap inspect SHARD``'s inputs row in two."""
    spec = write_pipeline(READ_INPUT)
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "a\nb.bin").write_text("ab")
    (raw / "c\td.bin").write_text("cd")
    out = tmp_path / "snap"
    code, _, stderr = create(spec, out, "--input", str(raw / "*"), "--inputs-per-task", "2")
    assert code == 0, stderr
    shard = out / snap.open(out).shards[0].path
    code, stdout, stderr = run("inspect", str(shard))
    assert code == 0, stderr
    row = next(line for line in stdout.splitlines() if line.startswith("inputs"))
    assert "a\\nb.bin" in row and "c\\td.bin" in row, stdout


@pytest.mark.parametrize("command", ["inspect", "head", "verify", "bench"])
def test_a_memory_url_no_process_wrote_says_memory_is_each_process_s(command: str) -> None:
    """``snap inspect memory://x`` after a script wrote it there said only "does not exist"."""
    code, _, stderr = run(command, f"memory://gone-{command}/snap")
    assert code == 1 and "does not exist" in stderr, stderr
    assert "memory:// is each process's own: one sees only what it wrote itself" in stderr
