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


class _Work:
    """Buffers for filtering one 128x128 float32 channel, reused by every pass.

    Every operation writes into these (``out=``) instead of allocating temporaries. Fresh
    arrays of 64-400 KiB per operation make glibc return memory to the kernel and fault it
    in again: a third of the time became kernel page-fault time, which also scales badly
    across processes in a VM. The work is then plain single-threaded numpy compute.
    """

    def __init__(self) -> None:
        self.x = np.empty((SIZE, SIZE), np.float32)
        self.pad = np.empty((SIZE + 4, SIZE + 4), np.float32)
        self.rows = np.empty((SIZE, SIZE + 4), np.float32)
        self.tmp_rows = np.empty((SIZE, SIZE + 4), np.float32)
        self.tmp = np.empty((SIZE, SIZE), np.float32)
        self.spec = np.empty((SIZE, SIZE // 2 + 1), np.complex64)

    def blur(self) -> None:
        """One separable 5-tap blur of ``x`` in place (edges replicated)."""
        x, pad, rows, tr, tmp = self.x, self.pad, self.rows, self.tmp_rows, self.tmp
        pad[2:-2, 2:-2] = x
        pad[:2, 2:-2] = x[0]
        pad[-2:, 2:-2] = x[-1]
        pad[:, :2] = pad[:, 2:3]
        pad[:, -2:] = pad[:, -3:-2]
        np.multiply(pad[0:SIZE], _KERNEL[0], out=rows)
        for i in range(1, 5):
            rows += np.multiply(pad[i : i + SIZE], _KERNEL[i], out=tr)
        np.multiply(rows[:, 0:SIZE], _KERNEL[0], out=x)
        for i in range(1, 5):
            x += np.multiply(rows[:, i : i + SIZE], _KERNEL[i], out=tmp)

    def add_band(self, gain: float) -> None:
        """``x += gain * band_pass(x)``: the mid spatial frequencies (``_BAND``) of ``x``."""
        spec = np.fft.rfft(self.x, axis=1, out=self.spec)
        np.fft.fft(spec, axis=0, out=spec)
        spec *= _BAND
        np.fft.ifft(spec, axis=0, out=spec)
        np.fft.irfft(spec, n=SIZE, axis=1, out=self.tmp)
        self.tmp *= gain
        self.x += self.tmp


def _radius() -> np.ndarray:
    fy = np.fft.fftfreq(SIZE)[:, None]
    fx = np.fft.rfftfreq(SIZE)[None, :]
    return np.sqrt(fy * fy + fx * fx)


_BAND = ((_radius() >= 0.02) & (_radius() < 0.25)).astype(np.float32)  # cycles per pixel
_YY, _XX = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32) / SIZE


def _channel(work: _Work, rng: np.random.Generator, passes: int) -> np.ndarray:
    """Synthesise one 128x128 channel (waves + noise), filter it, downsample to 64x64."""
    fy, fx = rng.uniform(1.0, 8.0, size=2)
    x = work.x
    rng.standard_normal(out=x, dtype=np.float32)
    x *= 0.5
    np.multiply(_YY, 2 * np.pi * fy, out=work.tmp)
    work.tmp += (2 * np.pi * fx) * _XX
    x += np.sin(work.tmp, out=work.tmp)
    for _ in range(passes):
        work.blur()
        work.add_band(0.05)
    return x.reshape(OUT, SIZE // OUT, OUT, SIZE // OUT).mean(axis=(1, 3))


def _features(img: np.ndarray) -> np.ndarray:
    """Per-channel intensity histograms and low-frequency energies, float32[FEATURES]."""
    hist = [np.histogram(c, bins=8, range=(0, 256))[0] for c in img]
    energy = np.abs(np.fft.rfft2(img.astype(np.float32)))[:, :2, :4].mean(axis=(1, 2))
    feats = np.concatenate([np.concatenate(hist), energy, [img.mean(), img.std()]])
    out = np.zeros(FEATURES, dtype=np.float32)
    out[: min(FEATURES, feats.size)] = feats[:FEATURES]
    return out


def preprocess(seed: int, *, passes: int = 36) -> Iterator[dict[str, Any]]:
    """Seed → ``len(VARIANTS)`` records of image uint8[3,64,64], label, features, variant."""
    rng = np.random.default_rng(seed)
    work = _Work()
    img = np.stack([_channel(work, rng, passes) for _ in range(3)])
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
