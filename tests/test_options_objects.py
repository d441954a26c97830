"""The options objects check every option when they are made: a bad value is an OptionError
naming the option, before anything is opened or started; good values pass unchanged."""

from __future__ import annotations

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
    with pytest.raises(snap.OptionError, match="ray-address"):
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
