"""Every option given a value of the wrong kind (numpy scalars, bools, floats, strings, huge
numbers, nan and inf, containers): a numpy integer is taken as the integer it holds, and
anything else that cannot work is an OptionError (a usage error in the CLI) naming the
option, said before anything is written or started; nothing reaches a TypeError, an
OverflowError or a crash mid-run."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli.cli import cli
from snapshot_cli.readers.options import LoaderOptions, most_processes
from snapshot_cli.readers.trace import Tracer
from snapshot_cli.units import parse_duration, parse_size
from snapshot_cli.writers.options import MAX_LEASE_TTL, CreateOptions

NUMPY_INTS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
NUMPY_FLOATS = [np.float16, np.float32, np.float64]
# values that are no integer count, whatever their type
NOT_COUNTS = st.one_of(
    st.booleans(),
    st.sampled_from([np.bool_(True), np.bool_(False)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.builds(lambda t, x: t(x), st.sampled_from(NUMPY_FLOATS), st.floats(-1e3, 1e3)),
    st.text(max_size=6),
    st.binary(max_size=3),
    st.lists(st.integers(1, 3), max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=1),
)
NOT_MAPPINGS = st.one_of(
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=8),
    st.binary(max_size=3),
    st.lists(st.integers(), max_size=2),
    st.tuples(st.integers()),
    st.sampled_from([np.int64(3), np.float64(2.0), np.uint64(2**63)]),
)


def records(n: int) -> Any:
    yield {"a": n}


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> snap.Snapshot:
    out = str(tmp_path_factory.mktemp("fuzz") / "s")
    snap.create(records, out, inputs=list(range(20)), workers=0)
    return snap.open(out)


# 1, 2, 4: level and the other integer options of create ------------------------------------


@given(value=NOT_COUNTS)
def test_a_level_that_is_no_integer_is_refused_naming_it(value: Any) -> None:
    """``level=True`` and ``level=1.5`` were committed into the manifest as ``"level":
    true`` / ``1.5``, which snap then refused to open; ``"3"`` was a TypeError."""
    with pytest.raises(snap.OptionError, match="level"):
        CreateOptions(level=value)


@given(
    name=st.sampled_from(["workers", "level", "batch_rows", "inputs_per_task"]),
    kind=st.sampled_from(NUMPY_INTS),
    number=st.integers(1, 22),
)
def test_numpy_integers_are_taken_as_the_ints_they_hold(name: str, kind: Any, number: int) -> None:
    """``level=np.int64(3)`` passed the check and failed in json.dumps after the run's files
    were made; ``inputs_per_task=np.int64(2)`` was refused as no integer."""
    options = CreateOptions(**{name: kind(number)})
    assert type(getattr(options, name)) is int and getattr(options, name) == number
    json.dumps(options.write.to_json())  # what the run's and the manifest's JSON hold


@given(
    name=st.sampled_from(["batch_rows", "inputs_per_task", "level", "workers"]), value=NOT_COUNTS
)
def test_a_count_of_create_that_is_no_integer_is_refused_naming_it(name: str, value: Any) -> None:
    """``batch_rows=True`` was taken as 1 and crashed inside the task (np.empty TypeError)
    with a ragged column; ``inputs_per_task="2"`` was a TypeError '<='."""
    with pytest.raises(snap.OptionError, match=name.replace("_", "[_ -]?")):
        CreateOptions(**{name: value})


@pytest.mark.parametrize(
    ("option", "value"),
    [("level", True), ("level", 1.5), ("level", np.float64(2.0)), ("level", "3"),
     ("batch_rows", True), ("inputs_per_task", "2"), ("compression", ["lz4"]),
     ("storage_options", "anon"), ("lease_ttl", float("inf")), ("shard_size", "1" * 400)],
)  # fmt: skip
def test_create_with_a_bad_option_writes_nothing(tmp_path: Path, option: str, value: Any) -> None:
    out = tmp_path / "out"

    @snap.ragged("tok")
    def ragged_records(n: int) -> Any:
        yield {"tok": np.arange(n, dtype=np.int32)}

    with pytest.raises(snap.OptionError, match=option.replace("_", "[_ -]?")):
        snap.create(ragged_records, str(out), inputs=[1, 2, 3], workers=0, **{option: value})
    assert not out.exists()  # no "unfinished snapshot" (_runs/lease-*.json) left behind


@settings(max_examples=30)
@given(
    name=st.sampled_from(["shard_size", "batch_rows", "batch_bytes", "inputs_per_task"]),
    value=st.one_of(st.integers(1, 2**70), st.integers(2**39, 2**41), st.just(2**40)),
)
def test_a_count_of_any_size_is_refused_or_makes_a_snapshot_that_opens(
    tmp_path_factory: pytest.TempPathFactory, name: str, value: int
) -> None:
    """``inputs_per_task=2**40`` was accepted and committed into the manifest's history,
    which every reader then refused (``inspect``, the loader, even ``--overwrite``)."""
    out = str(tmp_path_factory.mktemp("count") / "s")
    try:
        snap.create(records, out, inputs=[1, 2, 3], workers=0, **{name: value})
    except snap.OptionError as err:
        assert name.replace("_", " ") in str(err).replace("_", " ")
        assert not Path(out).exists()
        return
    s = snap.open(out)
    assert s.num_records == 3 and sorted(n for b in s.iter_batches() for n in b["a"]) == [1, 2, 3]
    snap.create(records, out, inputs=[1, 2, 3, 4], workers=0, **{name: value})  # a grow
    assert snap.open(out).num_records == 4


def test_a_numpy_level_makes_a_snapshot_that_opens(tmp_path: Path) -> None:
    out = str(tmp_path / "s")
    info = snap.create(records, out, inputs=[1, 2], workers=0, level=np.int64(3),
                       inputs_per_task=np.int64(1), batch_rows=np.uint16(8))  # fmt: skip
    assert info.num_records == 2 and info.tasks == 2
    assert snap.open(out).manifest.compression == {"codec": "zstd", "level": 3}


# 3: the wrong exception, or the keyword not named -------------------------------------------


@given(value=NOT_MAPPINGS)
def test_storage_options_that_are_no_mapping_are_refused(value: Any) -> None:
    """A str was "TypeError: 'str' object is not a mapping" from fsspec; a falsy one (0, "",
    [], False) was taken as no options at all."""
    with pytest.raises(snap.OptionError, match="storage_options must be a dict"):
        CreateOptions(storage_options=value)


@pytest.mark.parametrize("value", ["anon", 0, "", [], False, 1.5])
def test_open_and_mix_refuse_storage_options_that_are_no_mapping(
    small: snap.Snapshot, value: Any
) -> None:
    with pytest.raises(snap.OptionError, match="storage_options must be a dict"):
        snap.open(small.url, storage_options=value)
    with pytest.raises(snap.OptionError, match="storage_options must be a dict"):
        snap.mix([small, small], storage_options=value)
    assert snap.open(small.url, storage_options={}).num_records == 20  # a dict still works


@pytest.mark.parametrize("value", [["lz4"], [], {}, 4, b"lz4"])
def test_a_compression_that_is_no_name_is_refused(value: Any) -> None:
    with pytest.raises(snap.OptionError, match="compression must be one of"):
        CreateOptions(compression=value)


PIPE = """
def preprocess(n=0):
    yield {"a": n}
