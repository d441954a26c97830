"""``to_torch()`` under a real PyTorch Lightning Trainer (CPU, a one-weight model): Lightning
calls ``dataloader.sampler.set_epoch(epoch)`` as each of its epochs starts, for training and
validation loaders, and saves and loads the loader's state in its checkpoints. Without the
adapter's ``sampler`` a validation epoch after the sanity check lacked its first 2 batches,
``limit_train_batches`` took an epoch's batches from where the last stopped, and a run
resumed from a checkpoint at an epoch's end replayed epoch 0's order."""

from __future__ import annotations

import functools
import importlib
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import snapshot_cli as snap

RECORDS, BATCH = 160, 16
PER_EPOCH = RECORDS // BATCH
pytestmark = [
    pytest.mark.slow,
    # Lightning's advice for this toy run (few workers, a tiny model, logging): not snap's
    pytest.mark.filterwarnings("ignore::UserWarning:pytorch_lightning"),
    pytest.mark.filterwarnings("ignore::UserWarning:lightning_fabric"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:.*treespec:FutureWarning"),  # (torch's, to Lightning)
]


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> str:
    def records(i: int) -> Any:
        yield snap.Batch(id=np.arange(16 * i, 16 * i + 16), x=np.ones((16, 1), np.float32))

    out = str(tmp_path_factory.mktemp("lightning") / "s")
    snap.create(records, out, inputs=range(RECORDS // 16), workers=0, batch_rows=16)
    return out


def lightning() -> Any:
    """pytorch_lightning, imported when a test here runs, not when the suite is collected (2.4
    s in each pytest worker, a third of its collection)."""
    return importlib.import_module("pytorch_lightning")


@functools.cache
def model_class() -> Any:
    pl = lightning()

    class Model(pl.LightningModule):  # type: ignore[misc]
        """Records the ids each training epoch and each validation run sees."""

        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)
            self.train_ids: dict[int, list[int]] = {}
            self.val_runs: list[list[int]] = []

        def training_step(self, batch: dict[str, torch.Tensor], index: int) -> torch.Tensor:
            self.train_ids.setdefault(self.current_epoch, []).extend(batch["id"].tolist())
            return self.layer(batch["x"]).pow(2).mean()

        def on_validation_epoch_start(self) -> None:
            self.val_runs.append([])

        def validation_step(self, batch: dict[str, torch.Tensor], index: int) -> None:
            self.val_runs[-1].extend(batch["id"].tolist())

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    return Model


def Model() -> Any:  # noqa: N802 (made as a class is)
    return model_class()()


def trainer(**options: Any) -> Any:
    quiet = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False,
             "accelerator": "cpu", "devices": 1}  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (its import-time and setup notes)
        return lightning().Trainer(**{"enable_checkpointing": False, **quiet, **options})


def epoch(url: str, e: int, shuffle: bool = True) -> list[int]:
    loader = snap.open(url).loader(BATCH, seed=3, shuffle=shuffle)
    loader.set_epoch(e)
    return [int(i) for b in loader for i in b["id"]]


def test_a_validation_epoch_after_the_sanity_check_is_whole(url: str) -> None:
    model = Model()
    train = snap.open(url).loader(BATCH, seed=3).to_torch()
    val = snap.open(url).loader(BATCH, shuffle=False).to_torch()
    trainer(max_epochs=2, num_sanity_val_steps=2).fit(model, train, val)
    sanity, *runs = model.val_runs
    assert sanity == list(range(2 * BATCH))
    assert [sorted(run) for run in runs] == [list(range(RECORDS))] * 2  # (was 128 of 160)


def test_limit_train_batches_takes_the_start_of_each_epoch(url: str) -> None:
    model = Model()
    train = snap.open(url).loader(BATCH, seed=3).to_torch()
    trainer(max_epochs=3, limit_train_batches=3, limit_val_batches=0).fit(model, train)
    assert [model.train_ids[e] for e in range(3)] == [epoch(url, e)[: 3 * BATCH] for e in range(3)]


def test_a_run_resumed_at_an_epoch_end_takes_the_next_epoch(url: str, tmp_path: Path) -> None:
    first = trainer(max_epochs=1, limit_val_batches=0, enable_checkpointing=True,
                    default_root_dir=tmp_path)  # fmt: skip
    first.fit(Model(), snap.open(url).loader(BATCH, seed=3).to_torch())
    (checkpoint,) = (tmp_path / "checkpoints").glob("*.ckpt")
    model = Model()
    again = trainer(max_epochs=2, limit_val_batches=0)
    again.fit(model, snap.open(url).loader(BATCH, seed=3).to_torch(), ckpt_path=checkpoint)
    assert model.train_ids == {1: epoch(url, 1)}  # (was epoch 0's order again)


def test_a_run_resumed_mid_epoch_goes_on_from_its_batch(url: str, tmp_path: Path) -> None:
    whole = Model()
    trainer(max_epochs=2, limit_val_batches=0).fit(
        whole, snap.open(url).loader(BATCH, seed=3).to_torch()
    )
    keep = lightning().callbacks.ModelCheckpoint(
        dirpath=tmp_path, every_n_train_steps=4, save_top_k=-1
    )
    stopped = Model()
    trainer(max_steps=4, limit_val_batches=0, enable_checkpointing=True, callbacks=[keep]).fit(
        stopped, snap.open(url).loader(BATCH, seed=3).to_torch()
    )
    (checkpoint,) = tmp_path.glob("*step=4.ckpt")
    model = Model()
    again = trainer(max_epochs=2, limit_val_batches=0)
    again.fit(model, snap.open(url).loader(BATCH, seed=3).to_torch(), ckpt_path=checkpoint)
    assert stopped.train_ids[0] + model.train_ids[0] == whole.train_ids[0]
    assert model.train_ids[1] == whole.train_ids[1] == epoch(url, 1)
