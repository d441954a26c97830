"""What ``inputs=`` accepts (paths, globs, JSON items) and how inputs are identified (a cheap
stat first, contents only when the stat changed)."""

from __future__ import annotations

import datetime
import functools
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli.cli import cli
from snapshot_cli.writers import importing, input_identity
from snapshot_cli.writers import inputs as inputs_mod
from snapshot_cli.writers import items as items_mod

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                max_size=3),
    max_leaves=8,
)  # fmt: skip
not_json = st.sampled_from(
    [object(), {1, 2}, float("nan"), float("inf"), b"raw", datetime.date(2026, 1, 1), 1j,
     Path("a.txt"), [1, {2}], {"k": object()}]
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(first=st.integers(), rest=st.lists(json_values, max_size=6))
def test_a_list_of_json_items_is_taken_as_it_is(first: int, rest: list[Any]) -> None:
    values = [first, *rest]
    got = inputs_mod.resolve(values, None, None)
    assert got.files is None and got.items == json.loads(json.dumps(values))
    assert got.sizes == [0] * len(values)
    assert got.content_identities() == got.items


@settings(max_examples=200, deadline=None)
@given(
    items=st.lists(st.integers() | st.text(max_size=4), min_size=1, max_size=6),
    bad=not_json,
    data=st.data(),
)
def test_the_element_that_is_not_json_is_named(items: list[Any], bad: Any, data: Any) -> None:
    at = data.draw(st.integers(0, len(items)))
    values = [*items[:at], bad, *items[at:]]
    if all(isinstance(v, (str, os.PathLike)) for v in values):
        return  # a list of paths: globs, checked against the filesystem instead
    with pytest.raises(snap.OptionError, match=rf"inputs\[{at}\] "):
        inputs_mod.resolve(values, None, None)


def test_numpy_values_become_items() -> None:
    assert inputs_mod.resolve(np.arange(3), None, None).items == [0, 1, 2]
    assert inputs_mod.resolve([np.float32(0.5), np.int64(2)], None, None).items == [0.5, 2]
    assert inputs_mod.resolve((i * i for i in range(3)), None, None).items == [0, 1, 4]


_NUMPY_TYPES = [np.int8, np.int32, np.int64, np.uint16, np.float32, np.float64, np.bool_]


def _as_numpy(value: Any, draw: Any) -> Any:
    """``value`` with some of its numbers made numpy scalars or arrays, at any depth."""
    if isinstance(value, bool) or (isinstance(value, int) and abs(value) < 100):
        kind = draw(st.sampled_from([None, *_NUMPY_TYPES]))
        if kind is None or (kind is np.bool_) != isinstance(value, bool):
            return value
        if kind is np.uint16 and value < 0:
            return value
        return kind(value)
    if isinstance(value, list):
        converted = [_as_numpy(v, draw) for v in value]
        plain = all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        if value and plain and draw(st.booleans()):
            return np.array(value)  # a list of ints as an array
        return converted
    if isinstance(value, dict):
        return {k: _as_numpy(v, draw) for k, v in value.items()}
    return value


@settings(max_examples=200, deadline=None)
@given(values=st.lists(json_values, min_size=1, max_size=5), data=st.data())
def test_numpy_values_at_any_depth_are_their_python_values(values: list[Any], data: Any) -> None:
    """`[{"id": i} for i in np.arange(n)]` was refused ("Object of type int64 is not JSON
    serializable") while `list(np.arange(n))` was taken."""
    given_values = [1, *(_as_numpy(v, data.draw) for v in values)]
    got = inputs_mod.resolve(given_values, None, None).items
    assert got == json.loads(json.dumps([1, *values]))


@pytest.mark.parametrize("kind", ["pandas", "polars", "pyarrow"])
def test_a_table_given_as_inputs_is_told_how_to_give_its_rows(kind: str) -> None:
    """Iterated, a DataFrame gives its column names, which were taken as file patterns
    ("--input 'path' matched no files")."""
    import pandas as pd
    import polars as pl
    import pyarrow as pa

    columns = {"path": ["a.jpg", "b.jpg"], "label": [0, 1]}
    table = {"pandas": pd.DataFrame, "polars": pl.DataFrame, "pyarrow": pa.table}[kind](columns)
    with pytest.raises(snap.OptionError, match=r"inputs is a \w+ \(a table\): give its rows"):
        inputs_mod.resolve(table, None, None)
    with pytest.raises(snap.OptionError, match=r"returned is a \w+ \(a table\)"):
        inputs_mod.resolve(None, lambda: table, None)
    rows = {"pandas": lambda t: t.to_dict("records"), "polars": lambda t: t.to_dicts(),
            "pyarrow": lambda t: t.to_pylist()}[kind](table)  # fmt: skip
    assert inputs_mod.resolve(rows, None, None).items == [
        {"path": "a.jpg", "label": 0},
        {"path": "b.jpg", "label": 1},
    ]


@pytest.mark.parametrize(
    ("given", "told"),
    [
        (["user_001", "user_002"], True),  # ids: items, not files
        (["https://example.invalid/a/1.jpg", "https://example.invalid/a/2.jpg"], True),
        ("user_001", True),
        ("data/*.jgp", False),  # a glob with a typo: nothing about items
        ("data/missing.jpg", False),
        (["data/a.jpg", "data/b.jpg"], False),  # a file of a list is missing
    ],
)
def test_strings_that_match_no_file_are_told_about_items(
    given: Any, told: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A list of strings is read as paths and globs; ids or URLs meant as items matched no
    file and the error said only that: it says how to give them as items."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.jpg").write_bytes(b"1")
    with pytest.raises(snap.OptionError, match="matched no files") as caught:
        inputs_mod.resolve(given, None, None)
    assert ("inputs_from=lambda: [...]" in str(caught.value)) is told, str(caught.value)
    if told:
        items = given if isinstance(given, list) else [given]
        assert inputs_mod.resolve(None, lambda: items, None).items == items


@pytest.mark.parametrize(
    ("pattern", "said"),
    [
        ("dta/npy/*.npy", "dta/ does not exist here, in {cwd}; did you mean 'data/'?"),
        ("data/np/*.npy", "data/np/ does not exist here, in {cwd}; did you mean 'data/npy/'?"),
        ("data/npy/a.npy/*.npy", "data/npy/a.npy/ is not a directory here, in {cwd})"),
        ("zzz/q/*.npy", "zzz/ does not exist here, in {cwd})"),
        ("{cwd}/dta/npy/*.npy", "{cwd}/dta/ does not exist; did you mean '{cwd}/data/'?"),
        ("data/npy/*.npz", None),  # (the directory is there: the files are missing)
        ("d*/zz/*.npy", None),  # (past a wildcard: not one directory)
        ("data/npy/b.npy", None),
        ("~/*.npy", None),  # (the home directory is there: "~/ does not exist" it said)
        ("~/no-such-dir-of-snap/*.npy", "/no-such-dir-of-snap/ does not exist)"),
    ],
)
def test_a_pattern_through_a_missing_directory_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pattern: str, said: str | None
) -> None:
    """``--input 'dta/npy/*.npy'`` said only "matched no files": a newcomer's typo in a
    directory, told which part is missing and the one meant (a probe)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data" / "npy").mkdir(parents=True)
    (tmp_path / "data" / "npy" / "a.npy").write_bytes(b"1")
    with pytest.raises(snap.OptionError, match="matched no files") as caught:
        inputs_mod.resolve(pattern.format(cwd=tmp_path), None, None)
    message = str(caught.value)
    if said is None:
        assert "does not exist" not in message and "not a directory" not in message, message
    else:
        assert said.format(cwd=tmp_path) in message, message


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ([], "empty list"),
        (5, "got a int"),
        ({"a": 1}, "got a dict"),
        (b"raw/*.jpg", "got a bytes"),
    ],
)
def test_what_is_not_inputs(inputs: Any, message: str) -> None:
    with pytest.raises(snap.OptionError, match=message):
        inputs_mod.resolve(inputs, None, None)


def test_inputs_from_must_return_items(tmp_path: Path) -> None:
    with pytest.raises(snap.OptionError, match="returned no items"):
        snap.create(lambda x: iter([{"x": x}]), str(tmp_path / "s"), inputs_from=list, workers=0)
    with pytest.raises(snap.OptionError, match="returned a value of type int"):
        snap.create(lambda x: iter([{"x": x}]), str(tmp_path / "s"), inputs_from=lambda: 3,
                    workers=0)  # fmt: skip
    with pytest.raises(snap.OptionError, match=r"item 1 .* returned is a set"):
        snap.create(lambda x: iter([{"x": x}]), str(tmp_path / "s"),
                    inputs_from=lambda: [1, {2}], workers=0)  # fmt: skip


def test_inputs_from_that_needs_arguments_is_told_with_its_signature(
    tmp_path: Path,
    write_pipeline,  # type: ignore[no-untyped-def]
) -> None:
    """The pipeline given as --inputs-from by mistake was called, and its TypeError shown
    under an empty traceback; it is refused before the call, with its signature."""
    spec = write_pipeline("def preprocess(i, scale=1):\n    yield {'x': i * scale}\n")
    calls: list[int] = []

    def needs(k: int) -> list[int]:
        calls.append(k)
        return [k]

    local = "test_inputs_from_that_needs_arguments_is_told_with_its_signature.<locals>.needs"
    cases = [
        (spec, spec, "preprocess(i, scale=1)", "i"),
        (needs, local, "needs(k: 'int') -> 'list[int]'", "k"),
    ]
    for inputs_from, name, signature, missing in cases:
        with pytest.raises(snap.OptionError) as err:
            snap.create(spec, tmp_path / "s", inputs_from=inputs_from, workers=0)
        assert str(err.value) == (
            f"inputs_from={name!r} is called with no arguments and returns the list of "
            f"inputs, but {signature} cannot be (missing a required argument: '{missing}'); "
            "give a function such as `def items(): return [...]`"
        )
    assert calls == [] and not (tmp_path / "s").exists()
    # what may be called with no arguments is called: defaults, *args, **kwargs
    for fine in (lambda k=3: [k], lambda *a: [3], lambda **kw: [3]):
        assert snap.create(spec, tmp_path / "s", inputs_from=fine, workers=0).num_records == 1


def test_an_error_with_no_frame_of_yours_is_shown_without_an_empty_traceback(
    tmp_path: Path,
) -> None:
    def f(i: int) -> Any:
        yield {"x": i}

    with pytest.raises(snap.PipelineLoadError) as err:
        snap.create(f, tmp_path / "s", inputs_from=functools.partial(int, "x"), workers=0)
    assert str(err.value).endswith(
        "raised:\nValueError: invalid literal for int() with base 10: 'x'"
    ), str(err.value)
    assert "Traceback" not in str(err.value)


def test_items_reach_the_function_in_worker_processes(tmp_path: Path) -> None:
    def preprocess(item: Any) -> Any:
        yield {"n": item["n"], "name": item["name"]}

    items = [{"n": i, "name": f"item-{i}"} for i in range(5)]
    info = snap.create(preprocess, str(tmp_path / "s"), inputs=items, workers=2)
    rows = sorted(
        (int(n), str(name))
        for b in snap.open(str(tmp_path / "s")).loader(2)
        for n, name in zip(b["n"], b["name"], strict=True)
    )
    assert info.num_records == 5 and rows == [(i, f"item-{i}") for i in range(5)]
    assert snap.create(preprocess, str(tmp_path / "s"), inputs=items, workers=2).reused
    fewer = snap.create(preprocess, str(tmp_path / "s"), inputs=items[:4], workers=2)
    assert (fewer.version, fewer.inputs_removed, fewer.num_records) == (2, 1, 4)
    assert fewer.tasks_reused == 4  # one item per task here: the other four are kept


# --- identity: stat first, contents when the stat changed --------------------------------------


@snap.ragged("x")
def read_bytes_pipeline(path: str) -> Any:
    yield {"x": np.frombuffer(Path(path).read_bytes(), np.uint8).copy()}


@pytest.fixture
def files(tmp_path: Path) -> Path:
    """Six inputs last written a minute ago (a file written within RACY_S of a create is
    identified by its bytes: see the racy test below)."""
    d = tmp_path / "raw"
    d.mkdir()
    stamp = time.time() - 60
    for i in range(6):
        (d / f"{i}.bin").write_bytes(bytes([i]) * (100 + i))
        os.utime(d / f"{i}.bin", (stamp, stamp))
    return d


def later(path: Path) -> None:
    """Give ``path`` a new mtime, as rewriting it with the same bytes does."""
    stamp = time.time() + 100
    os.utime(path, (stamp, stamp))


def test_a_new_mtime_with_the_same_bytes_keeps_the_snapshot(
    files: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out, glob = str(tmp_path / "s"), str(files / "*.bin")
    first = snap.create(read_bytes_pipeline, out, inputs=glob, workers=0)
    caplog.clear()  # (the first create's own reading, if an earlier CLI test set INFO)
    with caplog.at_level("INFO", "snapshot_cli"):
        assert snap.create(read_bytes_pipeline, out, inputs=glob, workers=0).reused
    assert "to identify their contents" not in caplog.text  # the stat matched: nothing read
    for f in files.iterdir():
        f.write_bytes(f.read_bytes())  # rewritten, byte-identical
        later(f)
    caplog.clear()
    with caplog.at_level("INFO", "snapshot_cli"):
        again = snap.create(read_bytes_pipeline, out, inputs=glob, workers=0)
    assert again.reused and again.fingerprint == first.fingerprint
    assert "read 6 input files" in caplog.text  # the stat differed: contents compared


def test_a_file_written_again_within_its_mtime_tick_is_detected(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A filesystem with coarse times (FAT keeps 2 s, exFAT and HFS+ 1 s) leaves a file
    written twice within one tick with one mtime: its size and mtime then vouched for the old
    bytes, and an exFAT drive replayed them. A file listed within RACY_S of its mtime is read
    until its mtime is older."""
    raw = tmp_path / "raw"
    raw.mkdir()
    target = raw / "a.bin"
    target.write_bytes(b"\x01" * 16)
    written = target.stat()
    out, glob = str(tmp_path / "s"), str(raw / "*.bin")
    assert [f.version for f in inputs_mod.expand_inputs([glob])] == [""]  # racy: no version
    snap.create(read_bytes_pipeline, out, inputs=glob, workers=0)
    target.write_bytes(b"\x02" * 16)
    os.utime(target, ns=(written.st_atime_ns, written.st_mtime_ns))  # as a coarse clock
    info = snap.create(read_bytes_pipeline, out, inputs=glob, workers=0)
    assert not info.reused and info.inputs_changed == 1
    assert next(iter(snap.open(out).loader(1)))["x"][0].tolist() == [2] * 16
    caplog.clear()
    with caplog.at_level("INFO", "snapshot_cli"):  # recorded racy: read again, and the same
        assert snap.create(read_bytes_pipeline, out, inputs=glob, workers=0).reused
    assert "read 1 input file" in caplog.text
    old = time.time() - input_identity.RACY_S - 1
    os.utime(target, (old, old))  # once its mtime is older, it is a version again
    st = target.stat()
    expected = f"mtime={old} ino={st.st_ino} ctime={st.st_ctime}"
    assert [f.version for f in inputs_mod.expand_inputs([glob])] == [expected]


