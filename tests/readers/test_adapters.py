"""The framework adapters on this CPU machine: torch (tensors, DataLoader workers), JAX
(device placement, sharding over 4 host devices in a subprocess), TensorFlow (tf.data), and
the shared prefetch-ahead logic with exact resume."""

from __future__ import annotations

import copy
import datetime
import json
import os
import pickle
import subprocess
import sys
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli.errors import OptionError
from snapshot_cli.readers.adapter import Adapter, ahead
from tests.readers.conftest import MOVES, dataloader_iteration, numbered_snapshot

RECORDS = 240


@pytest.fixture(scope="module")
def snapshot_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    record = (
        '{"label": np.int64(n), "x": np.full((2, 3), n, np.float32), '
        '"tokens": np.arange(n % 5 + 1, dtype=np.int32), "name": f"r{n}"}'
    )
    return numbered_snapshot(tmp_path_factory.mktemp("adapters"), RECORDS, record, "8KiB")


# --- the shared logic ---------------------------------------------------------------------


def test_ahead_starts_depth_items_early_and_keeps_order() -> None:
    started: list[int] = []
    seen = []
    for value, mark in ahead(range(6), lambda x: started.append(x) or x * 10, 2, lambda: "m"):
        seen.append((value, len(started), mark))
    assert [v for v, _, _ in seen] == [0, 10, 20, 30, 40, 50]
    assert [n for _, n, _ in seen] == [3, 4, 5, 6, 6, 6]  # item k is out when k+2 has started
    assert {m for _, _, m in seen} == {"m"}


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_an_item_that_fails_to_start_fails_in_its_turn(depth: int) -> None:
    """An error starting item 4 was raised while items 2 and 3 (started, fine) were still
    to be handed out: the consumer lost them (to_jax()'s check of a batch's values)."""
    started: list[int] = []

    def start(x: int) -> int:
        started.append(x)
        if x == 4:
            raise ValueError("item 4")
        return x

    seen: list[int] = []
    with pytest.raises(ValueError, match="item 4"):
        for value, _ in ahead(range(10), start, depth):
            seen.append(value)
    assert seen == [0, 1, 2, 3]
    assert started == [0, 1, 2, 3, 4]  # none after the failed one


def _labels(batches) -> list[int]:  # type: ignore[no-untyped-def]
    return [int(x) for b in batches for x in np.asarray(b["label"])]


def test_adapter_state_points_at_the_consumer_not_the_loader(snapshot_url: str) -> None:
    s = snap.open(snapshot_url)
    full = _labels(s.loader(16, seed=5, epochs=2))
    adapter = Adapter(s.loader(16, seed=5, epochs=2), depth=3)
    got = []
    for i, batch in enumerate(adapter):
        got.extend(int(x) for x in batch["label"])
        if i == 6:
            state = adapter.state_dict()
            break
    resumed = Adapter(s.loader(16, seed=5, epochs=2), depth=3)
    resumed.load_state_dict(state)
    got.extend(_labels(resumed))
    assert got == full


def test_adapter_iterated_again_after_a_break_skips_nothing(snapshot_url: str) -> None:
    s = snap.open(snapshot_url)
    full = _labels(s.loader(16, seed=2))
    adapter = Adapter(s.loader(16, seed=2), depth=4)
    got = []
    for i, batch in enumerate(adapter):
        got.extend(int(x) for x in batch["label"])
        if i == 3:
            break  # 4 more batches were in flight
    got.extend(_labels(adapter))
    assert got == full