"""


def test_inputs_from_is_named_as_the_caller_gave_it(tmp_path: Path, write_pipeline: Any) -> None:
    """``inputs_from=""`` said ``--inputs-from`` to a Python caller (the CLI's flag)."""
    with pytest.raises(snap.PipelineLoadError) as caught:
        snap.create(records, str(tmp_path / "a"), inputs_from="", workers=0)
    assert "inputs_from ''" in str(caught.value) and "--inputs-from" not in str(caught.value)

    def failing() -> list[int]:
        raise KeyError("no items")

    with pytest.raises(snap.PipelineLoadError, match=r"inputs_from='.*failing' raised"):
        snap.create(records, str(tmp_path / "b"), inputs_from=failing, workers=0)
    pipe = write_pipeline(PIPE)
    said = CliRunner().invoke(cli, ["create", pipe, str(tmp_path / "c"), "--inputs-from", ""])
    assert said.exit_code == 2 and "--inputs-from '' must look like" in said.output


def test_an_empty_input_is_named_as_the_caller_gave_it(tmp_path: Path, write_pipeline: Any) -> None:
    """``--input ''`` and ``inputs=[""]`` were "empty path or URL", naming neither."""
    with pytest.raises(snap.OptionError, match=r"inputs='' is an empty path"):
        snap.create(records, str(tmp_path / "a"), inputs=["", "x"], workers=0)
    pipe = write_pipeline(PIPE)
    said = CliRunner().invoke(cli, ["create", pipe, str(tmp_path / "b"), "--input", ""])
    assert said.exit_code == 2 and "--input '' is an empty path" in said.output
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


# 5, 6: the loader's trace and processes ------------------------------------------------------


@given(
    value=st.one_of(
        st.text(max_size=12), st.integers(), st.floats(), st.booleans(), st.binary(max_size=3),
        st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=2), st.none()),
    )
)  # fmt: skip
def test_a_trace_that_is_no_tracer_is_refused_when_the_loader_is_made(
    small: snap.Snapshot, value: Any
) -> None:
    """``trace="trace.json"`` was an AttributeError at the first batch."""
    with pytest.raises(
        snap.OptionError, match=r"trace must be a snapshot_cli.readers.trace.Tracer"
    ):
        small.loader(5, trace=value)


