"""Train a small PyTorch model from a snapshot: ``python examples/train_torch.py [DIR]``.

The snapshot is made on first use under DIR (default ``demo-output/train-example``, with its
inputs and the checkpoint); every epoch replays it with a fresh shuffle through
``loader.to_torch()``. The loader's position goes
into the checkpoint with the model, so a restarted run continues with the very next batch.
A few seconds on a CPU.
"""

from __future__ import annotations

import os
import sys

import torch
from train_data import CLASSES, FEATURES, ensure_snapshot

EPOCHS, BATCH = 4, 128


def main(root: str) -> float:
    torch.manual_seed(0)
    s = ensure_snapshot(root)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = torch.nn.Sequential(
        torch.nn.Linear(FEATURES, 64), torch.nn.ReLU(), torch.nn.Linear(64, CLASSES)
    ).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    batches = s.loader(BATCH, shuffle=True, seed=0).to_torch(device=device)
    accuracy = 0.0
    for epoch in range(EPOCHS):
        correct = seen = 0
        for batch in batches:  # each pass: one epoch, freshly shuffled
            logits = model(batch["x"])
            loss = torch.nn.functional.cross_entropy(logits, batch["label"])
            opt.zero_grad()
            loss.backward()
            opt.step()
            correct += int((logits.argmax(1) == batch["label"]).sum())
            seen += len(batch["label"])
        accuracy = correct / seen
        checkpoint = {"model": model.state_dict(), "data": batches.state_dict()}
        torch.save(checkpoint, os.path.join(root, "checkpoint.pt"))
        stats = batches.stats()
        print(f"epoch {epoch}: loss {loss.item():.3f}, train accuracy {accuracy:.3f}, "
              f"input-bound {stats['input_bound_pct']:.0f}%")  # fmt: skip
    return accuracy


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join("demo-output", "train-example"))
