"""The options objects check every option when they are made: a bad value is an OptionError
naming the option, before anything is opened or started; good values pass unchanged."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli.readers.options import LoaderOptions
from snapshot_cli.writers.options import CreateOptions

LOADER_BAD: dict[str, list[Any]] = {
    "shuffle": ["false", "no", None, 2, 0.0],
    "drop_last": ["yes", None, -1],
    "verify": ["0", None, [True]],
    "epochs": [0, -1, 1.5, True, "2"],
    "shuffle_buffer": [0, -5, 2.5, "big", True],
    "num_parallel_reads": [0, "many", False],
    "prefetch": [0, -1, "lots"],
    "map": [3, "f"],
    "columns": ["label"],
    "cache_limit": ["50XB", -1],
}
CREATE_BAD: dict[str, list[Any]] = {
    "overwrite": ["false", None, 2],
    "dry_run": ["no", 0.5],
    "wait": ["yes"],
    "progress": [None],
    "workers": [-1, 1.5, True, "2"],
    "executor": ["dask", ""],
    "shard_size": ["huge", 0, "-1MiB"],
    "compression": ["gzip"],
    "level": [0, 23],
    "batch_rows": [0, -3],
    "batch_bytes": ["lots", 0],
    "lease_ttl": [0, -1.0, "30"],
}


@pytest.mark.parametrize(("name", "value"), [(k, v) for k, vs in LOADER_BAD.items() for v in vs])
def test_a_bad_loader_option_names_itself(name: str, value: Any) -> None:
    extra = {"cache_dir": "/tmp/x"} if name == "cache_limit" else {}
    with pytest.raises(snap.OptionError, match=name):
        LoaderOptions(**{name: value}, **extra)


@pytest.mark.parametrize(("name", "value"), [(k, v) for k, vs in CREATE_BAD.items() for v in vs])
def test_a_bad_create_option_names_itself(name: str, value: Any) -> None:
    extra = {"compression": "lz4"} if name == "level" and value == 23 else {}
    with pytest.raises(snap.OptionError, match=name.replace("_", "[_ -]?")):
        CreateOptions(**{name: value}, **extra)


def test_good_values_pass_and_are_normalised() -> None:
    o = LoaderOptions(columns=["a", "b"], cache_dir="/tmp/c", cache_limit="1KiB", prefetch=3,
                      map=lambda batch, rng: batch)  # fmt: skip
    assert o.columns == ("a", "b") and o.cache_bytes == 1024 and o.map_takes_rng
    assert LoaderOptions.count_or_none(o.prefetch) == 3 and o.count_or_none("auto") is None
    c = CreateOptions(shard_size="1MiB", compression="zstd", level=3, workers=0)
    assert c.write.shard_size == 1 << 20 and c.write.compression.effective_level == 3
    assert c.in_process and c.worker_count == 0
    with pytest.raises(snap.OptionError, match="cache_dir"):
        LoaderOptions(cache_limit="1GiB")
    with pytest.raises(snap.OptionError, match="ray_address= applies to executor='ray'"):
        CreateOptions(ray_address="ray://x:1")


FLAGS = [(LoaderOptions, n) for n in ("shuffle", "drop_last", "verify")] + [
    (CreateOptions, n) for n in ("overwrite", "progress", "wait", "dry_run")
]


@given(
    option=st.sampled_from(FLAGS),
    value=st.one_of(
        st.booleans(),
        st.integers(-3, 3),
        st.sampled_from([np.bool_(True), np.bool_(False), np.int64(1), np.uint8(0)]),
        st.text(max_size=5),
        st.floats(allow_nan=False),
        st.none(),
        st.lists(st.booleans(), max_size=2),
    ),
)
def test_an_on_off_option_is_a_bool_or_refused(option: tuple[type, str], value: Any) -> None:
    """A flag is True/False, numpy's bools, or 0/1 (kept as a bool); anything else, a
    string from a config file ("false" is truthy) above all, is refused naming the flag."""
    cls, name = option
    flag_like = isinstance(value, (bool, int, np.bool_, np.integer)) and value in (0, 1)
    if flag_like:
        got = getattr(cls(**{name: value}), name)
        assert type(got) is bool and got == bool(value)
    else:
        with pytest.raises(snap.OptionError, match=f"{name} must be True or False"):
            cls(**{name: value})


@given(n=st.integers(1, 5000), unit=st.sampled_from(["B", "KB", "KiB", "MB", "MiB", "GiB"]))
def test_a_shuffle_buffer_size_is_as_many_records_as_fit(n: int, unit: str) -> None:
    from snapshot_cli.units import parse_size

    size = f"{n}{unit}"
    options = LoaderOptions(shuffle_buffer=size)
    for per_record in (1, 7, 12_289, 2**20, 2**31):
        assert options.shuffle_rows(per_record) == max(1, parse_size(size) // per_record)
    with pytest.raises(snap.OptionError, match=r"give a number of records as an integer"):
        LoaderOptions(shuffle_buffer=str(n))  # a bare number in a string: which was meant?


def test_a_loader_with_a_window_size_replays_as_with_that_count(tmp_path: Any) -> None:
    from click.testing import CliRunner

    from snapshot_cli.cli import cli

    out = str(tmp_path / "s")
    snap.create(lambda: ({"i": i, "x": np.zeros(60, np.uint8)} for i in range(3000)), out,
                workers=0)  # fmt: skip
    s = snap.open(out)
    by_size = s.loader(64, seed=2, shuffle_buffer="16KiB")
    rows = by_size.state_dict()["config"]["window_rows"]
    assert rows == 16 * 1024 // by_size.reading.bytes_per_row() and 10 < rows < 3000
    by_count = s.loader(64, seed=2, shuffle_buffer=rows)
    assert by_count.state_dict() == by_size.state_dict()  # resumable either way
    assert [b["i"].tolist() for b in by_size] == [b["i"].tolist() for b in by_count]
    said = []
    for window in ("16KiB", str(rows)):
        args = ["bench", out, "--shuffle-buffer", window, "--epochs", "1", "--batch-size", "64"]
        ok = CliRunner().invoke(cli, args)
        assert ok.exit_code == 0, ok.output
        said.append(re.search(r"shuffle window [\d.,k]+ records", ok.output).group())  # type: ignore[union-attr]
    assert said[0] == said[1]  # the same window, given as a size or as its count
    bad = CliRunner().invoke(cli, ["bench", out, "--shuffle-buffer", "16XB"])
    assert bad.exit_code == 2 and "Invalid value for '--shuffle-buffer'" in bad.output