@pytest.mark.parametrize(
    ("value", "racy"),
    [(0.0, True), (-1.0, True), (-10.0, False), (10.0, True), ("ms", True), ("ms-old", False),
     ("datetime", True), ("text", False)],
)  # fmt: skip
def test_every_form_of_a_time_version_is_read(value: Any, racy: bool) -> None:
    """Seconds (local disk, HDFS), milliseconds (WebHDFS) and datetimes (memory://) are
    times to compare; a time after the listing (another host's clock) is racy too; a form
    not known is trusted, as before."""
    now = 1_800_000_000.0
    when = datetime.datetime.fromtimestamp(now - 1, datetime.timezone.utc)
    forms = {"ms": now * 1000 - 500, "ms-old": (now - 60) * 1000, "text": "2027-01-01",
             "datetime": when}  # fmt: skip
    stamp = forms.get(value, now + value if isinstance(value, float) else value)
    for key in ("mtime", "modificationTime", "created"):
        assert input_identity._racy({key: stamp}, f"{key}={stamp}", now) is racy
    assert not input_identity._racy({"generation": 5, "mtime": now}, "generation=5", now)


@pytest.mark.parametrize("change", ["same size", "other size", "renamed", "added", "removed"])
def test_a_changed_input_is_detected(files: Path, tmp_path: Path, change: str) -> None:
    out, glob = str(tmp_path / "s"), str(files / "*.bin")
    snap.create(read_bytes_pipeline, out, inputs=glob, workers=0)
    target = files / "3.bin"
    if change == "same size":
        target.write_bytes(b"\xff" * target.stat().st_size)
        later(target)
    elif change == "other size":
        target.write_bytes(b"\x03" * 7)
    elif change == "renamed":
        target.rename(files / "3b.bin")
    elif change == "added":
        (files / "9.bin").write_bytes(b"new")
    else:
        target.unlink()
    info = snap.create(read_bytes_pipeline, out, inputs=glob, workers=0)
    assert not info.reused and info.version == 2  # detected: a new version
    changed = {"same size": (0, 0, 1), "other size": (0, 0, 1), "renamed": (1, 1, 0),
               "added": (1, 0, 0), "removed": (0, 1, 0)}[change]  # fmt: skip
    assert (info.inputs_added, info.inputs_removed, info.inputs_changed) == changed
    assert info.tasks - info.tasks_reused <= 2  # only the tasks of what changed ran