def test_bad_prefetch(snapshot_url: str) -> None:
    with pytest.raises(OptionError, match="prefetch must be an integer >= 0"):
        Adapter(snap.open(snapshot_url).loader(8), depth=-1)
    loader = snap.open(snapshot_url).loader(8)
    for bad in (-1, "2"):  # to_torch() on the host used to take any value (it uses none)
        with pytest.raises(OptionError, match=rf"prefetch must be an integer >= 0, got {bad!r}"):
            loader.to_torch(prefetch=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("make", ["loader", "mixture", "to_torch"])
@pytest.mark.parametrize("how", ["pickle", "copy", "deepcopy", "multiprocessing"])
def test_a_loader_that_cannot_be_pickled_says_what_to_send_instead(
    snapshot_url: str, make: str, how: str
) -> None:
    """pickle said "cannot pickle '_thread.lock' object" (a Loader holds threads). (to_jax's
    wrapper is an Adapter as to_torch's is; importing JAX here would make later forks warn.)"""
    s = snap.open(snapshot_url)
    obj: object = {
        "loader": lambda: s.loader(8),
        "mixture": lambda: snap.mix([s, s], [0.5, 0.5]).loader(8),
        "to_torch": lambda: s.loader(8).to_torch(),
    }[make]()
    said = r"snap \w+ cannot be pickled or copied .* snap\.open\(url\)\.loader"
    with pytest.raises(TypeError, match=said):
        if how == "pickle":
            pickle.dumps(obj)
        elif how == "copy":
            copy.copy(obj)
        elif how == "deepcopy":
            copy.deepcopy(obj)
        else:
            ForkingPickler.dumps(obj)  # what a spawned Process's arguments go through
    assert pickle.loads(pickle.dumps(s)).num_records == s.num_records  # the snapshot does pickle


# --- torch --------------------------------------------------------------------------------


def test_to_torch_tensors(snapshot_url: str) -> None:
    import torch

    s = snap.open(snapshot_url)
    expected = list(s.loader(32, seed=1))
    with s.loader(32, seed=1).to_torch() as batches:
        got = list(batches)
        assert len(batches) == len(expected)
    assert len(got) == len(expected)
    for e, g in zip(expected, got, strict=True):
        assert isinstance(g["label"], torch.Tensor) and g["label"].dtype == torch.int64
        assert g["x"].shape == (len(e["x"]), 2, 3) and g["x"].dtype == torch.float32
        np.testing.assert_array_equal(g["x"].numpy(), e["x"])
        assert all(isinstance(t, torch.Tensor) for t in g["tokens"])
        assert [t.tolist() for t in g["tokens"]] == [t.tolist() for t in e["tokens"]]
        assert g["name"] == list(e["name"])


def test_to_torch_shares_memory_with_the_numpy_batch(snapshot_url: str) -> None:
    import torch  # noqa: F401 - in the test extras

    from snapshot_cli.readers.torch import to_tensors

    batch = next(iter(snap.open(snapshot_url).loader(8)))
    tensors = to_tensors(batch)
    tensors["x"][0, 0, 0] = -1.0
    assert batch["x"][0, 0, 0] == -1.0  # same memory: no copy


def test_to_torch_on_another_device_keeps_resume_exact(snapshot_url: str) -> None:
    import torch

    s = snap.open(snapshot_url)
    full = _labels(s.loader(16, seed=9))
    # "meta" is a real non-CPU torch device on any machine: batches go through the
    # copy-ahead path (no data, so labels are read from the state instead).
    moved = s.loader(16, seed=9).to_torch(device="meta", prefetch=3)
    for i, batch in enumerate(moved):
        assert batch["x"].device.type == "meta"
        if i == 4:
            state = moved.state_dict()
            break
    resumed = s.loader(16, seed=9)
    resumed.load_state_dict(state)
    assert _labels(resumed) == full[5 * 16 :]
    if not torch.cuda.is_available():
        with pytest.raises(OptionError, match="no CUDA device"):
            s.loader(16).to_torch(device="cuda")
    for bad in ("gpu0", 3.5):  # torch's RuntimeError and TypeError (a paragraph) before
        with pytest.raises(OptionError, match=rf"^device={bad!r} is not a torch device: [^\n]+$"):
            s.loader(16).to_torch(device=bad)
    # every device type torch knows but this build or machine lacks: said when made (it was
    # torch's RuntimeError or AssertionError at the first batch)
    for kind in ("mps", "xpu", "hpu", "mtia", "ipu", "hip", "ve", "xla", "vulkan", "fpga"):
        try:
            torch.empty(0).to(kind)
        except Exception:  # noqa: BLE001 - what this machine says is what to expect
            with pytest.raises(OptionError, match=rf"^device='{kind}' cannot be used here: \S"):
                s.loader(16).to_torch(device=kind)
        else:  # usable here: batches go there
            assert next(iter(s.loader(16).to_torch(device=kind)))["x"].device.type == kind


# (to_jax() shares the adapters' code, and JAX in this process would warn at the forks of
# later tests: its own tests run in subprocesses)
@pytest.mark.parametrize("adapter", ["to_torch"])
@pytest.mark.parametrize("move", ["set_epoch", "load_state_dict"])
def test_a_loop_broken_off_then_moved_starts_where_it_was_moved_to(
    snapshot_url: str, adapter: str, move: str
) -> None:
    """After a loop over an adapter is broken off, ``set_epoch`` and ``load_state_dict``
    decide where the next pass starts: the adapter put the loader back where its consumer
    had stopped, silently undoing them (a training loop's ``set_epoch`` ignored)."""
    s = snap.open(snapshot_url)
    reference = getattr(s.loader(16, seed=2), adapter)(prefetch=2)
    reference.set_epoch(3)
    target: Any = 3
    if move == "load_state_dict":
        it = iter(reference)
        for _ in range(4):
            next(it)
        target = reference.state_dict()
    expected = [np.asarray(b["label"]).tolist() for b in reference]
    batches = getattr(s.loader(16, seed=2), adapter)(prefetch=2)
    for i, _ in enumerate(batches):
        if i == 2:
            break
    getattr(batches, move)(target)
    assert [np.asarray(b["label"]).tolist() for b in batches] == expected


def _moved(batches: Any, moves: list[tuple[str, int]]) -> list[Any]:
    """What a user sees doing ``moves`` with ``batches``: each loop's labels, each state."""
    seen: list[Any] = []
    saved = None
    for move, n in moves:
        if move == "take":
            got = []
            for i, batch in enumerate(batches):
                if i == n:
                    break
                got.append(np.asarray(batch["label"]).tolist())
            seen.append(got)
        elif move == "set_epoch":
            batches.set_epoch(n)
        elif move == "save":
            saved = batches.state_dict()
            seen.append((saved["epoch"], saved["batch"], saved["pass_end"]))
        elif saved is not None:
            batches.load_state_dict(saved)
    return seen


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(moves=MOVES, epochs=st.sampled_from([1, 2, None]), depth=st.integers(0, 3))
def test_to_torch_moves_as_the_bare_loader_does(
    snapshot_url: str, moves: list[tuple[str, int]], epochs: int | None, depth: int
) -> None:
    """Any sequence of loops broken off, ``set_epoch``, ``state_dict`` and
    ``load_state_dict`` sees through ``to_torch()`` (which takes batches ahead) what it sees
    on the bare loader: the same batches and the same states."""
    s = snap.open(snapshot_url)
    options = {"batch_size": 16, "seed": 5, "epochs": epochs, "shuffle_buffer": 64}
    bare = _moved(s.loader(**options), moves)
    assert _moved(s.loader(**options).to_torch(prefetch=depth), moves) == bare


def test_torch_dataloader_workers_read_disjoint_complete_parts(snapshot_url: str) -> None:
    import torch

    from snapshot_cli.readers.torch import SnapshotDataset

    dataset = SnapshotDataset(snapshot_url, batch_size=16, seed=4)
    assert isinstance(dataset, torch.utils.data.IterableDataset)
    orders = []
    for epoch in range(2):
        dataset.set_epoch(epoch)
        dl = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2)
        labels = [int(x) for b in dl for x in b["label"]]
        assert sorted(labels) == list(range(RECORDS))  # complete, and disjoint: no repeats
        orders.append(labels)
    assert orders[0] != orders[1]  # set_epoch gave a fresh shuffle


