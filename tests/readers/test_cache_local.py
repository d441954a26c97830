"""``cache_dir`` keeps the shards fetched from remote storage; a local snapshot is read in
place. Given for one, it made the directory and did nothing, without a word (two probes: a
sweep's and a shell user's). It now says so, once per call site, in Python and in
``snap bench``; a mixture with a remote snapshot uses it."""

from __future__ import annotations

import uuid
import warnings
from pathlib import Path

import pytest

import snapshot_cli as snap
from tests.conftest import snap_subprocess


def make(url: str) -> str:
    snap.create(lambda i: [{"x": i}], url, inputs=range(4), workers=0)
    return url


def test_a_local_snapshot_says_its_cache_dir_is_not_used(tmp_path: Path) -> None:
    local = make(str(tmp_path / "s"))
    with pytest.warns(UserWarning) as caught:
        loader = snap.open(local).loader(2, cache_dir=str(tmp_path / "c"))
    (warning,) = caught
    assert str(warning.message) == (
        f"cache_dir={str(tmp_path / 'c')!r} is not used: {local} is on this machine's disk and "
        "is read in place (a cache keeps the shards fetched from remote storage, gs://, s3://, "
        "hdfs://...); leave it out"
    )
    assert warning.filename == __file__  # (the user's line)
    assert sorted(int(x) for b in loader for x in b["x"]) == [0, 1, 2, 3]
    assert not (tmp_path / "c").exists()  # (it was made, with its .locks, and never used)
    done = snap_subprocess("bench", local, "--epochs", "1", "--cache-dir", str(tmp_path / "c"))
    assert done.returncode == 0 and done.stdout, done.stderr
    said = f"snap: warning: --cache-dir {tmp_path / 'c'} is not used: {local} is on this"
    assert done.stderr.startswith(said) and done.stderr.count("\n") == 1, done.stderr
    assert not (tmp_path / "c").exists()


def test_an_unused_cache_dir_that_could_not_be_made_is_refused_all_the_same(
    tmp_path: Path,
) -> None:
    """Checked without being made: a sweep's setting fails alike on local and remote data."""
    local = make(str(tmp_path / "s"))
    (tmp_path / "afile").write_text("x")
    for given in (tmp_path / "afile", tmp_path / "afile" / "deeper"):
        with pytest.raises(snap.OptionError, match=r"cannot use cache_dir .*afile"):
            snap.open(local).loader(2, cache_dir=str(given))
    (tmp_path / "fine" / "deeper").mkdir(parents=True)
    with pytest.warns(UserWarning, match="is not used"):
        snap.open(local).loader(2, cache_dir=str(tmp_path / "fine" / "deeper" / "c"))
    assert list((tmp_path / "fine" / "deeper").iterdir()) == []


def test_a_mixture_with_a_remote_snapshot_uses_it_without_a_word(tmp_path: Path) -> None:
    local = make(str(tmp_path / "s"))
    remote = make(f"memory://cache-local-{uuid.uuid4().hex}/s")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (any warning fails)
        loader = snap.mix([local, remote]).loader(2, cache_dir=str(tmp_path / "c"), seed=1)
        got = sorted(int(x) for b in loader for x in b["x"])
    assert len(got) == 8 and set(got) == {0, 1, 2, 3}
    entries = [p for p in (tmp_path / "c").iterdir() if p.name != ".locks"]
    assert len(entries) == len(snap.open(remote).shards)  # (the remote one's shards, cached)
