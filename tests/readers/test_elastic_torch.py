"""Elastic resume through the framework adapters, DataLoader workers and real
``torch.distributed`` jobs of different sizes (gloo, separate processes)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

import snapshot_cli as snap
from snapshot_cli.errors import OptionError
from snapshot_cli.readers.torch import SnapshotDataset
from tests import forks as forks_module
from tests.conftest import REPO
from tests.readers.conftest import dataloader_iteration

G = 12
TORCH = ("torch", "torch.distributed", "torch.nn.parallel", "snapshot_cli.readers.torch")


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("elastic") / "s"

    def records() -> Any:
        for s in range(0, 480, 48):
            yield snap.Batch(id=np.arange(s, s + 48, dtype=np.int64), x=np.ones((48, 2)))

    snap.create(records, str(path), workers=0, batch_rows=30, shard_size="8KiB")
    return str(path)


def whole(url: str, **kw: Any) -> list[list[int]]:
    """The global batches of an uninterrupted one-process run, each sorted: the ranks'
    slices hold the same records, each rank's in an order of its own."""
    return [sorted(b["id"].tolist()) for b in snap.open(url).loader(global_batch_size=G, **kw)]


def joined(*slices: list[int]) -> list[int]:
    """A step's records from its slices (the ranks', or a rank's workers')."""
    return sorted(i for part in slices for i in part)


ADAPTER_RESUME = """
import json, sys
import numpy as np
import snapshot_cli as snap

url, adapter = sys.argv[1], sys.argv[2]
s = snap.open(url)
first = getattr(s.loader(global_batch_size=12, seed=3, rank=1, world_size=2), adapter)()
it = iter(first)
for _ in range(7):
    next(it)
state = first.state_dict()
first.close()
rest = []
for r in range(3):
    again = getattr(s.loader(global_batch_size=12, seed=3, rank=r, world_size=3), adapter)()
    again.load_state_dict(state)
    rest.append([np.asarray(b["id"]).tolist() for b in again])
print(json.dumps(rest))
"""


@pytest.mark.parametrize("adapter", ["to_torch", "to_jax"])
def test_an_adapter_state_resumes_on_another_world_size(url: str, adapter: str) -> None:
    """Through the adapter (which prefetches ahead of the consumer), a state taken on rank 1
    of 2 loads on 3 ranks, which deliver exactly the rest of the global batches. In a
    subprocess: JAX imported here would make later fork()s of the DataLoader tests warn."""
    expected = whole(url, seed=3)
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(REPO)}
    res = subprocess.run([sys.executable, "-c", ADAPTER_RESUME, url, adapter], env=env,
                         capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    rest = json.loads(res.stdout.strip().splitlines()[-1])
    assert len(rest[0]) == len(expected) - 7
    for t, batch in enumerate(expected[7:]):
        assert joined(*(rk[t] for rk in rest)) == batch


def _items(
    dataset: Any, workers: int, n: int | None = None, context: str | None = None
) -> list[list[int]]:
    """The ids of each item a DataLoader with ``workers`` gives (the first ``n``)."""
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=None, num_workers=workers, multiprocessing_context=context
    )
    out = []
    with dataloader_iteration(loader) as items:
        for item in items:
            out.append(item["id"].tolist())
            if n is not None and len(out) == n:
                break
    return out


# torch suggests no more workers than cores (2 here); 3 and 5 are the point of these tests
MANY_WORKERS = pytest.mark.filterwarnings("ignore:This DataLoader will create")


