"""A small, learnable snapshot for the training examples (made once, reused afterwards).

Each input file holds a seed; the pipeline turns it into 1,000 records of 32 float32
features whose label (one of 4) is a fixed linear rule of the features plus noise, so a
small model learns it in a few epochs on a CPU.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np

import snapshot_cli as snap

FEATURES, CLASSES, PER_INPUT, INPUTS = 32, 4, 1000, 8
_RULE = np.random.default_rng(1234).normal(size=(FEATURES, CLASSES)).astype(np.float32)


def preprocess(path: str, *, noise: float = 0.1) -> Iterator[dict[str, Any]]:
    with open(path) as f:
        seed = int(f.read())
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(PER_INPUT, FEATURES)).astype(np.float32)
    logits = x @ _RULE + noise * rng.normal(size=(PER_INPUT, CLASSES)).astype(np.float32)
    for features, label in zip(x, logits.argmax(axis=1), strict=True):
        yield {"x": features, "label": np.int64(label)}


def ensure_snapshot(root: str) -> snap.Snapshot:
    """The example snapshot under ``root`` (created on first use, like tf.data's snapshot)."""
    inputs = os.path.join(root, "inputs")
    os.makedirs(inputs, exist_ok=True)
    for i in range(INPUTS):
        path = os.path.join(inputs, f"{i}.seed")
        if not os.path.exists(path):
            with open(path, "w") as f:
                f.write(str(i))
    return snap.snapshot(
        f"{__file__}:preprocess", os.path.join(root, "snapshot"),
        inputs=os.path.join(inputs, "*.seed"), workers=0,
    )  # fmt: skip
