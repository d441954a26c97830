"""A loader state resumes on the records it was saved on, in the order it was saved in, and
wherever that order is the same it resumes, whatever the machine.

1. The same records written again in other record batches (``--batch-rows``,
   ``--batch-bytes``, ``--inputs-per-task``) keep the snapshot's fingerprint, but the order
   permutes record batches: a state saved before resumed silently on other records (752 of
   4,000 seen twice, 752 never), or was refused as "saved by another version of snap". A
   state now records the layout of its record batches (``blocks``) and is refused naming the
   kept version that has it; following that advice resumes exactly.
2. ``shuffle_buffer="auto"`` was at most a quarter of the memory the process may use, so under
   1 GiB it depended on the machine: ranks of the global order with other limits cut other
   windows (8,000 records delivered, 6,752 distinct), and a per-rank state saved on a large
   machine was refused on a small one though both windows held the whole epoch, blaming
   ``columns=`` and ``shuffle_buffer=``. The global order's "auto" is now the same on every
   rank (refused where it does not fit, saying to give ``shuffle_buffer``), and a per-rank
   state resumes wherever both windows hold the rank's part (the plan is then the same).

The memory limit is set as a cgroup's: :func:`memory.limit` reads a cgroup tree made in
``tmp_path`` (``memory.CGROUP_ROOT``), the process's own cgroup and its ancestors. What the
test process holds already (pytest, numpy, pyarrow: some 200 MiB) is taken as nothing, as
for a process that holds nothing yet: a limit that makes "auto" smaller than an epoch and
still leaves room for two windows beside 200 MiB would need a snapshot of hundreds of MiB.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli.readers import memory
from snapshot_cli.readers.plan import Blocks, EpochPlan, PlanOptions
from tests.backends.conftest import BUCKET, gcs_server  # noqa: F401

INPUTS, PER_INPUT = 40, 100  # 4,000 records, as the probe's snapshot
WIDE = 1016  # bytes of x in a wide record: 1 KiB a record with its id, 4 MiB in all


def records(i: int, width: int = 16) -> Iterator[dict[str, Any]]:
    for j in range(PER_INPUT):
        yield {"id": np.int64(i * PER_INPUT + j), "x": np.zeros(width, np.uint8)}


def make(url: str | Path, width: int = 16, **how: Any) -> None:
    """The same records (the same fingerprint) every time; ``how`` sets the record batches."""
    snap.create(records, url, inputs=list(range(INPUTS)), params={"width": width}, workers=0,
                overwrite=True, **how)  # fmt: skip


def ids(loader: Any) -> list[int]:
    return [i for batch in loader for i in batch["id"].tolist()]


def saved_after(loader: Any, batches: int = 5) -> tuple[dict[str, Any], list[int]]:
    """The loader's state after ``batches`` batches, and the ids of the rest of its pass."""
    it = iter(loader)
    for _ in range(batches):
        next(it)
    state, rest = loader.state_dict(), [i for b in it for i in b["id"].tolist()]
    loader.close()
    return state, rest


ORDERS = {
    "per-rank": {"batch_size": 64},
    "global": {"global_batch_size": 64},
}
REWRITES = {
    "--batch-rows": {"batch_rows": 50},
    "--batch-bytes": {"batch_bytes": "1KiB"},
    "--inputs-per-task": {"inputs_per_task": 4},
}


def saved_mid_epoch(url: str | Path, kw: dict[str, Any]) -> tuple[dict[str, Any], list[int]]:
    """A state at batch 15 of epoch 1 (the probe's), and the ids of the rest of that epoch."""
    loader = snap.open(url).loader(seed=3, shuffle_buffer=500, **kw)
    loader.set_epoch(1)
    it = iter(loader)
    for _ in range(15):
        next(it)
    state = loader.state_dict()
    rest = [i for batch in it for i in batch["id"].tolist()]
    loader.close()
    return state, rest


def refused_then_resumed(url: str, kw: dict[str, Any], state: dict[str, Any],
                         rest: list[int]) -> str:  # fmt: skip
    """Loading ``state`` into the snapshot as it is now is refused; the version the message
    names resumes it exactly. The message."""
    with pytest.raises(snap.OptionError) as err:
        snap.open(url).loader(seed=3, shuffle_buffer=500, **kw).load_state_dict(state)
    message = str(err.value)
    assert f"snap.open({url!r}, version=1)" in message, message
    resumed = snap.open(url, version=1).loader(seed=3, shuffle_buffer=500, **kw)
    resumed.load_state_dict(state)
    assert ids(resumed) == rest
    return message