@pytest.mark.parametrize("options", [{}, {"batch_size": 4}, {"batch_size": 4, "num_workers": 2}])
def test_a_dataloader_that_batches_whole_batches_says_so(snapshot_url: str, options: dict) -> None:
    import torch

    from snapshot_cli.readers.torch import SnapshotDataset

    dataset = SnapshotDataset(snapshot_url, batch_size=16, seed=4)
    # DataLoader's default batch_size=1 stacked each batch into (1, 16, ...); batch_size=4
    # failed only at the epoch's last, shorter batch, in torch.stack
    loader = torch.utils.data.DataLoader(dataset, **options)
    refused = pytest.raises(OptionError, match=r"DataLoader\(dataset, batch_size=None\)")
    with refused, dataloader_iteration(loader) as it:
        next(it)
    batch = next(iter(torch.utils.data.DataLoader(dataset, batch_size=None)))
    assert isinstance(batch, dict) and batch["label"].shape == (16,)


def test_torch_dataset_checks_its_rank_when_made(snapshot_url: str) -> None:
    from snapshot_cli.readers.torch import SnapshotDataset

    # rank=5 of 2 was taken and failed in each DataLoader worker; rank="a" was int()'s error
    for kw, message in (
        ({"rank": 5, "world_size": 2}, r"rank must be in \[0, world_size=2\), got 5"),
        ({"rank": "a", "world_size": 2}, r"rank must be an integer >= 0 or 'auto', got 'a'"),
        ({"rank": True, "world_size": 2}, r"rank must be an integer >= 0"),
        ({"rank": 0, "world_size": 0}, r"world_size must be an integer >= 1"),
    ):
        with pytest.raises(OptionError, match=message):
            SnapshotDataset(snapshot_url, batch_size=8, **kw)
    made = SnapshotDataset(snapshot_url, batch_size=8, rank=np.int64(1), world_size=2)
    assert (made.rank, made.world_size) == (1, 2)


