"""The crc32c every checksum of snap goes through (``snapshot_cli/crc.py``): the compiled one,
folded with VPCLMULQDQ where the CPU has AVX-512 (``snapshot_cli/_decode_crc32c.h``), gives
the crc32c package's values for any bytes, length, alignment and starting crc."""

from __future__ import annotations

from pathlib import Path

import crc32c as package
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from snapshot_cli import _decode, crc

# lengths around every boundary of the folded path: below its 512-byte minimum, its 256-byte
# blocks and their tails, and long runs of blocks
LENGTHS = st.one_of(
    st.integers(0, 1_100),
    st.integers(0, 12).map(lambda k: 512 + 256 * k + 0),
    st.integers(0, 12).flatmap(lambda k: st.integers(512 + 256 * k - 17, 512 + 256 * k + 17)),
    st.integers(1_100, 300_000),
)
FILLS = st.sampled_from(["random", "zeros", "ones", "alternating"])


def _bytes(seed: int, length: int, fill: str) -> bytes:
    if fill == "zeros":
        return bytes(length)
    if fill == "ones":
        return b"\xff" * length
    if fill == "alternating":
        return (b"\xaa\x55" * (length // 2 + 1))[:length]
    return np.random.default_rng(seed).bytes(length)


def test_the_compiled_crc_is_the_one_used_here() -> None:
    """This suite runs on Linux x86-64: snap's checksums are the compiled ones, folded where
    the CPU has the instructions (a fold that disagreed with the three streams on its check
    at import would be turned off, silently slower: that fails here)."""
    assert crc.COMPILED and crc.crc32c is _decode.crc32c
    flags = set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    can_fold = {"avx512f", "avx512vl", "vpclmulqdq", "pclmulqdq", "sse4_2"} <= flags
    assert can_fold == _decode.CRC_FOLD
    assert can_fold == crc.FOLDED


@settings(max_examples=400, deadline=None)
@given(st.integers(0, 2**32), LENGTHS, st.integers(0, 63), st.integers(0, 2**32 - 1), FILLS)
def test_every_path_gives_the_crc32c_packages_value(
    seed: int, length: int, skip: int, start: int, fill: str
) -> None:
    """Folded (where CRC_FOLD), three streams alone, and the package: one value, continuing
    any crc, from any alignment (``skip`` bytes into the buffer)."""
    part = memoryview(_bytes(seed, length + skip, fill))[skip:]
    want = package.crc32c(part, start)
    assert crc.crc32c(part, start) == want
    assert _decode.crc32c(part, start, True) == want
    assert _decode.crc32c(part, start, False) == want


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32), st.integers(512, 70_000), st.data())
def test_a_flipped_bit_anywhere_changes_the_crc(
    seed: int, length: int, data: st.DataObject
) -> None:
    """A crc32c tells every single-bit change: one in a folded block, in the tail after the
    blocks, or in the first bytes (where the starting crc is folded in)."""
    message = bytearray(_bytes(seed, length, "random"))
    right = crc.crc32c(message)
    bit = data.draw(st.integers(0, 8 * length - 1))
    message[bit // 8] ^= 1 << (bit % 8)
    assert crc.crc32c(message) != right
    assert crc.crc32c(message) == package.crc32c(message)


def test_a_message_split_anywhere_continues_to_the_same_crc() -> None:
    """Checksums taken piece by piece (a record batch's head, then its buffers) are the
    whole message's, wherever the pieces meet a folded block."""
    message = _bytes(7, 20_000, "random")
    whole = package.crc32c(message)
    for cut in (0, 1, 255, 256, 511, 512, 513, 4096, 19_999, 20_000):
        assert crc.crc32c(message[cut:], crc.crc32c(message[:cut])) == whole


def test_any_buffer_is_read_in_place() -> None:
    """What the loader passes: read-only maps' views, numpy arrays, bytearrays, slices."""
    values = np.arange(100_000, dtype=np.int64)
    want = package.crc32c(values.tobytes())
    assert crc.crc32c(values) == want
    assert crc.crc32c(memoryview(values.tobytes())) == want
    assert crc.crc32c(bytearray(values.tobytes())) == want