@pytest.mark.parametrize("order", list(ORDERS))
@pytest.mark.parametrize("rewrite", list(REWRITES))
def test_a_state_of_other_record_batches_names_the_kept_version(
    tmp_path: Path, rewrite: str, order: str
) -> None:
    url = str(tmp_path / "snap")
    make(url)
    state, rest = saved_mid_epoch(url, ORDERS[order])
    make(url, **REWRITES[rewrite])  # version 2: the same records, other record batches
    now = snap.open(url)
    assert now.manifest.version == 2
    assert now.manifest.fingerprint == snap.open(url, version=1).manifest.fingerprint
    message = refused_then_resumed(url, ORDERS[order], state, rest)
    assert "same data" in message and "other record batches" in message, message
    assert "--batch-rows, --batch-bytes or --inputs-per-task" in message
    for wrong in ("another version of snap", "window_rows", "first_window_rows"):
        assert wrong not in message, message  # (it was the reason given, or a difference)


def test_a_state_of_other_data_and_record_batches_names_the_version_with_both(
    tmp_path: Path,
) -> None:
    """The newest version with the state's fingerprint has other record batches: the one
    named is the older version that has both."""
    url = str(tmp_path / "snap")
    make(url)
    state, rest = saved_mid_epoch(url, ORDERS["per-rank"])
    make(url, batch_rows=50)  # version 2: the same records, other record batches
    make(url, width=8)  # version 3: other records
    message = refused_then_resumed(url, ORDERS["per-rank"], state, rest)
    assert "other data than" in message and "version=2" not in message


def test_a_state_saved_before_layouts_were_recorded_still_resumes(tmp_path: Path) -> None:
    url = str(tmp_path / "snap")
    make(url)
    for kw in ORDERS.values():
        state, rest = saved_mid_epoch(url, kw)
        assert "blocks" in state["config"]
        older = {**state, "config": {k: v for k, v in state["config"].items() if k != "blocks"}}
        loader = snap.open(url).loader(seed=3, shuffle_buffer=500, **kw)
        loader.load_state_dict(older)
        assert ids(loader) == rest


def test_on_gcs_the_kept_version_resumes(gcs_server: Any) -> None:  # noqa: F811
    """The kept versions are listed and read through the storage (the GCS emulator)."""
    url = f"gs://{BUCKET}/resume-identity-{uuid.uuid4().hex[:8]}/snap"
    make(url)
    state, rest = saved_mid_epoch(url, ORDERS["global"])
    make(url, batch_rows=50)
    message = refused_then_resumed(url, ORDERS["global"], state, rest)
    assert "other record batches" in message


# --- the memory a process may use ------------------------------------------------------