def test_torch_dataset_takes_its_batch_size_second_as_the_loader_does(snapshot_url: str) -> None:
    """``SnapshotDataset(url, 64)``, as ``s.loader(64)``: the 64 went to storage_options
    ("'int' object is not a mapping")."""
    from snapshot_cli.readers.torch import SnapshotDataset

    by_place = SnapshotDataset(snapshot_url, 8, seed=3)
    by_name = SnapshotDataset(snapshot_url, batch_size=8, seed=3)
    assert [b["label"].tolist() for b in by_place] == [b["label"].tolist() for b in by_name]
    assert by_place.batch_size == 8
    with pytest.raises(TypeError):  # storage_options is a keyword now
        SnapshotDataset(snapshot_url, 8, {"anon": True})


def test_torch_dataset_splits_ranks_then_workers(snapshot_url: str) -> None:
    import torch  # noqa: F401 - in the test extras

    from snapshot_cli.readers.torch import SnapshotDataset

    seen = []
    for rank in range(2):
        ds = SnapshotDataset(snapshot_url, batch_size=8, rank=rank, world_size=2)
        dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
        seen.append({int(x) for b in dl for x in b["label"]})
    assert not seen[0] & seen[1]
    assert seen[0] | seen[1] == set(range(RECORDS))


def test_torch_dataset_takes_an_open_snapshot_at_its_version(tmp_path: Path) -> None:
    """``SnapshotDataset(snap.open(...))`` took the Snapshot's repr for a path ("/cwd/
    Snapshot('...', records=...) is not a snapshot"); it reads the version that was opened,
    in DataLoader workers too."""
    import torch  # noqa: F401 - in the test extras

    from snapshot_cli.readers.torch import SnapshotDataset

    path = str(tmp_path / "s")
    for version in (1, 2):
        snap.create(lambda v=version: ({"v": v, "i": i} for i in range(40)), path, workers=0,
                    overwrite=True)  # fmt: skip
    old = snap.open(path, version=1)
    assert snap.open(old) is old and snap.open(old, version=2).version == 2
    dataset = SnapshotDataset(old, batch_size=8)
    assert dataset.url == old.url
    dl = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2)
    rows = [(int(v), int(i)) for b in dl for v, i in zip(b["v"], b["i"], strict=True)]
    assert sorted(rows) == [(1, i) for i in range(40)]


def test_drop_last_over_dataloader_workers_keeps_the_ranks_batch(tmp_path: Path) -> None:
    """40 records, batches of 32, 2 workers: 20 a worker was no batch anywhere (an
    OptionError "20 on each of 2 DataLoader workers"); the workers share the rank's batches
    now, so the one batch is read by one of them, the other reads none."""
    import torch  # noqa: F401 - in the test extras

    from snapshot_cli.readers.torch import SnapshotDataset

    path = str(tmp_path / "s")
    snap.create(lambda: ({"i": i} for i in range(40)), path, workers=0)
    dataset = SnapshotDataset(path, batch_size=32, drop_last=True)
    assert len(list(torch.utils.data.DataLoader(dataset, batch_size=None))) == 1
    dl = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2)
    items = [item["i"].tolist() for item in dl]
    assert len(dl) == len(items) == 1 and len(set(items[0])) == 32


# --- JAX ----------------------------------------------------------------------------------