def test_an_interrupted_run_resumes_after_its_inputs_were_touched(
    files: Path, tmp_path: Path
) -> None:
    out, glob = str(tmp_path / "s"), str(files / "*.bin")
    fail = tmp_path / "fail"
    fail.write_text("")

    @snap.ragged("x")
    def flaky(path: str) -> Any:
        if path.endswith("5.bin") and fail.exists():
            raise ValueError("not today")
        yield {"x": np.frombuffer(Path(path).read_bytes(), np.uint8).copy()}

    with pytest.raises(snap.PipelineError, match="not today"):
        snap.create(flaky, out, inputs=glob, workers=0, inputs_per_task=1)
    for f in files.iterdir():
        later(f)
    fail.unlink()
    info = snap.create(flaky, out, inputs=glob, workers=0, inputs_per_task=1)
    assert info.tasks_resumed == 5 and info.num_records == 6


def _sizes(path: Any) -> Any:
    import fsspec

    with fsspec.open(path, "rb") as f:
        yield {"n": len(f.read())}


@pytest.mark.parametrize("where", ["local", "local via ..", "memory"])
def test_the_snapshots_own_files_are_never_its_inputs(tmp_path: Path, where: str) -> None:
    # OUTPUT under the inputs' glob: from the second run on, the glob also matched the
    # snapshot's manifest and shards, which became inputs of a new version (3 -> 10 records).
    # With OUTPUT given as "x/../data/snap" it still did: inputs' paths were normalised and
    # OUTPUT's were not.
    root = str(tmp_path / "data") if where != "memory" else f"memory://own-{os.getpid()}/data"
    import fsspec

    fs, base = fsspec.core.url_to_fs(root)
    fs.makedirs(base, exist_ok=True)
    for i in range(3):
        fs.pipe(f"{base}/{i}.txt", b"x" * (i + 1))
    out, glob = f"{root}/snap", f"{root}/**"
    if where == "local via ..":
        (tmp_path / "x").mkdir()
        out = str(tmp_path / "x" / ".." / "data" / "snap")
        assert snap.create(_sizes, out, inputs=glob, workers=0).path == f"{root}/snap"
    first = snap.create(_sizes, out, inputs=glob, workers=0)
    again = snap.create(_sizes, out, inputs=glob, workers=0)
    assert (first.num_records, again.num_records, again.reused) == (3, 3, True)
    assert again.version == 1
    s = snap.open(out)
    assert sorted(b["n"].tolist() for b in s.iter_batches()) == [[1], [2], [3]]
    with pytest.raises(snap.OptionError, match=r"only files under OUTPUT .*no input may be"):
        snap.create(_sizes, out, inputs=f"{out}/*", workers=0, overwrite=True)
    # OUTPUT the inputs' own directory: that it is no snapshot is the answer (it said the
    # inputs "matched only files of the snapshot being written")
    with pytest.raises(snap.SnapshotExistsError, match=r"exists and is not a snapshot \(it holds"):
        snap.create(_sizes, root, inputs=f"{root}/*.txt", workers=0)