@MANY_WORKERS
def test_dataloader_workers_are_parts_of_the_topology_and_resume_on_another_count(
    url: str,
) -> None:
    """Two workers each deliver half of every global batch, one after the other; a state
    taken after k steps loads into a DataLoader with three workers (thirds)."""
    expected = whole(url, seed=5)
    ds = SnapshotDataset(url, global_batch_size=G, seed=5, rank=0, world_size=1)
    k = 9
    items = _items(ds, 2, 2 * k)
    steps = [joined(items[i], items[i + 1]) for i in range(0, len(items), 2)]
    assert steps == expected[:k]
    state = ds.state_dict(epoch=0, step=k)
    ds2 = SnapshotDataset(url, global_batch_size=G, seed=5, rank=0, world_size=1)
    ds2.load_state_dict(state)
    items = _items(ds2, 3)
    assert {len(i) for i in items} == {G // 3}
    steps = [joined(*items[i : i + 3]) for i in range(0, len(items), 3)]
    assert steps == expected[k:]
    # the next iteration is the next epoch, from its start
    nxt = _items(ds2, 3)
    assert [joined(*nxt[i : i + 3]) for i in range(0, len(nxt), 3)] == whole(url, seed=5, epochs=2)[
        len(expected) :
    ]


def test_a_per_rank_state_with_workers_says_what_resumes(url: str) -> None:
    """A state of the per-rank order (no global_batch_size) loaded and iterated by a
    DataLoader with workers: "the state was saved by a loader with other window_rows,
    world_size: {...}", options the user never set. Without workers it resumes exactly."""
    ds = SnapshotDataset(url, batch_size=16, seed=2, rank=0, world_size=1)
    first = _items(ds, 0)
    state = ds.state_dict(epoch=0, step=3)
    ds2 = SnapshotDataset(url, batch_size=16, seed=2, rank=0, world_size=1)
    ds2.load_state_dict(state)
    with pytest.raises(
        Exception, match=r"resume with num_workers=0, or save states of .*global_batch_size"
    ):
        _items(ds2, 2)
    ds3 = SnapshotDataset(url, batch_size=16, seed=2, rank=0, world_size=1)
    ds3.load_state_dict(state)
    assert _items(ds3, 0) == first[3:]


def test_workers_that_do_not_split_the_global_batch_are_refused(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ds = SnapshotDataset(url, global_batch_size=G, rank=0, world_size=1)
    info = SimpleNamespace(id=0, num_workers=5, seed=9)  # as worker 0 of 5 sees it
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: info)
    with pytest.raises(OptionError, match="does not split over 1 ranks x 5 DataLoader workers"):
        next(iter(ds))


JOB = textwrap.dedent(
    """
    import json, os, sys
    import torch
    import torch.distributed as dist
    import snapshot_cli as snap

    url, out, steps, state_in = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    loader = snap.open(url).loader(global_batch_size=12, seed=11, epochs=2,
                                   rank="auto", world_size="auto")
    if state_in != "-":
        with open(state_in) as f:
            loader.load_state_dict(json.load(f))
    model = torch.nn.Linear(2, 1)
    model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    seen = []
    for i, batch in enumerate(loader.to_torch()):
        loss = model(batch["x"].float()).pow(2).mean()  # a training step: DDP all-reduces
        opt.zero_grad()
        loss.backward()
        opt.step()
        parts = [None] * world
        dist.all_gather_object(parts, batch["id"].tolist())
        seen.append(sorted(sum(parts, [])))
        if steps and i + 1 == steps:
            break
    states = [None] * world
    dist.all_gather_object(states, loader.state_dict())
    if rank == 0:
        assert all(s == states[0] for s in states), "the state differs between ranks"
        with open(out, "w") as f:
            json.dump({"seen": seen, "state": states[0]}, f)
    loader.close()
    dist.destroy_process_group()
    # torch's gloo threads may still drop the last reference to a finished collective's
    # Python objects while the interpreter finalizes; taking the GIL then aborts the process
    # ("terminate called without an active exception": pytorch/pytorch#179291, #190489).
    # The job's work is done and written: end without the interpreter's teardown.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _job(tmp: Path, url: str, world: int, steps: int, state: Path | None, name: str) -> Any:
    script = tmp / "job.py"
    script.write_text(JOB)
    out = tmp / f"{name}.json"
    port = _free_port()
    envs = [{**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
             "RANK": str(rank), "WORLD_SIZE": str(world), "OMP_NUM_THREADS": "1",
             "PYTHONPATH": str(REPO)} for rank in range(world)]  # fmt: skip
    _ranks([str(script), url, str(out), str(steps), str(state or "-")], envs)
    return json.loads(out.read_text())


def _ranks(argv: list[str], envs: list[dict[str, str]]) -> None:
    """A job's processes, ``python *argv`` in each environment, started together and each
    waited for: forked from a server that imported torch once (:mod:`tests.forks`; torch
    read the ranks' ``OMP_NUM_THREADS=1`` there), ~3 CPU-s less a process."""
    forks = forks_module.shared(TORCH, {"OMP_NUM_THREADS": "1"})
    started = [forks.start_python(argv, REPO, env, 300) for env in envs]
    for done in [finish() for finish in started]:
        assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.slow
def test_train_on_4_ranks_then_resume_on_2_and_on_3(url: str, tmp_path: Path) -> None:
    """A real job: 4 processes (gloo) train 15 steps and save the state; jobs of 2 and of 3
    processes resume from it and run to the end of the second epoch (40 steps each). Every
    global batch is the one an uninterrupted run sees."""
    expected = whole(url, seed=11, epochs=2)
    first = _job(tmp_path, url, 4, 15, None, "first")
    assert first["seen"] == expected[:15]
    state = tmp_path / "state.json"
    state.write_text(json.dumps(first["state"]))
    for world in (2, 3):
        rest = _job(tmp_path, url, world, 0, state, f"resumed-{world}")
        assert rest["seen"] == expected[15:], world


MADE_BEFORE_THE_GROUP = textwrap.dedent(
    """
    import json, os, sys
    import torch
    import torch.distributed as dist
    from snapshot_cli.readers.torch import SnapshotDataset

    url, out, ctx = sys.argv[1], sys.argv[2], sys.argv[3]
    # made at module level, as in a Lightning script: the launcher's child has WORLD_SIZE
    # and LOCAL_RANK but no RANK yet, its parent (rank 0) none of them
    dataset = SnapshotDataset(url, batch_size=16, seed=2)

    if __name__ == "__main__":  # (spawned DataLoader workers import this file again)
        rank = int(os.environ.pop("MY_RANK"))
        dist.init_process_group("gloo", rank=rank, world_size=2)  # the launcher, later
        dl = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2,
                                         multiprocessing_context=ctx)
        ids = [int(i) for b in dl for i in b["id"]]
        parts = [None, None]
        dist.all_gather_object(parts, ids)
        if rank == 0:
            with open(out, "w") as f:
                json.dump(parts, f)
        dist.barrier()
        dist.destroy_process_group()
        del dl, dataset  # (its epoch counter's directory goes with it: os._exit runs no
        import gc  # finalizer)

        gc.collect()
        sys.stdout.flush()
        os._exit(0)
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("ctx", ["fork", "spawn"])
def test_a_dataset_made_before_the_process_group_reads_its_rank(
    url: str, tmp_path: Path, ctx: str
) -> None:
    """Lightning's DDP: the dataset of a module-level script is made before
    torch.distributed is set up. Rank 1's process (WORLD_SIZE, no RANK) failed at once
    ("found WORLD_SIZE='2' ... but no RANK"), and rank 0 took itself for the only rank."""
    script = tmp_path / "job.py"
    script.write_text(MADE_BEFORE_THE_GROUP)
    out = tmp_path / "out.json"
    port = str(_free_port())
    envs = []
    for rank in range(2):
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, MY_RANK=str(rank),
                   OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))  # fmt: skip
        if rank:
            env.update(WORLD_SIZE="2", LOCAL_RANK="1")
        envs.append(env)
    _ranks([str(script), url, str(out), ctx], envs)
    parts = json.loads(out.read_text())
    assert all(parts) and not set(parts[0]) & set(parts[1])
    assert sorted(parts[0] + parts[1]) == list(range(480))
