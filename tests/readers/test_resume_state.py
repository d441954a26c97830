"""A loader state saved on a snapshot that was written again since is refused, naming the
version that still holds its data; following that advice resumes exactly. It was refused
with two fingerprints and no word of what to do."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli.writers import gc as gc_mod


def records(i: int, offset: int = 0) -> Iterator[dict[str, Any]]:
    for k in range(50):
        yield {"x": np.full(4, 1000 * i + k + offset, np.int64)}


def make(path: Path, offset: int, inputs: int = 8) -> None:
    snap.create(records, path, inputs=list(range(inputs)), params={"offset": offset}, workers=0,
                overwrite=True)  # fmt: skip


@pytest.mark.parametrize("mixed", [False, True], ids=["one snapshot", "a mixture"])
def test_a_state_of_data_since_rewritten_names_the_version_that_has_it(
    tmp_path: Path, mixed: bool
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    make(a, 0)
    make(b, 7)

    def loader(version: int | None = None) -> Any:
        first = snap.open(a, version=version)
        source = snap.mix([first, snap.open(b)]) if mixed else first
        return source.loader(batch_size=16, epochs=2)

    saved = loader()
    it = iter(saved)
    for _ in range(5):
        next(it)
    state = saved.state_dict()
    want = [batch["x"].copy() for batch in it]  # what the rest of the pass holds
    saved.close()

    make(a, 1, inputs=9)  # written again: version 2, other records
    with pytest.raises(snap.OptionError) as err:
        loader().load_state_dict(state)
    message = str(err.value)
    assert f"the state was saved reading other data than {a} (version 2)" in message
    assert (
        f"version 1, kept, has the state's data: resume from snap.open({str(a)!r}, version=1)"
        in message
    )
    assert str(b) not in message  # the other source did not change

    advised = re.search(r"snap\.open\('([^']+)', version=(\d+)\)", message)
    assert advised is not None and advised.group(1) == str(a)
    resumed = loader(version=int(advised.group(2)))
    resumed.load_state_dict(state)
    got = [batch["x"] for batch in resumed]
    assert len(got) == len(want)
    assert all(np.array_equal(g, w) for g, w in zip(got, want, strict=True))

    gc_mod.gc(str(a), retention=0)  # version 1 removed
    with pytest.raises(snap.OptionError, match="no version it keeps has that data"):
        loader().load_state_dict(state)


def test_other_settings_are_still_named_with_both_values(tmp_path: Path) -> None:
    make(tmp_path / "s", 0)
    state = snap.open(tmp_path / "s").loader(batch_size=16).state_dict()
    with pytest.raises(snap.OptionError, match=r"other batch_size: the state's batch_size=16, "):
        snap.open(tmp_path / "s").loader(batch_size=32).load_state_dict(state)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    key=st.sampled_from(["version", "config", "epoch", "batch", "pass_end"]),
    value=st.sampled_from(["missing", None, "1", -1, 1.5, True, [0], {}]),
)
def test_a_malformed_state_is_named_not_a_traceback(tmp_path: Path, key: str, value: Any) -> None:
    """A state edited, truncated or of another tool: an OptionError saying so, where a missing
    'epoch' was a KeyError and a config of None an AttributeError."""
    if not (tmp_path / "s").exists():
        make(tmp_path / "s", 0)
    loader = snap.open(tmp_path / "s").loader(batch_size=16)
    state = loader.state_dict()
    if value == "missing":
        del state[key]
    else:
        state[key] = value
    fine = key == "pass_end" and value is None  # a state before the first pass has none
    if fine:
        loader.load_state_dict(state)
        assert len(next(iter(loader))["x"]) == 16
    else:
        named = "not a snap loader state|saved by a loader with other batch_size"  # config {}
        with pytest.raises(snap.OptionError, match=named) as err:
            loader.load_state_dict(state)
        if value == "missing":  # (a missing pass_end was said to be None, a value it may have)
            assert f"it has no {key!r}" in str(err.value)
        elif key == "version":  # (1.0 was "missing or unknown 'version'", though it was there)
            assert f"'version' is {value!r}, not 1" in str(err.value)
    loader.close()


@pytest.mark.parametrize("api", ["loader", "dataset"])
@pytest.mark.parametrize("skip", [1, 3])
def test_a_state_edited_past_its_passes_end_is_refused(tmp_path: Path, api: str, skip: int) -> None:
    """A state's epoch moved forward by hand (to skip epochs) was loaded, and the next pass
    yielded nothing, silently: a `for epoch in range(...)` loop trained an epoch on no data."""
    make(tmp_path / "s", 0)
    loader = snap.open(tmp_path / "s").loader(batch_size=16)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    assert (state["epoch"], state["pass_end"]) == (0, 1)
    state["epoch"] += skip
    if api == "dataset":
        from snapshot_cli.readers.torch import SnapshotDataset

        target: Any = SnapshotDataset(str(tmp_path / "s"), batch_size=16)
    else:
        target = snap.open(tmp_path / "s").loader(batch_size=16)
    with pytest.raises(snap.OptionError, match=r"past the end of its pass .*set_epoch\(\)"):
        target.load_state_dict(state)
    state["epoch"] -= skip  # the state as state_dict() gave it resumes
    target.load_state_dict(state)
    assert sum(len(b["x"]) for b in (target if api == "loader" else iter(target))) == 400 - 16
    loader.close()


@pytest.mark.parametrize("global_order", [False, True], ids=["per-rank", "global"])
def test_a_state_of_another_snaps_order_says_so(tmp_path: Path, global_order: bool) -> None:
    """A state records the version of how its order is drawn (``order_version``; missing: 1,
    the order of every snap since 2026-11-25); one of another version, or of another ramp of
    windows, named "first_window_rows" only (no loader option): now it says an upgrade of
    snap changed the order and what to do."""
    make(tmp_path / "s", 0)
    s = snap.open(tmp_path / "s")

    def loader() -> Any:
        return s.loader(global_batch_size=16) if global_order else s.loader(batch_size=16)

    first = loader()
    it = iter(first)
    seen = [next(it)["x"][:, 0].tolist() for _ in range(3)]
    state = first.state_dict()
    version = 2 if global_order else 1  # (the global order's fill-up moved on 2026-11-30)
    assert state["config"]["order_version"] == version
    rest = [b["x"][:, 0].tolist() for b in first]
    first.close()
    older = {**state, "config": {k: v for k, v in state["config"].items() if k != "order_version"}}
    again = loader()
    if global_order:  # saved before the fill-up moved: another last window
        with pytest.raises(snap.OptionError, match=r"another version of snap.*set_epoch"):
            again.load_state_dict(older)
    else:
        again.load_state_dict(older)  # saved before order_version existed: the same order
        assert [b["x"][:, 0].tolist() for b in again] == rest and len(seen) == 3
    for changed in ({"order_version": version + 1}, {"first_window_rows": 7}):
        other = {**state, "config": {**state["config"], **changed}}
        with pytest.raises(snap.OptionError, match=r"another version of snap.*set_epoch"):
            loader().load_state_dict(other)


@pytest.mark.parametrize(
    "other",
    [
        {"batch_size": 8},
        {"seed": 3},
        {"shuffle": False},
        {"drop_last": True},
        {"batch_size": 8, "seed": 3},
    ],  # fmt: skip
)
def test_a_state_of_other_settings_names_whose_value_is_whose(
    tmp_path: Path, other: dict[str, Any]
) -> None:
    """It said "other batch_size: {'batch_size': 64} vs {'batch_size': 128}": which was the
    state's, and what to do, was left to guess (a sweeps probe)."""
    make(tmp_path / "s", 0, inputs=2)
    s = snap.open(tmp_path / "s")
    saved: dict[str, Any] = {"batch_size": 16, "seed": 0, "shuffle": True, "drop_last": False}
    first = s.loader(**saved)
    next(iter(first))
    state = first.state_dict()
    mine = {**saved, **other}
    with pytest.raises(snap.OptionError) as caught:
        s.loader(**mine).load_state_dict(state)
    keys = sorted(other)
    theirs = ", ".join(f"{k}={saved[k]!r}" for k in keys)
    here = ", ".join(f"{k}={mine[k]!r}" for k in keys)
    assert str(caught.value) == (
        f"the state was saved by a loader with other {', '.join(keys)}: the state's {theirs}, "
        f"this loader's {here}; make the loader with the state's to resume it exactly, or "
        "start without it"
    )
    resumed = s.loader(**saved)  # (the advice taken: the next batch is the state's)
    resumed.load_state_dict(state)
    again = s.loader(**saved)
    it = iter(again)
    next(it)
    assert np.array_equal(next(iter(resumed))["x"], next(it)["x"])