@pytest.mark.parametrize("where", ["local", "memory"])
def test_another_snapshots_files_under_a_glob_are_no_inputs(
    tmp_path: Path, where: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``data/**`` over a directory that also holds a snapshot (``data/old``) took its
    shards, leases and manifests as inputs: a generic pipeline snapshotted them, and each
    create of the old snapshot (a new lease) made the next create here a new version."""
    import fsspec

    root = str(tmp_path / "data") if where == "local" else f"memory://others-{os.getpid()}/data"
    fs, base = fsspec.core.url_to_fs(root)
    fs.makedirs(f"{base}/raw", exist_ok=True)
    for i in range(3):
        fs.pipe(f"{base}/raw/{i}.txt", b"x" * (i + 1))
    old = f"{root}/old"
    snap.create(_sizes, old, inputs=f"{root}/raw/*.txt", workers=0)
    out = str(tmp_path / "new") if where == "local" else f"memory://others-{os.getpid()}/new"
    with caplog.at_level("WARNING", logger="snapshot_cli"):
        first = snap.create(_sizes, out, inputs=f"{root}/**", workers=0)
    assert sorted(b["n"].tolist() for b in snap.open(out).iter_batches()) == [[1], [2], [3]]
    own = fs.find(fs._strip_protocol(old))  # the old snapshot's files: manifest, shards, ...
    assert f"left out {len(own)} files of the snapshot at" in caplog.text
    snap.create(_sizes, old, inputs=f"{root}/raw/[01].txt", workers=0)  # a new version, lease
    again = snap.create(_sizes, out, inputs=f"{root}/**", workers=0)
    assert (first.version, again.version, again.reused) == (1, 1, True)
    # a pattern that names the part takes it (a snapshot made from another's shards)
    shards = snap.create(_sizes, f"{out}-shards", inputs=f"{old}/shards/*.arrow", workers=0)
    assert shards.num_records == len(fs.glob(fs._strip_protocol(f"{old}/shards/*.arrow")))
    with pytest.raises(snap.OptionError, match=r"matched only files of snapshots \(.*old\)"):
        snap.create(_sizes, f"{out}-none", inputs=f"{old}/**", workers=0)


@pytest.mark.parametrize(
    ("returned", "message"),
    [
        ([1, {"a": object()}], r"item 1 of what inputs_from='.*listing' returned is a dict"),
        ([Path("x.txt")], r"item 0 .* is a PosixPath .*pass files with inputs="),
        ([0.5, float("nan")], r"item 1 .* is not finite"),
    ],
)
def test_an_item_a_function_returned_that_is_not_json_is_named(
    returned: list[Any], message: str
) -> None:
    def listing() -> list[Any]:
        return returned

    with pytest.raises(snap.OptionError, match=message):
        inputs_mod.resolve(None, listing, None)


# --- file names of every kind -------------------------------------------------------------------

# What a file system holds that a user did not choose: bytes that are not UTF-8 (old archives),
# glob characters, URL characters, a shell's specials, decomposed Unicode, a newline.
AWKWARD_NAMES = [b"latin1-\xe9t\xe9.bin", b"a[1].bin", b"b*.bin", b"c?.bin", b"d#x.bin",
                 b"e %20&.bin", b"f\\g.bin", b"h{1,2}.bin", b"~i.bin", b"-j.bin",
                 "ke\u0301.bin".encode(), b"l\nm.bin", b"'n\".bin"]  # fmt: skip


@pytest.mark.parametrize("workers", [0, 2])
def test_files_of_any_name_are_inputs(tmp_path: Path, workers: int) -> None:
    raw = os.fsencode(tmp_path / "raw")
    os.mkdir(raw)
    for i, name in enumerate(AWKWARD_NAMES):
        with open(os.path.join(raw, name), "wb") as f:
            f.write(bytes([i]) * (i + 1))
    out = str(tmp_path / "s")
    info = snap.create(read_bytes_pipeline, out, inputs=str(tmp_path / "raw" / "*"),
                       workers=workers)  # fmt: skip
    assert info.num_records == len(AWKWARD_NAMES)
    got = sorted(bytes(b["x"][0]) for b in snap.open(out).loader(1, shuffle=False))
    assert got == sorted(bytes([i]) * (i + 1) for i in range(len(AWKWARD_NAMES)))
    assert snap.create(read_bytes_pipeline, out, inputs=str(tmp_path / "raw" / "*"),
                       workers=workers).reused  # fmt: skip
    # each named exactly, as a shell passes a file: a glob character in a name is that file's
    for i, name in enumerate(AWKWARD_NAMES):
        one = snap.create(read_bytes_pipeline, str(tmp_path / f"one{i}"),
                          inputs=[os.fsdecode(os.path.join(raw, name))], workers=0)  # fmt: skip
        assert one.num_records == 1
        batch = next(iter(snap.open(str(tmp_path / f"one{i}")).loader(1)))
        assert bytes(batch["x"][0]) == bytes([i]) * (i + 1)


def test_a_glob_matching_nothing_is_still_an_error(tmp_path: Path) -> None:
    (tmp_path / "a1.bin").write_bytes(b"x")
    with pytest.raises(snap.OptionError, match=r"'.*a\[2\]\.bin' matched no files"):
        snap.create(read_bytes_pipeline, str(tmp_path / "s"), inputs=str(tmp_path / "a[2].bin"))
    info = snap.create(read_bytes_pipeline, str(tmp_path / "s"), inputs=str(tmp_path / "a[1].bin"))
    assert info.num_records == 1  # the glob matched a1.bin: a glob still globs


# --- what a glob may match on local disk --------------------------------------------------------


def test_a_linked_input_is_its_target(tmp_path: Path) -> None:
    """A local glob lists a symbolic link with the link's own mtime: a file changed behind a
    link (data directories of links: DVC, git-annex, caches) left the snapshot "up to date"
    with the old records."""
    (tmp_path / "store").mkdir()
    (tmp_path / "raw").mkdir()
    target = tmp_path / "store" / "blob"
    target.write_bytes(b"\x01\x02")
    (tmp_path / "raw" / "a.bin").symlink_to(target)
    (tmp_path / "raw" / "more").symlink_to(tmp_path / "store", target_is_directory=True)
    out, glob = str(tmp_path / "s"), str(tmp_path / "raw" / "*")
    assert snap.create(read_bytes_pipeline, out, inputs=glob, workers=0).num_records == 1
    target.write_bytes(b"\x07\x08")  # same size, other bytes, a later mtime
    later(target)
    again = snap.create(read_bytes_pipeline, out, inputs=glob, workers=0)
    assert not again.reused and (again.version, again.inputs_changed) == (2, 1)
    batch = next(iter(snap.open(out).loader(1)))
    assert bytes(batch["x"][0]) == b"\x07\x08"
    old = time.time() - 60  # (a file changed within RACY_S of its listing has no version)
    os.utime(target, (old, old))
    (found,) = inputs_mod.expand_inputs([glob])  # the linked directory is no input
    st = target.stat()  # (the target's: its inode, not the link's)
    assert found.size == 2 and found.version == (
        f"mtime={st.st_mtime} ino={st.st_ino} ctime={st.st_ctime}"
    )


@pytest.mark.parametrize("kind", ["fifo", "socket", "broken link"])
def test_what_is_not_a_readable_file_is_named_not_read(tmp_path: Path, kind: str) -> None:
    """A FIFO in the glob blocked ``snap create`` forever, in the first read of its bytes."""
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "ok.bin").write_bytes(b"x")
    odd = raw / "odd"
    if kind == "fifo":
        os.mkfifo(odd)
    elif kind == "socket":
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(odd))
        server.close()
    else:
        odd.symlink_to(tmp_path / "gone")
    said = "a link to .*gone, which does not exist" if kind == "broken link" else (
        r"which is not a regular file \(a FIFO, socket or device"
    )  # fmt: skip
    with pytest.raises(
        snap.OptionError, match=rf"^inputs='[^']*raw/\*' matched \S*raw/odd, {said}"
    ):
        inputs_mod.expand_inputs([str(raw / "*")])
    with pytest.raises(snap.OptionError, match=said):
        snap.create(read_bytes_pipeline, str(tmp_path / "s"), inputs=str(odd), workers=0)


def test_a_listing_without_versions_vouches_for_nothing(tmp_path: Path) -> None:
    """A store whose listing names no version (mtime, generation, ETag, ...) gave every input
    the version "": the listing then always matched, and no change was ever seen."""
    f = tmp_path / "a.bin"
    f.write_bytes(b"ab")
    unversioned = [inputs_mod.InputFile(str(f), 2, "", "")]
    found = inputs_mod.Inputs([str(f)], [2], {"count": 1}, files=unversioned)
    identity = inputs_mod.Identity("code", {}, found)
    fp, parts = identity.full
    assert not found.versioned
    assert not identity.quick_match(parts, identity.stat)  # the listing proves nothing
    assert identity.same_as(fp, parts, identity.stat)  # the contents, read, still match
    f.write_bytes(b"cd")
    reread = inputs_mod.Inputs([str(f)], [2], {"count": 1}, files=unversioned)
    assert not inputs_mod.Identity("code", {}, reread).same_as(fp, parts, identity.stat)


@pytest.mark.parametrize(
    ("name", "content", "items"),
    [
        ("items.json", '["a", 2, {"k": 3}]', ["a", 2, {"k": 3}]),
        ("items.jsonl", '"a"\n2\n', ["a", 2]),
        ("list.txt", "a\nb c\n", ["a", "b", "c"]),
        ("list.csv", "x,y\n", ["x,y"]),
        ("no_extension", "p q", ["p", "q"]),
        ("memory://lists/items.json", '["m", 1]', ["m", 1]),  # a URL: read through fsspec
    ],
)
def test_a_file_of_inputs_given_to_inputs_from_is_told_how(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    memfs: Any,  # (emptied before and after)
    name: str,
    content: str,
    items: list[Any],
) -> None:
    import re
    import sys

    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    if "://" in name:
        with fsspec.open(name, "w") as f:
            f.write(content)
    else:
        (tmp_path / name).write_text(content)
    (tmp_path / "pipe.py").write_text("def f(item):\n    yield {'item': repr(item)}\n")
    with pytest.raises(snap.PipelineLoadError) as err:
        snap.create("pipe.py:f", str(tmp_path / "s"), inputs_from=name, workers=0)
    said = str(err.value)
    assert said.startswith("inputs_from= takes a function that returns the inputs")
    # what it says to write, written, makes the inputs it was meant to be
    code = re.search(r"put `(.+?)` in items\.py and give inputs_from='items\.py:items'", said)
    assert code is not None, said
    (tmp_path / "items.py").write_text(code.group(1) + "\n")
    sys.modules.pop("items", None)
    monkeypatch.setattr(importing, "_loaded", {})  # (each case's items.py is another)
    snap.create("pipe.py:f", str(tmp_path / "s"), inputs_from="items.py:items", workers=0)
    got = sorted(r["item"] for r in snap.open(str(tmp_path / "s")).head(100))
    assert got == sorted(repr(i) for i in items)


def test_a_set_of_items_is_taken_in_one_order_in_every_process(tmp_path: Path) -> None:
    """A set's order differs between processes (str hashes are salted): a snapshot of one was
    computed again on every run, its records in another order each time."""
    script = tmp_path / "make.py"
    script.write_text(
        "import sys, snapshot_cli as snap\n"
        "def pipe(t):\n"
        "    yield {'n': t[0], 's': t[1]}\n"
        "info = snap.create(pipe, sys.argv[1], inputs={(i, f'name{i}') for i in range(30)},\n"
        "                   workers=0)\n"
        "order = [int(n) for b in snap.open(sys.argv[1]).iter_batches() for n in b['n']]\n"
        "print(info.reused, order)\n"
    )
    runs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        res = subprocess.run([sys.executable, str(script), str(tmp_path / "s")],
                             capture_output=True, text=True, check=False, env=env)  # fmt: skip
        assert res.returncode == 0, res.stderr
        runs.append(res.stdout.split(maxsplit=1))
    assert [reused for reused, _ in runs] == ["False", "True"]
    assert runs[0][1] == runs[1][1]


@given(st.sets(st.one_of(st.integers(), st.text(max_size=5), st.booleans(),
                         st.tuples(st.integers(), st.text(max_size=3))), min_size=1))  # fmt: skip
def test_the_order_of_a_set_is_that_of_its_items_json(items: set[Any]) -> None:
    want = sorted(items_mod.as_items(list(items)), key=lambda v: json.dumps(v, sort_keys=True))
    for given_as in (set(items), frozenset(reversed(list(items)))):
        if all(isinstance(v, str) for v in given_as):
            continue  # paths and globs, sorted by expand_inputs
        assert inputs_mod.resolve(given_as, None, None).items == want
        assert inputs_mod.resolve(None, lambda g=given_as: g, None).items == want


def test_the_inputs_option_is_named_as_the_caller_gave_it(tmp_path: Path) -> None:
    """In Python an error names ``inputs=``, the command's ``--input``: a directory given
    to ``snap.create`` was "--input 'raw' is a directory", a flag no Python caller has."""
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "a.bin").write_bytes(b"1")
    raw, out = str(tmp_path / "raw"), str(tmp_path / "s")
    with pytest.raises(snap.OptionError) as caught:
        snap.create(read_bytes_pipeline, out, inputs=Path(raw), workers=0)
    assert str(caught.value).startswith(f"inputs={raw!r} is a directory; pass a glob such as")
    assert "--input" not in str(caught.value)
    with pytest.raises(snap.OptionError, match=r"no inputs were given \(inputs=, inputs_from=\)"):
        snap.create(read_bytes_pipeline, out, workers=0)
    with pytest.raises(snap.OptionError, match=r"each key of params= is a keyword argument"):
        snap.create(read_bytes_pipeline, out, inputs=raw + "/*", params={"x": 1}, workers=0)

    spec = f"{tmp_path / 'p.py'}:f"
    (tmp_path / "p.py").write_text("def f(path, *, size=1):\n    yield {'n': size}\n")
    said = CliRunner().invoke(cli, ["create", spec, out, "--input", raw, "--workers", "0"])
    assert said.exit_code != 0 and said.output == (
        f"snap: error: --input {raw!r} is a directory; pass a glob such as '{raw}/*' to use "
        "the files in it\n"
    )
    said = CliRunner().invoke(cli, ["create", spec, out, "--workers", "0", "--param", "sise=2"])
    assert "(--input, --inputs-from), and each --param is a keyword argument" in said.output
    assert "inputs=" not in said.output


@pytest.mark.parametrize(
    "given",
    [[b"raw/a.bin"], ["raw/b.bin", b"raw/\xff.bin"], b"raw/*"],
    ids=["one", "mixed", "glob"],
)
def test_a_path_held_as_bytes_is_told_how_to_give_it(given: Any) -> None:
    """``os.listdir(b"raw")`` gives bytes, as does a name kept from a tool that is not text:
    refused, as before, but saying how to give it (it said only "items must be JSON values")."""
    with pytest.raises(snap.OptionError) as caught:
        inputs_mod.resolve(given, None, None)
    said = str(caught.value)
    assert "give os.fsdecode(path)" in said, said
    assert "must be JSON values" not in said


@settings(max_examples=30, deadline=None)
@given(
    name=st.from_regex(r"[a-z]{1,4}\[[0-9a-z]{1,3}\][a-z]{0,3}", fullmatch=True),
    depth=st.integers(0, 2),
)
def test_a_glob_through_a_name_with_brackets_says_how_to_mean_it(name: str, depth: int) -> None:
    """``--input 'br[1]/*.txt'`` over a directory named ``br[1]``: "matched no files", the
    brackets read as a set of characters and no word of it. The error names the part that
    is a name here and the pattern with its ``[`` escaped, which takes the file."""
    import glob as glob_mod
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        inner = Path(tmp, name, *["sub"] * depth)
        inner.mkdir(parents=True)
        (inner / "f.txt").write_text("x")
        pattern = "/".join([tmp, name, *["sub"] * depth, "*.txt"])
        with pytest.raises(snap.OptionError) as caught:
            snap.create(lambda p: [{"p": p}], f"{tmp}/out", inputs=pattern, workers=0)
        said = str(caught.value)
        escaped = "/".join([glob_mod.escape(f"{tmp}/{name}"), *["sub"] * depth, "*.txt"])
        assert f"is a name here: to mean it, write its [ as [[]: {escaped!r})" in said, said
        info = snap.create(lambda p: [{"p": p}], f"{tmp}/out", inputs=escaped, workers=0)
        assert info.num_records == 1


ENDINGS = {  # how an inputs_from function may end without returning its list
    "raises": "def items():\n    raise RuntimeError('no list today')\n",
    "raises once it has yielded": "def items():\n    yield 1\n    raise RuntimeError('midway')\n",
    "exits 0": "import sys\ndef items():\n    sys.exit(0)\n",
    "exits 3": "import sys\ndef items():\n    sys.exit(3)\n",
    "exits once it has yielded": "import sys\ndef items():\n    yield 1\n    sys.exit()\n",
    "parses a command line": (
        "import argparse\ndef items():\n    p = argparse.ArgumentParser()\n"
        "    p.add_argument('--n', required=True)\n    return range(int(p.parse_args().n))\n"
    ),
    "is cancelled": "import asyncio\ndef items():\n    raise asyncio.CancelledError()\n",
}


@pytest.mark.parametrize("ending", sorted(ENDINGS))
def test_an_inputs_function_that_ends_without_its_list_is_named_with_its_traceback(
    tmp_path: Path, ending: str
) -> None:
    """A sys.exit() in it ended `snap create` silently with its code (0: success, and no
    snapshot), and an error a generator raised once it had yielded was called a bug in snap;
    each is now the function's error, with its traceback, as one raised at once was."""
    (tmp_path / "items.py").write_text(ENDINGS[ending])
    (tmp_path / "pipe.py").write_text("def f(x):\n    yield {'x': x}\n")
    with pytest.raises(snap.PipelineLoadError) as err:
        snap.create(
            f"{tmp_path}/pipe.py:f",
            tmp_path / "s",
            inputs_from=f"{tmp_path}/items.py:items",
            workers=0,
        )
    said = str(err.value)
    assert said.startswith(f"inputs_from='{tmp_path}/items.py:items' raised:\nTraceback"), said
    assert f'File "{tmp_path}/items.py", line' in said
    assert ("it exits when called" in said) == ("exit" in ending or "command line" in ending)
    assert not (tmp_path / "s").exists()


def test_an_inputs_function_that_exits_0_fails_the_command(tmp_path: Path) -> None:
    (tmp_path / "items.py").write_text(ENDINGS["exits 0"])
    (tmp_path / "pipe.py").write_text("def f(x):\n    yield {'x': x}\n")
    res = subprocess.run(
        [sys.executable, "-m", "snapshot_cli", "create", "pipe.py:f", "s", "--inputs-from",
         "items.py:items", "--workers", "0", "--json"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert (res.returncode, res.stdout) == (1, "")
    assert res.stderr.startswith("snap: error: --inputs-from 'items.py:items' raised:\n")
    assert "SystemExit: 0" in res.stderr and "return the inputs instead" in res.stderr


@pytest.mark.parametrize("pattern", ["data/*/", "data/**/", "data/s?b/", "data/[s]ub/"])
def test_a_glob_ending_in_a_slash_is_refused_as_matching_directories(
    tmp_path: Path, pattern: str
) -> None:
    """As a shell's and Python's, a glob ending in '/' matches directories only: snap took the
    files the pattern without the slash matched (data/*/ took data/a.bin)."""
    (tmp_path / "data" / "sub").mkdir(parents=True)
    (tmp_path / "data" / "a.bin").write_bytes(b"1")
    (tmp_path / "data" / "sub" / "c.bin").write_bytes(b"2")
    full = f"{tmp_path}/{pattern}"
    with pytest.raises(snap.OptionError) as caught:
        snap.create(read_bytes_pipeline, tmp_path / "s", inputs=full, workers=0)
    assert str(caught.value) == (
        f"inputs={full!r} ends with '/', which makes a glob match directories only, and an "
        f"input is a file: give '{full}*' for the files in them"
    )
    said = CliRunner().invoke(cli, ["create", "p.py:f", str(tmp_path / "s"), "--input", pattern])
    assert said.exit_code == 2 and f"--input {pattern!r} ends with '/'" in said.output
    assert not (tmp_path / "s").exists()
    # what it says to give takes the files in those directories
    made = snap.create(read_bytes_pipeline, tmp_path / "s", inputs=full + "*", workers=0)
    assert made.num_records == (2 if pattern.startswith("data/**") else 1)


def test_a_glob_that_matches_only_empty_directories_says_so(tmp_path: Path) -> None:
    """``empty/**`` matches the directory itself: it was "is a directory; pass a glob such as
    'empty/**/*'", which matches nothing either. A glob of one level that matches only
    directories is told the glob of the files in them."""
    (tmp_path / "empty" / "deeper").mkdir(parents=True)
    with pytest.raises(snap.OptionError) as caught:
        snap.create(read_bytes_pipeline, tmp_path / "s", inputs=f"{tmp_path}/empty/**", workers=0)
    assert str(caught.value).endswith("matched only directories, no file in them: check the "
                                      "path, or that the files are there")  # fmt: skip
    (tmp_path / "empty" / "deeper" / "a.bin").write_bytes(b"1")
    with pytest.raises(snap.OptionError) as caught:
        snap.create(read_bytes_pipeline, tmp_path / "s", inputs=f"{tmp_path}/empty/*", workers=0)
    suggested = f"{tmp_path}/empty/*/*"
    assert str(caught.value).endswith(f"matched only directories; pass a glob such as "
                                      f"'{suggested}' to use the files in them")  # fmt: skip
    assert snap.create(read_bytes_pipeline, tmp_path / "s", inputs=suggested,
                       workers=0).num_records == 1  # fmt: skip


@pytest.mark.parametrize("change", ["swap", "relink", "chmod"])
def test_files_of_one_size_and_mtime_swapped_or_relinked_are_changed_inputs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, change: str
) -> None:
    """Files written in a burst share one mtime to the nanosecond (the kernel's clock ticks
    coarsely). Compared by size and mtime (make's way), two of one size swapped with mv, or a
    link turned from one to the other, were the same inputs: "up to date", with the old
    records. A file's inode and ctime are compared too (git's way); a chmod, which changes
    its ctime and not its bytes, has them read, and the snapshot stays up to date."""
    raw, store = tmp_path / "raw", tmp_path / "store"
    raw.mkdir()
    store.mkdir()
    tick = time.time_ns() - 60 * 10**9
    for name, value in (("a", 1), ("b", 2)):
        (store / name).write_bytes(bytes([value]) * 4)
        os.utime(store / name, ns=(tick, tick))
    if change == "relink":
        (raw / "x.bin").symlink_to(store / "a")
    else:
        for name in "ab":
            os.rename(store / name, raw / f"{name}.bin")
    out, glob = str(tmp_path / "s"), str(raw / "*.bin")
    snap.create(read_bytes_pipeline, out, inputs=glob, workers=0)
    if change == "swap":
        os.rename(raw / "a.bin", raw / "t")
        os.rename(raw / "b.bin", raw / "a.bin")
        os.rename(raw / "t", raw / "b.bin")
    elif change == "relink":
        (raw / "x.bin").unlink()
        (raw / "x.bin").symlink_to(store / "b")
    else:
        os.chmod(raw / "a.bin", 0o600)
    caplog.clear()
    with caplog.at_level("INFO", "snapshot_cli"):
        again = snap.create(read_bytes_pipeline, out, inputs=glob, workers=0)
    values = [int(b["x"][0][0]) for b in snap.open(out).loader(1, shuffle=False)]  # (by name)
    if change == "chmod":
        assert again.reused and "read 1 input file" in caplog.text and values == [1, 2]
    else:
        assert not again.reused and again.inputs_changed == (2 if change == "swap" else 1)
        assert values == ([2, 1] if change == "swap" else [2])


