"""Every public call that takes a path or URL takes a ``pathlib.Path`` as it takes the str
(``snapshot_cli.writers.gc.gc``, which README and the package's answers name, took only a
str: "'PosixPath' object has no attribute 'partition'")."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import snapshot_cli as snap
from snapshot_cli.readers.torch import SnapshotDataset
from snapshot_cli.readers.verify import verify
from snapshot_cli.writers.gc import gc

As = Callable[[Path], Any]  # the path as given: str(p), or p itself


def records(path: str) -> Any:
    yield {"n": np.int64(len(Path(path).read_bytes()))}


def counts(batches: Any) -> list[int]:
    return sorted(int(v) for b in batches for v in b["n"])


def create(given: As, t: Path, out: str) -> Any:
    return counts(snap.open(snap.create(records, given(t / out), inputs=given(t / "in" / "*.txt"),
                                        workers=0).path).iter_batches())  # fmt: skip


def create_listed(given: As, t: Path, out: str) -> Any:
    files = [given(t / "in" / "0.txt"), given(t / "in" / "2.txt")]
    return snap.create(records, given(t / out), inputs=files, workers=0).num_records


def snapshot(given: As, t: Path, out: str) -> Any:
    return snap.snapshot(
        records, given(t / out), inputs=given(t / "in" / "*.txt"), workers=0
    ).num_records


def cached(cache_dir: Any, t: Path) -> Any:
    """A cache_dir of a local snapshot is checked, then unused, said so with its path."""
    with pytest.warns(UserWarning, match=f"cache_dir='{t}/out-[a-z]+' is not used"):
        loader = snap.open(t / "base").loader(4, epochs=1, cache_dir=cache_dir)
    assert not Path(cache_dir).exists()  # (checked, not made: a bad one fails as on remote)
    return counts(loader)


CALLS: dict[str, Callable[[As, Path, str], Any]] = {
    "create": create,
    "create, a list of inputs": create_listed,
    "snapshot": snapshot,
    "open": lambda given, t, out: snap.open(given(t / "base")).num_records,
    "mix": lambda given, t, out: counts(snap.mix([given(t / "base")] * 2).loader(4, epochs=1)),
    "cache_dir": lambda given, t, out: cached(given(t / out), t),
    "SnapshotDataset": lambda given, t, out: counts(SnapshotDataset(given(t / "base"), 4)),
    "gc": lambda given, t, out: len(gc(given(t / "base"), dry_run=True).garbage),
    "verify": lambda given, t, out: len(verify(snap.open(given(t / "base"))).shards),
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_a_path_is_taken_as_its_str(tmp_path: Path, call: str) -> None:
    (tmp_path / "in").mkdir()
    for i in range(3):
        (tmp_path / "in" / f"{i}.txt").write_text("x" * (i + 1))
    snap.create(records, str(tmp_path / "base"), inputs=str(tmp_path / "in" / "*.txt"), workers=0)
    as_str = CALLS[call](str, tmp_path, "out-str")
    assert CALLS[call](lambda p: p, tmp_path, "out-path") == as_str
    assert as_str not in (None, [], 0) or call == "gc"  # (gc: nothing to remove, either way)


@pytest.mark.parametrize("scheme", ["FILE", "File", "fILE", "MEMORY", "Memory"])
def test_a_url_s_scheme_is_taken_in_any_case(tmp_path: Path, scheme: str) -> None:
    """RFC 3986 schemes are case-insensitive: ``FILE:///data/s`` was "Protocol not known:
    FILE" in every command and ``snap.open``; it is ``file:///data/s``."""
    from snapshot_cli import storage

    where = f"{tmp_path}/s" if scheme.lower() == "file" else f"/case-{scheme}/s"
    snap.create(lambda i: [{"i": i}], f"{scheme.lower()}://{where}", inputs=[1, 2], workers=0)
    s = snap.open(f"{scheme}://{where}")
    assert s.num_records == 2 and sorted(int(i) for b in s.loader(2) for i in b["i"]) == [1, 2]
    assert (
        storage.resolve(f"{scheme}://{where}")[1]
        == storage.resolve(f"{scheme.lower()}://{where}")[1]
    )
    assert verify(s).ok and gc(f"{scheme}://{where}", dry_run=True).garbage == []


@pytest.mark.parametrize("scheme", ["file", "FILE", "local"])
def test_a_file_url_with_two_slashes_names_a_host_and_is_refused(
    tmp_path: Path, scheme: str
) -> None:
    """``file://tmp/x/s`` (two slashes: RFC 8089's ``file://HOST/PATH``) was ``tmp/x/s`` in
    the working directory: ``snap create`` wrote a snapshot there without a word and
    ``snap inspect`` said the path did not exist (a CLI probe). A host is refused saying
    how to write the path; ``localhost`` is this machine."""
    from snapshot_cli import storage
    from snapshot_cli.errors import OptionError

    snap.create(lambda i: [{"i": i}], str(tmp_path / "s"), inputs=[1], workers=0)
    rest = str(tmp_path).lstrip("/")
    two = f"{scheme}://{rest}/s"
    an_input = f"{scheme}://{rest}/s/manifest.json"
    for call in (lambda: snap.open(two), lambda: storage.resolve(two),
                 lambda: snap.create(lambda i: [{"i": i}], two + "-new", inputs=[1], workers=0),
                 lambda: snap.create(lambda p: [{"p": p}], str(tmp_path / "t"), inputs=an_input,
                                     workers=0)):  # fmt: skip
        with pytest.raises(OptionError) as caught:
            call()
        said = str(caught.value)
        assert f"names the host {rest.split('/')[0]!r}" in said and f"file:///{rest}/s" in said
    assert not (Path.cwd() / rest).exists()  # (nothing written in the working directory)
    assert snap.open(f"{scheme}://localhost/{rest}/s").num_records == 1
    assert snap.open(f"{scheme}:///{rest}/s").num_records == 1