def test_a_tracer_still_records(small: snap.Snapshot) -> None:
    tracer = Tracer()
    assert sum(len(b["a"]) for b in small.loader(5, trace=tracer)) == 20
    assert tracer.events


@given(value=st.one_of(st.integers(most_processes() + 1, 2**70), st.just(2**62)))
def test_more_decode_processes_than_snap_starts_are_refused(value: int) -> None:
    """``processes=2**62`` started interpreters one after another before the first batch."""
    with pytest.raises(snap.OptionError, match=rf"processes={value} is more decode processes"):
        LoaderOptions(processes=value)
    assert LoaderOptions(processes=np.int64(most_processes())).processes == most_processes()


def test_processes_beyond_the_bound_start_nothing(small: snap.Snapshot) -> None:
    from snapshot_cli.readers import procs

    before = 0 if procs._pool is None else len(procs._pool.children)
    with pytest.raises(snap.OptionError, match="at most"):
        small.loader(5, processes=1000)
    assert (0 if procs._pool is None else len(procs._pool.children)) == before
    said = CliRunner().invoke(cli, ["bench", small.url, "--processes", "1000"])
    assert said.exit_code == 2 and "'--processes': 1000 is more decode processes" in said.output


# 7, 8: the CLI's numbers and sizes -----------------------------------------------------------


@pytest.mark.parametrize("value", ["nan", "NaN", "-nan"])
def test_a_step_of_nan_is_a_usage_error(small: snap.Snapshot, value: str) -> None:
    said = CliRunner().invoke(cli, ["bench", small.url, "--epochs", "1", "--step-ms", value])
    assert said.exit_code == 2 and "--step-ms" in said.output and "bug" not in said.output


@given(digits=st.integers(20, 500), unit=st.sampled_from(["", "B", "KiB", "GB", "TiB"]))
def test_a_size_too_large_is_the_usual_error(digits: int, unit: str) -> None:
    """400 digits were an OverflowError traceback from ``int(float(...) * unit)``."""
    text = "1" * digits + unit
    with pytest.raises(ValueError, match="shard_size must be below 8EiB"):
        parse_size(text, "shard_size")
    for name in ("shard_size", "batch_bytes"):
        with pytest.raises(snap.OptionError, match=f"{name} must be below 8EiB"):
            CreateOptions(**{name: text})
    with pytest.raises(snap.OptionError, match="cache_limit must be below 8EiB"):
        LoaderOptions(cache_dir="/tmp/c", cache_limit=text)


@given(value=st.integers(2**63, 2**80))
def test_a_size_as_a_huge_int_is_refused(value: int) -> None:
    with pytest.raises(ValueError, match="below 8EiB"):
        parse_size(value, "shard_size")
    assert parse_size(np.uint64(2**40), "shard_size") == 2**40


