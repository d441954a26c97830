"""Write N synthetic input files (raw image bytes + caption) into a directory.

Usage: python examples/quickstart/make_inputs.py OUT_DIR [N]

File i is the same for any N; one already there is left as it is, so a larger N adds
files (a grow then reads only the new ones, not every file rewritten with a new mtime).
"""

from __future__ import annotations

import os
import sys

import numpy as np

WORDS = ["a", "the", "cat", "dog", "sits", "runs", "on", "under"]
WORDS += ["red", "blue", "small", "big", "tree", "house", "car"]


def main(out_dir: str, n: int = 200) -> None:
    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:64, 0:64]
    for i in range(n):
        base = (np.sin(xx / (4 + i % 7)) + np.cos(yy / (3 + i % 5))) * 60 + 128
        image = np.stack([base + rng.normal(0, 8, base.shape) for _ in range(3)])
        image = np.clip(image, 0, 255).astype(np.uint8)
        caption = " ".join(rng.choice(WORDS, size=int(rng.integers(3, 12))))
        path = os.path.join(out_dir, f"img-{i:05d}.bin")
        if not os.path.exists(path):
            with open(path, "wb") as f:
                f.write(image.tobytes() + caption.encode())


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 200)
