"""A CPU-heavy example pipeline for benchmarks/create.py.

Each input is an integer seed. Per input the function synthesises a 3x128x128 float32 image
from a seeded RNG, then does real (single-threaded, non-BLAS) numpy work on it: several
separable Gaussian blur passes, an FFT band-pass filter, a 2x area downsample, per-channel
normalisation and quantisation to uint8 3x64x64. It yields ``VARIANTS`` records per input
(the image and flipped/transposed views), each with an int label, a float32 feature vector
and a short string: about 30 ms of CPU per input with the default ``passes``.

Everything is a deterministic function of the seed, so snap and the plain loop see the same
work. Top-level functions only: worker processes import this file by its spec.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

SIZE = 128  # synthesised image side
OUT = 64  # stored image side (2x area downsample)
FEATURES = 32
VARIANTS = ("identity", "flip_h", "flip_v", "transpose")
_KERNEL = np.array([1.0, 4.0, 6.0, 4.0, 1.0], dtype=np.float32) / 16.0  # binomial ~ Gaussian


def make_inputs(n: int = 400) -> list[int]:
    """The inputs: one integer seed per call of :func:`preprocess`."""
    return list(range(n))


def _blur(img: np.ndarray) -> np.ndarray:
    """One separable 5-tap blur over the last two axes (edges replicated)."""
    pad = np.pad(img, ((0, 0), (2, 2), (2, 2)), mode="edge")
    rows = sum(w * pad[:, i : i + SIZE, :] for i, w in enumerate(_KERNEL))
    return sum(w * rows[:, :, i : i + SIZE] for i, w in enumerate(_KERNEL))


def _band_pass(img: np.ndarray, low: float, high: float) -> np.ndarray:
    """Keep spatial frequencies with radius in [low, high) (cycles per pixel)."""
    spec = np.fft.rfft2(img)
    fy = np.fft.fftfreq(SIZE)[:, None]
    fx = np.fft.rfftfreq(SIZE)[None, :]
    radius = np.sqrt(fy * fy + fx * fx)
    spec *= (radius >= low) & (radius < high)
    return np.fft.irfft2(spec, s=(SIZE, SIZE)).astype(np.float32)


def _synthesise(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    noise = rng.standard_normal((3, SIZE, SIZE), dtype=np.float32)
    yy, xx = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32) / SIZE
    freq = rng.uniform(1.0, 8.0, size=(3, 2)).astype(np.float32)
    waves = np.stack([np.sin(2 * np.pi * (f[0] * yy + f[1] * xx)) for f in freq])
    return (waves + 0.5 * noise).astype(np.float32)


def _features(img: np.ndarray) -> np.ndarray:
    """Per-channel intensity histograms and low-frequency energies, float32[FEATURES]."""
    hist = [np.histogram(c, bins=8, range=(0, 256))[0] for c in img]
    energy = np.abs(np.fft.rfft2(img.astype(np.float32)))[:, :2, :4].mean(axis=(1, 2))
    feats = np.concatenate([np.concatenate(hist), energy, [img.mean(), img.std()]])
    out = np.zeros(FEATURES, dtype=np.float32)
    out[: min(FEATURES, feats.size)] = feats[:FEATURES]
    return out


def preprocess(seed: int, *, passes: int = 16) -> Iterator[dict[str, Any]]:
    """Seed → ``len(VARIANTS)`` records of image uint8[3,64,64], label, features, variant."""
    img = _synthesise(seed)
    for _ in range(passes):
        img = _blur(img)
        img = img + 0.05 * _band_pass(img, 0.02, 0.25)
    img = img.reshape(3, OUT, SIZE // OUT, OUT, SIZE // OUT).mean(axis=(2, 4))
    mean = img.mean(axis=(1, 2), keepdims=True)
    std = img.std(axis=(1, 2), keepdims=True) + 1e-6
    image = np.clip((img - mean) / std * 40.0 + 128.0, 0, 255).astype(np.uint8)
    label = seed % 10
    views = {
        "identity": image,
        "flip_h": image[:, :, ::-1],
        "flip_v": image[:, ::-1, :],
        "transpose": image.transpose(0, 2, 1),
    }
    for name in VARIANTS:
        view = np.ascontiguousarray(views[name])
        yield {"image": view, "label": label, "features": _features(view), "variant": name}