@pytest.mark.parametrize("option", ["--shard-size", "--cache-limit"])
def test_a_size_of_400_digits_is_a_usage_error(small: snap.Snapshot, option: str) -> None:
    args = (
        ["create", "x.py:f", small.url + "-new"]
        if option == "--shard-size"
        else ["bench", small.url, "--cache-dir", small.url + "-cache"]
    )
    said = CliRunner().invoke(cli, [*args, option, "1" * 400])
    assert said.exit_code == 2 and "must be below 8EiB" in said.output, said.output


# 9: lease_ttl -------------------------------------------------------------------------------


@given(
    value=st.one_of(
        st.floats(min_value=MAX_LEASE_TTL, exclude_min=True),
        st.integers(int(MAX_LEASE_TTL) + 1, 2**80),
        st.just(float("nan")),
    )
)
def test_a_lease_ttl_beyond_a_week_is_refused(value: float) -> None:
    """``lease_ttl=inf`` (or 1e300) killed the heartbeat thread, and the create reported
    success without a refreshed lease."""
    with pytest.raises(snap.OptionError, match=r"lease_ttl must be .* at most 604800"):
        CreateOptions(lease_ttl=value)
    assert CreateOptions(lease_ttl=np.int64(60)).lease_ttl == 60.0


def test_the_heartbeat_survives_a_lease_of_any_ttl(memfs: Any) -> None:
    from snapshot_cli.writers import lease as lease_mod

    held = lease_mod.try_acquire(memfs, "/ttl", ttl=float("inf"))
    assert isinstance(held, lease_mod.Lease)
    try:
        held._thread.join(0.5)  # (it ended at once: Event.wait(inf / 6) overflowed)
        assert held._thread.is_alive()
    finally:
        held.release()


# 10: the smaller ones ------------------------------------------------------------------------


@pytest.mark.parametrize("names", ["ab", b"ab", 0, 1.5, np.int64(2), True])
def test_mix_names_that_are_no_list_are_refused(small: snap.Snapshot, names: Any) -> None:
    with pytest.raises(snap.OptionError, match="names must be a list of names"):
        snap.mix([small, small], names=names)
    assert snap.mix([small, small], names=("a", "b")).names == ["a", "b"]


@given(names=st.lists(st.one_of(st.text(max_size=3), st.integers(0, 2), st.none()), min_size=2,
                      max_size=2))  # fmt: skip
def test_mix_names_are_non_empty_text_no_two_alike(small: snap.Snapshot, names: Any) -> None:
    """``names=["web", "web"]`` was taken, and renamed ``web#2`` in ``stats()`` only (where a
    source really named so would collide); ``""`` and ``5`` were taken as text."""
    text = all(isinstance(n, str) and n.strip() for n in names)
    if text and names[0] != names[1]:
        assert snap.mix([small, small], names=names).names == names
        return
    said = f"names must differ: {names[0]!r} is given twice" if text else "names must be non-empty"
    with pytest.raises(snap.OptionError, match=re.escape(said)):
        snap.mix([small, small], names=names)


@given(
    value=st.one_of(
        st.integers(), st.floats(), st.booleans(), st.lists(st.integers(), max_size=2),
        st.binary(max_size=2), st.just(""),
    )
)  # fmt: skip
def test_a_cache_dir_that_is_no_path_is_refused_naming_it(small: snap.Snapshot, value: Any) -> None:
    with pytest.raises(snap.OptionError, match="cache_dir must be a local directory"):
        small.loader(5, cache_dir=value)


@pytest.mark.parametrize("column", [0, None, "", 1.5, b"a", ["a", 0]])
def test_ragged_takes_column_names_only(column: Any) -> None:
    """``snap.ragged(0)``, ``(None)``, ``("")`` marked nothing, silently; a list was an
    unhashable TypeError."""
    with pytest.raises(snap.OptionError, match="ragged takes column names"):
        snap.ragged(column)
    with pytest.raises(snap.OptionError, match=r"@snap.ragged\('tokens'\)"):
        snap.ragged(records)  # type: ignore[arg-type]  # (@snap.ragged without the names)


