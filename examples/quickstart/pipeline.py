"""Quickstart pipeline: decode small "images" from raw files and tokenise a caption.

Each input file holds a raw 3x64x64 uint8 image followed by a UTF-8 caption (see
make_inputs.py). The function yields one record per file: a fixed-shape image tensor, an
integer label, a ragged array of token ids and the caption text.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np

import snapshot_cli as snap

IMAGE_SHAPE = (3, 64, 64)


@snap.ragged("tokens")
def preprocess(path: str, *, size: int = 64, vocab: int = 32000) -> Iterator[dict[str, Any]]:
    with open(path, "rb") as f:
        raw = f.read()
    n = int(np.prod(IMAGE_SHAPE))
    image = np.frombuffer(raw[:n], dtype=np.uint8).reshape(IMAGE_SHAPE)
    if size != IMAGE_SHAPE[1]:  # nearest-neighbour resize, no extra dependencies
        idx = np.arange(size) * IMAGE_SHAPE[1] // size
        image = image[:, idx][:, :, idx]
    caption = raw[n:].decode("utf-8")
    tokens = np.array([zlib.crc32(w.encode()) % vocab for w in caption.split()], dtype=np.int32)
    label = int(path.rsplit("-", 1)[-1].split(".")[0]) % 10
    yield {"image": image, "label": label, "tokens": tokens, "caption": caption}
