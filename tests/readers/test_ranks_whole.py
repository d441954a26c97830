"""A loader left at ``rank=0, world_size=1`` (the defaults) in a process that is one rank of
several reads every record on every rank, in the same order: a job trained on the whole
snapshot N times an epoch without a word (a concurrency probe; torch's DistributedSampler
reads the job's ranks itself). It now warns, naming where the ranks were found and what
to give; a loader given its ranks, or "auto", does not."""

from __future__ import annotations

import json
import os
import textwrap
import warnings
from pathlib import Path

import pytest

import snapshot_cli as snap
from snapshot_cli.readers import ranks
from tests import forks as forks_module
from tests.conftest import REPO
from tests.readers.test_elastic_torch import TORCH, _free_port
from tests.readers.test_ranks import launched_with


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory: pytest.TempPathFactory) -> snap.Snapshot:
    path = tmp_path_factory.mktemp("whole") / "s"
    snap.create(lambda: ({"i": i} for i in range(40)), str(path), workers=0)
    return snap.open(path)


def said(make: object) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make()  # type: ignore[operator]
    return [str(w.message) for w in caught if w.category is RuntimeWarning]


@pytest.mark.parametrize(("rank_var", "size_var"), ranks._ENV)
def test_a_launchers_job_with_the_default_ranks_is_warned(
    snapshot: snap.Snapshot, rank_var: str, size_var: str
) -> None:
    with launched_with({rank_var: "1", size_var: "3"}):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            snapshot.loader(batch_size=4)
        (warning,) = [w for w in caught if w.category is RuntimeWarning]
        assert str(warning.message).startswith(
            f"snap: this process is rank 1 of 3 ({rank_var} and {size_var}), but the loader "
            "reads the whole snapshot (rank=0, world_size=1, the defaults): every rank reads "
            "every record"
        ), warning.message
        assert "rank='auto', world_size='auto'" in str(warning.message)
        assert warning.filename == __file__  # (the user's line, not snap's)
        for given in ({"rank": "auto", "world_size": "auto"}, {"rank": 1, "world_size": 3},
                      {"world_size": "auto"}):  # fmt: skip
            assert said(lambda g=given: snapshot.loader(batch_size=4, **g)) == [], given
        mixed = snap.mix([snapshot, snapshot])
        assert len(said(lambda: mixed.loader(batch_size=4))) == 1  # (a mixture's too)


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"RANK": "0", "WORLD_SIZE": "1"},
        {"RANK": "x", "WORLD_SIZE": "2"},
        {"RANK": "2", "WORLD_SIZE": "2"},
        {"WORLD_SIZE": "4"},
    ],  # fmt: skip
)
def test_one_process_or_unreadable_variables_are_not_warned(
    snapshot: snap.Snapshot, env: dict[str, str]
) -> None:
    """One process, or variables that are not a job's (the defaults never read them: only
    "auto" refuses them, as test_ranks says)."""
    with launched_with(env):
        assert said(lambda: snapshot.loader(batch_size=4)) == []


GROUP = textwrap.dedent(
    """
    import json, os, sys, warnings
    import torch.distributed as dist
    import snapshot_cli as snap

    url, out, rank, port = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)  # (no launcher's variables: the group alone)
    s = snap.open(url)
    seen = {}
    for name, given in (("default", {}), ("auto", {"rank": "auto", "world_size": "auto"})):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            loader = s.loader(batch_size=4, shuffle=False, **given)
        seen[name] = {"said": [str(w.message) for w in caught],
                      "ids": [int(i) for b in loader for i in b["i"]]}
    with open(out, "w") as f:
        json.dump(seen, f)
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)  # (see test_elastic_torch's JOB: gloo's threads at the interpreter's exit)
    """
)


@pytest.mark.slow
def test_an_initialised_torch_distributed_group_with_the_default_ranks_is_warned(
    snapshot: snap.Snapshot, tmp_path: Path
) -> None:
    script = tmp_path / "group.py"
    script.write_text(GROUP)
    port = str(_free_port())
    env = {k: v for k, v in os.environ.items() if k not in {v for p in ranks._ENV for v in p}}
    env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    forks = forks_module.shared(TORCH, {"OMP_NUM_THREADS": "1"})
    argv = [str(script), snapshot.url, "", "", port]
    started = []
    for rank in range(2):
        argv[2:4] = [str(tmp_path / f"{rank}.json"), str(rank)]
        started.append(forks.start_python(list(argv), REPO, env, 300))
    for done in [finish() for finish in started]:
        assert done.returncode == 0, done.stderr[-3000:]
    for rank in range(2):
        seen = json.loads((tmp_path / f"{rank}.json").read_text())
        (warning,) = seen["default"]["said"]
        assert warning.startswith(f"snap: this process is rank {rank} of 2 (torch.distributed)")
        assert seen["default"]["ids"] == list(range(40))  # (what it warns of: all of it)
        assert seen["auto"] == {"said": [], "ids": list(range(rank * 20, rank * 20 + 20))}


def test_a_snapshot_dataset_left_at_auto_is_not_warned(snapshot: snap.Snapshot) -> None:
    """``SnapshotDataset`` (ranks "auto" by default) checked its options with a loader of
    rank 0 of 1, which warned in every rank of a torchrun job that the loader reads the whole
    snapshot, while it reads its share (found by a probe); one given rank=0, world_size=1
    is still warned, when it reads."""
    from snapshot_cli.readers.torch import SnapshotDataset

    with launched_with({"RANK": "1", "WORLD_SIZE": "2"}):
        made: list[object] = []
        assert said(lambda: made.append(SnapshotDataset(snapshot.url, batch_size=4))) == []
        dataset = made[0]
        assert (dataset.rank, dataset.world_size) == (1, 2)  # type: ignore[attr-defined]
        assert sum(len(b["i"]) for b in dataset) == 20  # type: ignore[attr-defined]
        whole = SnapshotDataset(snapshot.url, batch_size=4, rank=0, world_size=1)
        assert len(said(lambda: next(iter(whole)))) == 1