def test_ragged_takes_a_list_of_names(tmp_path: Path) -> None:
    @snap.ragged(["a", "b"])
    def two(n: int) -> Any:
        yield {"a": np.arange(n % 2 + 1), "b": np.zeros((n % 3 + 1, 2), np.float32)}

    assert two.__snap_ragged__ == {"a", "b"}
    out = str(tmp_path / "s")
    snap.create(two, out, inputs=list(range(6)), workers=0, inputs_per_task=1)
    assert snap.open(out).num_records == 6


def test_a_torch_device_beyond_an_index_is_refused_naming_it(small: snap.Snapshot) -> None:
    pytest.importorskip("torch")
    for device in (2**63, 2**70):
        with pytest.raises(snap.OptionError, match=rf"device={device} is not a torch device"):
            small.loader(5).to_torch(device=device)


@pytest.mark.parametrize("trace", ["", " "])
def test_an_empty_trace_path_is_refused(
    small: snap.Snapshot, tmp_path: Path, trace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``snap bench --trace ''`` replayed and wrote nothing, with exit 0."""
    monkeypatch.chdir(tmp_path)
    said = CliRunner().invoke(cli, ["bench", small.url, "--epochs", "1", "--trace", trace])
    assert said.exit_code == 1 and f"--trace {trace!r} names no file" in said.output
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("executor", ["local", "ray"])
def test_an_empty_ray_address_is_a_usage_error(tmp_path: Path, executor: str) -> None:
    """``--ray-address ''`` was exit 1 where any other address without ``--executor ray``
    was exit 2."""
    args = ["create", "x.py:f", str(tmp_path / "o"), "--executor", executor, "--ray-address", ""]
    said = CliRunner().invoke(cli, args)
    assert said.exit_code == 2 and "--ray-address" in said.output, said.output
    with pytest.raises(snap.OptionError, match="ray"):
        CreateOptions(executor=executor, ray_address="")


@pytest.mark.parametrize("value", [None, "", [], "false", 2])
def test_gc_refuses_a_dry_run_that_is_no_bool_and_removes_nothing(
    tmp_path: Path, value: object
) -> None:
    """``dry_run=None`` or ``""`` removed files (falsy), ``"false"`` listed them (truthy)."""
    from snapshot_cli.writers import gc as gc_mod

    out = tmp_path / "s"
    snap.create(records, out, inputs=[1], workers=0)
    snap.create(records, out, inputs=[2], workers=0, overwrite=True)  # version 1's: garbage
    shards = sorted((out / "shards").iterdir())
    with pytest.raises(
        snap.OptionError, match=re.escape(f"dry_run must be True or False, got {value!r}")
    ):
        gc_mod.gc(out, dry_run=value, retention=0)  # type: ignore[arg-type]
    assert sorted((out / "shards").iterdir()) == shards and len(shards) == 2
    assert gc_mod.gc(out, dry_run=False, retention=0).garbage
    assert len(list((out / "shards").iterdir())) == 1


SECONDS = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


@given(
    number=st.decimals(min_value="0.001", max_value="1e6", places=3).map(str),
    unit=st.sampled_from(["", "s", "m", "min", "h", "d", "w", "D", "H", "M", "MIN", "S", "W"]),
)
def test_a_duration_with_no_unit_is_refused_but_zero(number: str, unit: str) -> None:
    """``--retention 10`` was 10 seconds (days were meant: gc removed a week's versions);
    a unit makes it what it says, and 0 (nothing kept) needs none. ``M``, a month to pandas
    and ISO 8601, was a minute (``--retention 1M`` removed versions a minute old): it is
    refused, saying how to give either."""
    text = f"{number}{unit}"
    if unit == "M":
        with pytest.raises(ValueError, match=r"is M a month or a minute\? give months as days"):
            parse_duration(text)
    elif unit:
        assert parse_duration(text) == pytest.approx(float(number) * SECONDS[unit.lower()])
    else:
        with pytest.raises(ValueError, match=rf"'{re.escape(text)}' has no unit: give one"):
            parse_duration(text)
    assert parse_duration("0") == 0 == parse_duration("0.0")
    assert parse_duration(float(number)) == float(number)  # (a number in Python: seconds)


def test_gc_retention_without_a_unit_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["gc", str(tmp_path), "--retention", "10"])
    assert result.exit_code == 2, result.output
    assert "'10' has no unit: give one, as in 10d, 10h, 10m or 10s" in result.output
