"""The sweep's preprocessing: decode a JPEG, clean it up, shrink it to 3x64x64 uint8.

This is the expensive step that every trial of a naive sweep repeats every epoch, and that
snap runs once (``snap.create`` loads it again in its worker processes as
``examples/sweep/pipeline.py:preprocess``, so it lives in its own module). About 3 ms of
Pillow work per 256x256 image on one core: decode, per-channel autocontrast, a Gaussian
blur against aliasing, a Lanczos resize, an unsharp mask. The result stays uint8 (a quarter
of float32's bytes); the model scales it to floats on the batch, which costs next to nothing.

Inputs are laid out as ``class-<label>/img-<index>.jpg`` (see make_inputs.py): the label and
a record index come from the path, as with an image-folder dataset.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np
from PIL import Image, ImageFilter, ImageOps

SIZE = 64


def parse_path(path: str) -> tuple[int, int]:
    """``(label, index)`` of ``.../class-<label>/img-<index>.jpg``."""
    folder, name = os.path.split(path)
    label = int(os.path.basename(folder).removeprefix("class-"))
    index = int(name.removeprefix("img-").removesuffix(".jpg"))
    return label, index


def load_image(path: str, size: int = SIZE) -> np.ndarray:
    """The image at ``path`` as a ``(3, size, size)`` uint8 array (CHW)."""
    with Image.open(path) as jpeg:
        image = jpeg.convert("RGB")  # decodes
    image = ImageOps.autocontrast(image, cutoff=1)  # stretch each channel to 0..255
    image = image.filter(ImageFilter.GaussianBlur(radius=1.5))  # denoise, anti-alias
    image = image.resize((size, size), Image.Resampling.LANCZOS)
    image = image.filter(ImageFilter.UnsharpMask(radius=1, percent=80, threshold=2))
    return np.ascontiguousarray(np.asarray(image, dtype=np.uint8).transpose(2, 0, 1))


def preprocess(path: str, *, size: int = SIZE) -> Iterator[dict[str, Any]]:
    """One record per JPEG: its image, its class and its index (to check shuffles)."""
    label, index = parse_path(path)
    yield {"image": load_image(path, size), "label": label, "index": index}