@contextlib.contextmanager
def memory_limit(root: Path, nbytes: int, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process in a cgroup of ``nbytes`` (a tree under ``root``, v2's and v1's file),
    holding nothing yet (see the module docstring)."""
    (root / "memory").mkdir(parents=True, exist_ok=True)
    (root / "memory.max").write_text(f"{nbytes}\n")  # v2: the root of the unified tree
    (root / "memory" / "memory.limit_in_bytes").write_text(f"{nbytes}\n")  # v1's
    with monkeypatch.context() as m:
        m.setattr(memory, "CGROUP_ROOT", root)
        m.setattr(memory, "in_use", lambda: 0)
        memory.limit.cache_clear()
        try:
            assert memory.limit() == nbytes
            yield
        finally:
            memory.limit.cache_clear()


@pytest.fixture(scope="module")
def wide(tmp_path_factory: pytest.TempPathFactory) -> str:
    """4,000 records of 1 KiB: "auto" (256 MiB) holds them all; under 8 MiB it held 2,048."""
    url = str(tmp_path_factory.mktemp("wide") / "snap")
    make(url, width=WIDE)
    return url


def test_the_global_order_is_the_same_on_ranks_with_other_memory_limits(
    wide: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def rank(r: int) -> tuple[list[int], int]:
        loader = snap.open(wide).loader(global_batch_size=64, seed=3, rank=r, world_size=2)
        loader.set_epoch(1)
        return ids(loader), loader.plan_options.window_rows

    with memory_limit(tmp_path / "cgroup", 10 << 20, monkeypatch):  # auto was 2,560 records
        first, small = rank(0)
    second, large = rank(1)  # this machine's memory
    together = first + second
    assert len(together) == 4032  # 63 global batches, the last filled up from the start
    assert set(together) == set(range(INPUTS * PER_INPUT))
    assert small == large


def test_a_global_auto_window_that_does_not_fit_says_to_give_shuffle_buffer(
    wide: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with memory_limit(tmp_path / "cgroup", 1 << 20, monkeypatch):
        loader = snap.open(wide).loader(global_batch_size=64, seed=3, rank=0, world_size=2)
        with pytest.raises(snap.OutOfMemoryError) as err:
            next(iter(loader))
        message = str(err.value)
        assert "more than the 1.0 MiB of memory this process may use" in message, message
        assert 'shuffle_buffer="auto" is 256 MiB of records' in message
        assert (
            "give shuffle_buffer= explicitly, as a number of records, the same on every "
            "rank" in message
        )
        # following it: 256 records fit under the limit, and every rank draws that order
        given = {"global_batch_size": 64, "seed": 3, "shuffle_buffer": 256, "world_size": 2}
        first = ids(snap.open(wide).loader(rank=0, **given))
    second = ids(snap.open(wide).loader(rank=1, **given))
    assert set(first + second) == set(range(INPUTS * PER_INPUT))


@pytest.mark.parametrize(
    ("world_size", "limit"), [(1, 64 << 20), (2, 16 << 20)], ids=["one rank", "rank 1 of 2"]
)
@pytest.mark.parametrize("saved_on", ["large", "small"])
def test_a_per_rank_state_resumes_where_both_windows_hold_the_part(
    wide: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, world_size: int, limit: int,
    saved_on: str,
) -> None:  # fmt: skip
    """Under 64 MiB (16 MiB: half the records) "auto" is 16,384 records (4,096), more than the
    rank's part of 4,000 (2,000), as this machine's 262,144 are: the same plan."""
    kw = {"batch_size": 64, "seed": 3, "rank": world_size - 1, "world_size": world_size}

    def loader() -> Any:
        return snap.open(wide).loader(**kw)

    small = memory_limit(tmp_path / "cgroup", limit, monkeypatch)
    with small if saved_on == "small" else contextlib.nullcontext():
        saving = loader()
        saving.set_epoch(1)
        state, rest = saved_after(saving)
    with small if saved_on == "large" else contextlib.nullcontext():
        resumed = loader()
        resumed.load_state_dict(state)
        assert ids(resumed) == rest and len(rest) == 4000 // world_size - 5 * 64


def test_a_window_made_smaller_by_the_memory_limit_names_it(
    wide: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under 8 MiB "auto" is 2,048 records, fewer than the epoch's 4,000: another order,
    refused; the message names the limit and the state's window, which then resumes."""
    kw = {"batch_size": 64, "seed": 3}
    state, rest = saved_after(snap.open(wide).loader(**kw))
    window = state["config"]["window_rows"]
    with memory_limit(tmp_path / "cgroup", 8 << 20, monkeypatch):
        with pytest.raises(snap.OptionError) as err:
            snap.open(wide).loader(**kw).load_state_dict(state)
        message = str(err.value)
        assert "window_rows" in message
        assert "the 8.0 MiB of memory this process may use" in message, message
        assert f"resume with shuffle_buffer={window}, the state's number of records" in message
        assert "columns=" not in message  # (not the reason here)
        resumed = snap.open(wide).loader(shuffle_buffer=window, **kw)
        resumed.load_state_dict(state)
        assert ids(resumed) == rest


# A snapshot's record batches (their records), a batch size, and (world size, rank)
ROWS = st.lists(st.integers(1, 40), min_size=1, max_size=30)
BATCH_SIZES = st.integers(1, 48)
WORLDS = st.integers(1, 4).flatmap(lambda w: st.tuples(st.just(w), st.integers(0, w - 1)))


@settings(max_examples=300, deadline=None)
@given(
    rows=ROWS,
    batch_size=BATCH_SIZES,
    world=WORLDS,
    drop_last=st.booleans(),
    shuffle=st.booleans(),
    seed=st.integers(0, 2**32),
    epoch=st.integers(0, 5),
    first_window_rows=st.integers(0, 400),
    more=st.tuples(st.integers(0, 500), st.integers(0, 500)),
)
def test_windows_that_hold_the_part_make_the_same_plan(
    rows: list[int], batch_size: int, world: tuple[int, int], drop_last: bool, shuffle: bool,
    seed: int, epoch: int, first_window_rows: int, more: tuple[int, int],
) -> None:  # fmt: skip
    """What the state comparison relies on: two windows of at least the rank's part (in whole
    batches) give the same epoch, ramp of windows included."""
    world_size, rank = world
    blocks = Blocks(np.zeros(len(rows), np.int64), np.arange(len(rows)), np.array(rows, np.int64))
    n = sum(rows)
    part = n // world_size if drop_last else -(-n // world_size)
    whole = -(-part // batch_size) * batch_size
    plans = [
        EpochPlan(blocks, PlanOptions(batch_size=batch_size, shuffle=shuffle, seed=seed,
                                      rank=rank, world_size=world_size, drop_last=drop_last,
                                      window_rows=max(1, whole + extra),
                                      first_window_rows=first_window_rows), epoch)
        for extra in more
    ]  # fmt: skip
    assert plans[0].num_batches == plans[1].num_batches
    assert np.array_equal(plans[0].positions(), plans[1].positions())


@settings(max_examples=200, deadline=None)
@given(
    rows=ROWS,
    batch_size=BATCH_SIZES,
    world=WORLDS,
    drop_last=st.booleans(),
    windows=st.lists(st.tuples(st.integers(1, 500), st.integers(0, 400)), min_size=2, max_size=2),
)
def test_windows_of_any_size_make_the_same_unshuffled_plan(
    rows: list[int], batch_size: int, world: tuple[int, int], drop_last: bool,
    windows: list[tuple[int, int]],
) -> None:  # fmt: skip
    """What a state of an unshuffled loader relies on to resume with other windows: without a
    shuffle, every window size (ramp included) gives the written order."""
    world_size, rank = world
    blocks = Blocks(np.zeros(len(rows), np.int64), np.arange(len(rows)), np.array(rows, np.int64))
    plans = [
        EpochPlan(blocks, PlanOptions(batch_size=batch_size, shuffle=False, rank=rank,
                                      world_size=world_size, drop_last=drop_last,
                                      window_rows=w, first_window_rows=first), 0)
        for w, first in windows
    ]  # fmt: skip
    assert plans[0].num_batches == plans[1].num_batches
    assert np.array_equal(plans[0].positions(), plans[1].positions())


def test_an_unshuffled_state_resumes_with_other_windows(wide: str) -> None:
    """Unshuffled windows are sized by the shard of the largest records since 2026-12-07 (by
    the average before): a state saved with windows of another size resumes in the same
    written order (it was refused, naming window_rows)."""
    kw = {"batch_size": 64, "shuffle": False}
    state, rest = saved_after(snap.open(wide).loader(shuffle_buffer=640, **kw))
    assert state["config"]["window_rows"] == 640 and rest == list(range(320, 4000))
    for other in (64, 1280, "1MiB", "auto"):
        resumed = snap.open(wide).loader(shuffle_buffer=other, **kw)
        resumed.load_state_dict(state)
        assert ids(resumed) == rest


@pytest.mark.parametrize("shuffle_buffer", ["auto", "64MiB"])
def test_a_global_state_resumes_over_other_columns_where_both_windows_hold_the_epoch(
    wide: str, shuffle_buffer: str
) -> None:
    """A global state saved reading every column was refused by a loader of ``columns=["id"]``
    ("window_rows 22369621 vs 33554432", a probe): a window given in bytes holds more records
    of fewer columns, but both hold the whole epoch, which makes the same windows and the
    same order. It resumes; a per-rank state already did."""
    kw = {"global_batch_size": 64, "seed": 3, "shuffle_buffer": shuffle_buffer}
    state, rest = saved_after(snap.open(wide).loader(**kw))
    resumed = snap.open(wide).loader(columns=["id"], **kw)
    assert resumed.state_dict()["config"]["window_rows"] != state["config"]["window_rows"]
    resumed.load_state_dict(state)
    assert ids(resumed) == rest and len(rest) == 4032 - 5 * 64
    small = snap.open(wide).loader(**{**kw, "shuffle_buffer": 512})  # (windows of 8 steps)
    with pytest.raises(snap.OptionError, match="window_rows"):
        small.load_state_dict(state)
