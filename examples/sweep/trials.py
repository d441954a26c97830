"""One trial of the sweep: train a tiny CNN with one learning rate and seed, in either mode.

- ``snap``: batches come from ``snap.open(snapshot).loader(batch_size, shuffle=True,
  seed=trial_seed).to_torch()``; every epoch is a fresh shuffle of the stored records.
- ``recompute``: batches come from a ``torch.utils.data.DataLoader`` over a Dataset whose
  ``__getitem__`` runs ``pipeline.preprocess`` on the JPEG (``num_workers=0``, shuffled with
  a generator seeded by the trial seed): every image is decoded again in every epoch of every
  trial, as a sweep without a snapshot does.

Both modes train the same model with the same optimiser on the same records, on one thread
(the sweep runs trials side by side, one per core). A trial returns its final-epoch training
accuracy, the labels of its first batch, a hash of the record order of its first epoch (to
show that trials saw different shuffles) and whether every epoch held each record exactly
once.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from pipeline import preprocess
from torch import nn

import snapshot_cli as snap

CLASSES = 10


@dataclass(frozen=True)
class TrialConfig:
    trial: int
    mode: str  # "snap" or "recompute"
    lr: float
    seed: int
    epochs: int
    batch_size: int
    snapshot: str  # the snapshot's path (mode "snap")
    inputs: tuple[str, ...]  # the JPEG paths (read by mode "recompute"; both count them)


@dataclass(frozen=True)
class TrialResult:
    trial: int
    mode: str
    lr: float
    seed: int
    accuracy: float  # training accuracy over the last epoch, in [0, 1]
    loss: float  # mean training loss over the last epoch
    first_labels: list[int]  # labels of the first batch, in the order the trial saw them
    order_hash: str  # sha256 of the record indices of the first epoch, in order (12 hex)
    records_per_epoch: int
    complete_epochs: bool  # every epoch held every record exactly once
    seconds: float
    pid: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def make_model() -> nn.Module:
    """A tiny CNN (~6 k parameters): ~0.4 s per epoch of 4,000 images on one core."""
    return nn.Sequential(
        nn.AvgPool2d(2),  # 3x32x32
        nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.MaxPool2d(2),  # 16x8x8
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.AdaptiveMaxPool2d(1), nn.Flatten(), nn.Linear(32, CLASSES),
    )  # fmt: skip


class JpegDataset(torch.utils.data.Dataset[dict[str, Any]]):
    """The naive way: preprocess each image when the DataLoader asks for it."""

    def __init__(self, paths: Iterable[str]) -> None:
        self.paths = list(paths)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return next(preprocess(self.paths[i]))


def epochs_of_batches(cfg: TrialConfig) -> Iterator[Iterable[dict[str, torch.Tensor]]]:
    """One iterable of ``{"image", "label", "index"}`` tensor batches per epoch."""
    if cfg.mode == "snap":
        batches = snap.open(cfg.snapshot).loader(cfg.batch_size, shuffle=True, seed=cfg.seed)
        torch_batches = batches.to_torch()
        try:
            for _ in range(cfg.epochs):
                yield torch_batches  # each pass over it is the next epoch, freshly shuffled
        finally:
            torch_batches.close()
    elif cfg.mode == "recompute":
        generator = torch.Generator().manual_seed(cfg.seed)
        loader = torch.utils.data.DataLoader(
            JpegDataset(cfg.inputs), batch_size=cfg.batch_size, shuffle=True,
            generator=generator, num_workers=0,
        )  # fmt: skip
        for _ in range(cfg.epochs):
            yield loader
    else:
        raise ValueError(f"unknown mode {cfg.mode!r}")


def run_trial(cfg: TrialConfig) -> TrialResult:
    """Train for ``cfg.epochs`` epochs; see the module docstring for what is returned."""
    started = time.perf_counter()
    torch.set_num_threads(1)
    torch.manual_seed(cfg.seed)
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9)
    first_labels: list[int] = []
    order_hash = ""
    complete = True
    accuracy = loss_sum = 0.0
    seen = 0
    for epoch, batches in enumerate(epochs_of_batches(cfg)):
        correct = seen = 0
        loss_sum = 0.0
        indices: list[np.ndarray] = []
        for batch in batches:
            images, labels = batch["image"], batch["label"].long()
            logits = model(images.float() / 127.5 - 1.0)
            loss = nn.functional.cross_entropy(logits, labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            correct += int((logits.argmax(1) == labels).sum())
            loss_sum += loss.item() * len(labels)
            seen += len(labels)
            indices.append(batch["index"].numpy())
            if not first_labels:
                first_labels = labels.tolist()
        order = np.concatenate(indices).astype(np.int64)
        if epoch == 0:
            order_hash = hashlib.sha256(order.tobytes()).hexdigest()[:12]
        complete = complete and np.array_equal(np.sort(order), np.arange(len(cfg.inputs)))
        accuracy = correct / seen
    return TrialResult(
        trial=cfg.trial, mode=cfg.mode, lr=cfg.lr, seed=cfg.seed, accuracy=accuracy,
        loss=loss_sum / max(seen, 1), first_labels=first_labels, order_hash=order_hash,
        records_per_epoch=seen, complete_epochs=complete,
        seconds=time.perf_counter() - started, pid=os.getpid(),
    )  # fmt: skip