JAX_SHARDED = """
import json, sys
import jax, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import snapshot_cli as snap
from snapshot_cli.errors import OptionError

# unsharded: arrays on the default device, equal to the numpy batches; ragged stays numpy
plain = []
for e, g in zip(snap.open(sys.argv[1]).loader(32, seed=3),
                snap.open(sys.argv[1]).loader(32, seed=3).to_jax(prefetch=2), strict=True):
    plain.append(isinstance(g["x"], jax.Array) and np.array_equal(np.asarray(g["x"]), e["x"])
                 and g["tokens"].dtype == object)

mesh = Mesh(np.array(jax.devices()), ("batch",))
sharding = NamedSharding(mesh, P("batch"))
s = snap.open(sys.argv[1])
out = {"devices": len(jax.devices()), "batches": []}
for b in s.loader(32, seed=0, drop_last=True).to_jax(sharding=sharding):
    x = b["x"]
    out["batches"].append({
        "shape": list(x.shape),
        "devices": sorted(str(sh.device) for sh in x.addressable_shards),
        "shard_rows": sorted({sh.data.shape[0] for sh in x.addressable_shards}),
        "labels": np.asarray(b["label"]).tolist(),
    })
errors = []
try:
    s.loader(30).to_jax(sharding=sharding)
except OptionError as e:
    errors.append(str(e))
try:
    list(s.loader(32, world_size=7, drop_last=False).to_jax(sharding=sharding))  # last: 3
except OptionError as e:
    errors.append(str(e))
out["errors"] = errors
out["plain"] = plain
print(json.dumps(out))
"""


