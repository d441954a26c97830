"""Write the sweep's synthetic JPEG dataset: ``python examples/sweep/make_inputs.py DIR [N]``.

Image ``i`` belongs to class ``i % 10`` and is drawn from a generator seeded with ``i``, so
the files are the same on every run: a 256x256 noisy background with one shape whose kind
(ellipse, box, triangle, cross, ring) and colour depend on the class, with a random position,
size and colour jitter, plus Gaussian pixel noise, saved as JPEG at quality 90 (~30 KB).
Files that already exist are kept (their mtime is part of the snapshot's fingerprint), and
each file is written under a temporary name and renamed, so an interrupted run leaves no
truncated JPEG behind.
"""

from __future__ import annotations

import io
import multiprocessing
import os
import sys
from concurrent.futures import ProcessPoolExecutor

import numpy as np
from PIL import Image, ImageDraw

CLASSES, SIDE = 10, 256
# one colour per class; classes c and c + 5 share a shape, so colour matters as well
PALETTE = [
    (220, 40, 40), (40, 180, 60), (50, 80, 220), (230, 200, 40), (200, 60, 200),
    (40, 200, 210), (240, 130, 30), (130, 70, 30), (240, 240, 240), (110, 110, 110),
]  # fmt: skip


def input_path(root: str, index: int) -> str:
    return os.path.join(root, f"class-{index % CLASSES}", f"img-{index:05d}.jpg")


def render(index: int) -> bytes:
    """The JPEG bytes of image ``index`` (deterministic)."""
    rng = np.random.default_rng(index)
    label = index % CLASSES
    background = tuple(int(v) for v in rng.integers(0, 140, 3))
    image = Image.new("RGB", (SIDE, SIDE), background)
    draw = ImageDraw.Draw(image)
    jitter = rng.integers(-30, 31, 3)
    colour = tuple(int(v) for v in np.clip(np.array(PALETTE[label]) + jitter, 0, 255))
    r = int(rng.integers(28, 80))
    x, y = (int(v) for v in rng.integers(r, SIDE - r, 2))
    box = (x - r, y - r, x + r, y + r)
    shape = label % 5
    if shape == 0:
        draw.ellipse(box, fill=colour)
    elif shape == 1:
        draw.rectangle(box, fill=colour)
    elif shape == 2:
        draw.polygon([(x, y - r), (x - r, y + r), (x + r, y + r)], fill=colour)
    elif shape == 3:
        w = max(r // 3, 4)
        draw.rectangle((x - r, y - w, x + r, y + w), fill=colour)
        draw.rectangle((x - w, y - r, x + w, y + r), fill=colour)
    else:
        draw.ellipse(box, outline=colour, width=max(r // 4, 4))
    pixels = np.asarray(image, dtype=np.float32) + rng.normal(0, 18, (SIDE, SIDE, 3))
    noisy = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    out = io.BytesIO()
    noisy.save(out, "JPEG", quality=90)
    return out.getvalue()


def _write(root: str, index: int) -> None:
    path = input_path(root, index)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(render(index))
    os.replace(tmp, path)


def make_inputs(root: str, n: int, workers: int = 1) -> list[str]:
    """Images ``0..n-1`` under ``root`` (only the missing ones are written); their paths."""
    for label in range(CLASSES):
        os.makedirs(os.path.join(root, f"class-{label}"), exist_ok=True)
    paths = [input_path(root, i) for i in range(n)]
    missing = [i for i, p in enumerate(paths) if not os.path.exists(p)]
    if workers > 1 and len(missing) > 100:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            list(pool.map(_write, [root] * len(missing), missing, chunksize=64))
    else:
        for i in missing:
            _write(root, i)
    return sorted(paths)  # the order snap uses: class by class


if __name__ == "__main__":
    make_inputs(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 4000, os.cpu_count() or 1)