def test_a_snapshot_recorded_before_inodes_is_up_to_date_without_reading_its_inputs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A snapshot written before a local file's version held its inode and ctime recorded
    its mtime alone: every later up-to-date check would read every input again (an
    up-to-date create writes nothing), until a new version. Its files are trusted as they
    were, by size and mtime, until then."""
    raw = tmp_path / "raw"
    raw.mkdir()
    old = time.time() - 60
    for i in range(3):
        (raw / f"{i}.bin").write_bytes(bytes([i]) * 8)
        os.utime(raw / f"{i}.bin", (old, old))
    out, glob = str(tmp_path / "s"), str(raw / "*.bin")
    now = input_identity.identity

    def before(info: dict[str, Any], listed: float) -> tuple[str, str, str]:
        version, content, etag = now(info, listed)
        return input_identity.recorded_before_inodes(version), content, etag  # (as then)

    with monkeypatch.context() as then:
        then.setattr(inputs_mod, "identity", before)
        snap.create(read_bytes_pipeline, out, inputs=glob, workers=0)
    caplog.clear()  # (the first create's "read 3 input files", where INFO is on already)
    with caplog.at_level("INFO", "snapshot_cli"):
        assert snap.create(read_bytes_pipeline, out, inputs=glob, workers=0).reused
    assert "is up to date" in caplog.text and "input file" not in caplog.text
    (raw / "1.bin").write_bytes(b"\x09" * 8)  # (a change is still one: another mtime)
    assert not snap.create(read_bytes_pipeline, out, inputs=glob, workers=0).reused