def test_to_jax_shards_the_batch_axis_over_four_devices(snapshot_url: str) -> None:
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4",
               JAX_PLATFORMS="cpu")  # fmt: skip
    res = subprocess.run([sys.executable, "-c", JAX_SHARDED, snapshot_url], env=env,
                         capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    # JAX runs in a subprocess: importing it here would make later fork()s warn (JAX is
    # multithreaded), and XLA_FLAGS must be set before it loads.
    assert out["plain"] and all(out["plain"])
    assert out["devices"] == 4
    assert len(out["batches"]) == RECORDS // 32
    for b in out["batches"]:
        assert b["shape"] == [32, 2, 3]
        assert len(b["devices"]) == 4 and b["shard_rows"] == [8]
    labels = [x for b in out["batches"] for x in b["labels"]]
    assert len(set(labels)) == len(labels) == RECORDS // 32 * 32
    assert "batch_size 30 does not split over the 4 devices" in out["errors"][0]
    assert "drop_last=True" in out["errors"][1]


# --- TensorFlow ---------------------------------------------------------------------------


TF_SCRIPT = """
import json, sys
import tensorflow as tf
import snapshot_cli as snap

RECORDS = int(sys.argv[2])
ds = snap.open(sys.argv[1]).loader(32, seed=7).to_tf()
spec = ds.element_spec
assert spec["x"].shape.as_list() == [None, 2, 3] and spec["x"].dtype == tf.float32, spec
assert isinstance(spec["tokens"], tf.RaggedTensorSpec), spec
assert spec["name"].dtype == tf.string, spec
passes = []
for _ in range(2):  # each pass over the dataset is a new loader pass: a fresh shuffle
    labels, tokens = [], {}
    for b in ds:
        labels.extend(b["label"].numpy().tolist())
        for n, t, name in zip(b["label"].numpy(), b["tokens"].to_list(), b["name"].numpy()):
            tokens[int(n)] = t
            assert name.decode() == f"r{n}", (name, n)
    assert sorted(labels) == list(range(RECORDS))
    assert all(tokens[n] == list(range(n % 5 + 1)) for n in tokens)
    passes.append(labels)
assert passes[0] != passes[1]

# a map's own values (a tensor stands in: torch beside TensorFlow may crash at exit)
class Tensor:  # what numpy sees of a CPU tensor: __array__, and a length
    def __init__(self, a):
        self.a = a
    def __array__(self, dtype=None, copy=None):
        return self.a
    def __len__(self):
        return len(self.a)

def augment(batch):
    return {"x": Tensor(batch["x"] * 2), "label": batch["label"].tolist(),
            "n": len(batch["label"])}

import numpy as np
s = snap.open(sys.argv[1])
expected = [(b["x"] * 2, b["label"]) for b in s.loader(32, seed=4)]
got = [(b["x"].numpy(), b["label"].numpy())
       for b in s.loader(32, seed=4, map=augment).to_tf(features=["x", "label"])]
mapped = len(got) == len(expected) and all(
    np.array_equal(g[0], e[0]) and np.array_equal(g[1], e[1]) for g, e in zip(got, expected))
print(json.dumps({"ok": True, "records": len(passes[0]), "mapped": bool(mapped)}))
"""


def test_to_tf_dataset(snapshot_url: str) -> None:
    # TensorFlow runs in a subprocess: loaded beside torch and a JVM in the test process it
    # can crash the interpreter at exit.
    res = subprocess.run([sys.executable, "-c", TF_SCRIPT, snapshot_url, str(RECORDS)],
                         env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
                         capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    # "mapped": a map's tensors, lists and numbers reach to_tf() (the other adapters:
    # test_a_maps_tensors_lists_and_numbers_reach_every_adapter)
    assert out == {"ok": True, "records": RECORDS, "mapped": True}


@pytest.mark.parametrize("shuffle", [True, False])
def test_batches_are_64_byte_aligned(snapshot_url: str, shuffle: bool) -> None:
    # what lets jax.device_put on CPU (and DMA engines) use the loader's memory in place
    for batch in snap.open(snapshot_url).loader(32, shuffle=shuffle):
        assert batch["x"].ctypes.data % 64 == 0 and batch["label"].ctypes.data % 64 == 0
        assert batch["x"].flags.writeable and batch["x"].flags.c_contiguous


# --- a map's own values: tensors, lists, numbers ------------------------------------------

MAPPED = """
import json, sys
import numpy as np, torch
import snapshot_cli as snap

def augment(batch):  # what a torch user's map returns: tensors, a list, a number, and lists
    labels = batch["label"].tolist()  # of bytes ending in NULs, of text, of ragged token ids
    return {"x": torch.from_numpy(batch["x"] * 2), "label": labels, "n": len(labels),
            "raw": [np.int32(v).tobytes() for v in labels], "text": [f"t{v}\\0" for v in labels],
            "tokens": [torch.arange(v % 4) for v in labels]}

s = snap.open(sys.argv[1])
expected = [(b["x"] * 2, b["label"], len(b["label"])) for b in s.loader(32, seed=4)]
out = {}
for adapter in ("torch", "jax"):
    it = getattr(s.loader(32, seed=4, map=augment), "to_" + adapter)()
    got = [(np.asarray(b["x"]), np.asarray(b["label"]), int(np.asarray(b["n"])),
            [bytes(r) for r in b["raw"]], [str(t) for t in b["text"]],
            [np.asarray(t).tolist() for t in b["tokens"]]) for b in it]
    out[adapter] = len(got) == len(expected) and all(
        np.array_equal(g[0], e[0]) and np.array_equal(g[1], e[1]) and g[2] == e[2]
        for g, e in zip(got, expected))
    labels = [e[1].tolist() for e in expected]  # (a NUL kept, ids whole; were cut or refused)
    out[adapter + " lists"] = [g[3:] for g in got] == [
        ([np.int32(v).tobytes() for v in b], [f"t{v}\\0" for v in b],
         [list(range(v % 4)) for v in b]) for b in labels]
print(json.dumps(out))
"""


def test_a_maps_tensors_lists_and_numbers_reach_every_adapter(snapshot_url: str) -> None:
    # in a subprocess: JAX makes later fork()s warn (to_tf(): in test_to_tf_dataset's)
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    res = subprocess.run([sys.executable, "-c", MAPPED, snapshot_url], env=env,
                         capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out == {"torch": True, "jax": True, "torch lists": True, "jax lists": True}


def test_a_map_value_numpy_cannot_take_names_its_column(snapshot_url: str) -> None:
    import torch

    class OnDevice:  # what a CUDA tensor says to numpy
        def __array__(self, *args: object, **kwargs: object) -> np.ndarray:
            raise TypeError("can't convert cuda:0 device type tensor to numpy")

    loader = snap.open(snapshot_url).loader(32, map=lambda b: {**b, "mask": OnDevice()})
    with pytest.raises(TypeError, match=r"map returned column 'mask' as OnDevice, which numpy "
                       r"cannot take \(TypeError: can't convert cuda:0"):  # fmt: skip
        next(iter(loader.to_torch()))
    # a tensor the map returns reaches to_torch() as it is (a CUDA one stays on its device)
    same = torch.zeros(3)
    batch = next(iter(snap.open(snapshot_url).loader(32, map=lambda b: {"t": same}).to_torch()))
    assert batch["t"] is same


def test_a_loader_given_to_a_torch_dataloader_says_what_to_give(snapshot_url: str) -> None:
    import torch

    from snapshot_cli.readers.torch import SnapshotDataset

    s = snap.open(snapshot_url)
    for handed in (s.loader(16), s.loader(16).to_torch()):
        for use in (lambda g: next(iter(torch.utils.data.DataLoader(g, batch_size=None))),
                    lambda g: g[0]):  # fmt: skip
            with pytest.raises(TypeError, match=r"is iterated, not indexed: .*SnapshotDataset"):
                use(handed)
        assert sum(len(b["label"]) for b in handed) == RECORDS  # iterating it still works
    # what it says to do
    dataset = SnapshotDataset(snapshot_url, batch_size=16)
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2)
    assert sorted(int(x) for b in loader for x in b["label"]) == list(range(RECORDS))


def test_a_map_returning_a_dataframe_is_told_what_to_return(tmp_path: Path) -> None:
    import pandas as pd

    from tests.readers.test_loader import assert_map_advice_works

    snap.create(lambda: ({"id": i} for i in range(300)), str(tmp_path / "s"), workers=0)
    assert_map_advice_works(snap.open(tmp_path / "s"), pd.DataFrame)


SPAWNED = """
import json, sys
import torch
from snapshot_cli.readers.torch import SnapshotDataset


def main():
    scale = 3  # a closure: plain pickle refuses the lambda, as forkserver (and spawn) need it
    ds = SnapshotDataset(sys.argv[1], batch_size=16, map=lambda b: {"label": b["label"] * scale})
    out = {}
    for ctx in ("forkserver",):  # (spawn pickles the dataset alike)
        dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2,
                                         multiprocessing_context=ctx)
        out[ctx] = sorted(int(x) for b in dl for x in b["label"])
    failing = SnapshotDataset(sys.argv[1], batch_size=16, map=lambda b: int(b["label"][0]) // 0)
    try:
        next(iter(torch.utils.data.DataLoader(failing, batch_size=None, num_workers=1,
                                              multiprocessing_context="forkserver")))
    except ZeroDivisionError as err:
        out["failed"] = str(err)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
"""


def test_a_datasets_lambda_map_reaches_forkserver_workers(
    snapshot_url: str, tmp_path: Path
) -> None:
    # Python 3.14 starts DataLoader workers with forkserver by default: the dataset is pickled
    script = tmp_path / "spawned.py"
    script.write_text(SPAWNED)
    res = subprocess.run([sys.executable, str(script), snapshot_url], capture_output=True,
                         text=True, timeout=300, check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out.pop("forkserver") == [3 * i for i in range(RECORDS)]
    # the worker's traceback names the script's line, as the map's own process would show it
    # (it said File "<dynamic-code>", with no line)
    assert f'File "{script}", line' in out["failed"], out["failed"]
    assert 'int(b["label"][0]) // 0' in out["failed"], out["failed"]


def test_a_datasets_map_that_cannot_be_pickled_is_named(snapshot_url: str) -> None:
    """It was "cannot pickle '_thread.lock' object" from torch starting the workers, naming
    neither the map nor what to do."""
    import threading

    from snapshot_cli.readers.torch import SnapshotDataset

    lock = threading.Lock()

    def locked(b: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with lock:
            return b

    dataset = SnapshotDataset(snapshot_url, batch_size=16, map=locked)
    with pytest.raises(TypeError, match=r"map .*locked cannot be sent to the DataLoader's wor"):
        ForkingPickler.dumps(dataset)
    assert pickle.loads(pickle.dumps(SnapshotDataset(snapshot_url, batch_size=16, map=np.copy)))


def _arrow_typed_snapshot(tmp_path: Path) -> str:
    """Columns only a user's Arrow table brings: datetimes, lists of text, structs."""
    import pyarrow as pa

    n = 12
    table = pa.table(
        {
            "when": pa.array(np.arange(n).astype("datetime64[s]")),
            "words": pa.array([[f"w{i}", "x"] for i in range(n)]),
            "meta": pa.array([{"k": i, "s": f"m{i}"} for i in range(n)]),
            "y": pa.array(np.arange(n, dtype=np.float32)),
        }
    )

    def preprocess() -> object:
        yield table

    out = str(tmp_path / "typed")
    snap.create(preprocess, out, workers=0)
    return out


def test_columns_without_a_tensor_form_reach_torch_and_jax_as_they_are(tmp_path: Path) -> None:
    """A datetime column failed in to_torch() ("can't convert np.ndarray of type
    numpy.datetime64") and to_jax() ("not a valid JAX array type"), a list of text in
    to_torch(); they are handed on as Python lists to torch (a DataLoader would fail on a
    datetime array) and as numpy arrays to JAX, as text and bytes are."""
    import torch
    from torch.utils.data import DataLoader

    from snapshot_cli.readers.torch import SnapshotDataset

    url = _arrow_typed_snapshot(tmp_path)
    dataset = SnapshotDataset(url, batch_size=12, shuffle=False)
    epoch = [datetime.datetime(1970, 1, 1) + datetime.timedelta(seconds=i) for i in range(12)]
    for batch in (  # the adapter, and a DataLoader's workers (which convert what they get)
        next(iter(snap.open(url).loader(12, shuffle=False).to_torch())),
        next(iter(DataLoader(dataset, batch_size=None, num_workers=1))),
    ):
        assert isinstance(batch["y"], torch.Tensor) and batch["y"].tolist() == list(range(12))
        assert batch["when"] == epoch  # Python's datetimes, to the microsecond
        assert batch["words"] == [[f"w{i}", "x"] for i in range(12)]
        assert batch["meta"] == [{"k": i, "s": f"m{i}"} for i in range(12)]
    script = (
        "import sys, json, numpy as np, snapshot_cli as snap\n"
        "b = next(iter(snap.open(sys.argv[1]).loader(12, shuffle=False).to_jax()))\n"
        "print(json.dumps({'y': [type(b['y']).__module__.split('.')[0], b['y'].tolist()],\n"
        "    'when': [str(b['when'].dtype), b['when'].astype('int64').tolist()],\n"
        "    'words': [list(w) for w in b['words']]}))\n"
    )
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    res = subprocess.run([sys.executable, "-c", script, url], env=env, capture_output=True,
                         text=True, timeout=120, check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["y"][0] in ("jax", "jaxlib") and out["y"][1] == list(range(12))  # a jax.Array
    assert out["when"] == ["datetime64[s]", list(range(12))]
    assert out["words"] == [[f"w{i}", "x"] for i in range(12)]


@pytest.mark.parametrize("workers", [0, 1, 2])
@pytest.mark.parametrize(
    "options",
    [
        {"batch_size": 16},
        {"batch_size": 16, "drop_last": True},
        {"global_batch_size": 12},
        {"batch_size": 16, "rank": 1, "world_size": 2},
    ],  # fmt: skip
    ids=["batch", "drop_last", "global", "rank-1-of-2"],
)
def test_a_dataloaders_len_is_the_batches_it_yields(
    snapshot_url: str, workers: int, options: dict[str, Any]
) -> None:
    """SnapshotDataset had no len: Hugging Face's Trainer resumed an unsized dataset 27
    batches off (it plans an epoch as max_steps long) and Lightning's estimated steps were
    -1. A rank's workers share its batches, so the count is the same with any workers (the
    global order's workers each yield a slice of every step)."""
    import torch

    from snapshot_cli.readers.torch import SnapshotDataset

    dataset = SnapshotDataset(snapshot_url, seed=4, **options)
    dl = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=workers)
    assert len(dl) == sum(1 for _ in dl)  # (torch warns, an error here, if it yields more)
    direct = snap.open(snapshot_url).loader(seed=4, **options)
    assert len(dataset) == len(direct)  # asked directly: the count without workers


@pytest.mark.parametrize("adapter", ["to_torch", "to_jax"])  # (to_tf: test_tf.py's process)
def test_a_maps_list_of_ints_a_float64_would_round_is_refused_by_name(
    snapshot_url: str, adapter: str
) -> None:
    """A map's ``[2**63 + 1, -1, ...]`` reached every adapter as float64
    9.223372036854776e+18 (and ``[2**53 + 1, 0.5]`` as 9007199254740992.0), silently, where a
    pipeline yielding the same list is refused (a probe); ``[2**70]`` was TensorFlow's own
    error naming no column. Each is refused naming the column; numpy's ``ulonglong`` uint64
    array (what ``np.asarray([2**64 - 1])`` makes), which torch refused, arrives exactly."""

    def first(values: Any) -> np.ndarray:
        loader = snap.open(snapshot_url).loader(4, shuffle=False, columns=["label"],
                                                map=lambda b: {"v": values})  # fmt: skip
        v = next(iter(getattr(loader, adapter)()))["v"]
        loader.close()
        return v.numpy() if hasattr(v, "numpy") else np.asarray(v)

    for values in ([2**63 + 1, -1, -1, -1], [2**53 + 1, 0.5, 0.5, 0.5], [2**70] * 4):
        with pytest.raises(TypeError, match=r"map returned column 'v' as a list holding an int"):
            first(values)
    if adapter == "to_torch":  # (JAX without x64 refuses uint64s past 2**32, by name)
        got = first(np.asarray([2**64 - 1] * 4))
        assert got.dtype == np.uint64 and got.tolist() == [2**64 - 1] * 4
    assert first([5, 6, 7, 8]).tolist() == [5, 6, 7, 8]
