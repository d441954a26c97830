"""Dealing an epoch's positions to its sources in proportion (pure; see :mod:`.elastic`, 2).

Position ``q`` belongs to source ``i`` when its key ``A q mod 2**48`` falls in source ``i``'s
interval, the intervals chosen so that exactly ``n_i`` of the epoch's positions fall in each:
a low-discrepancy sequence, so every stretch holds the sources in their proportions, and the
positions of a source before ``q`` are counted in O(log q) steps (:func:`floor_sum`).
"""

from __future__ import annotations

import numpy as np

M_BITS = 48
M = 1 << M_BITS
A = (int(0.6180339887498949 * M) | 1) % M  # odd: the positions of an epoch get distinct keys


def floor_sum(n: int, m: int, a: int, b: int) -> int:
    """``sum(floor((a*i + b) / m) for i in range(n))`` for ``n, a, b >= 0, m >= 1``, exactly,
    in O(log m) steps (the Euclid-like reduction of AtCoder's library)."""
    total = 0
    while True:
        if a >= m:
            total += n * (n - 1) // 2 * (a // m)
            a %= m
        if b >= m:
            total += n * (b // m)
            b %= m
        y = a * n + b
        if y < m:
            return total
        n, b = divmod(y, m)
        m, a = a, m


def count_below(bound: int, q: int) -> int:
    """How many positions ``p < q`` have a key ``A p mod M`` below ``bound``."""
    if q <= 0 or bound <= 0:
        return 0
    if bound >= M:
        return q
    at_or_above = floor_sum(q, M, A, M - bound) - floor_sum(q, M, A, 0)
    return q - at_or_above


def keys(start: int, stop: int) -> np.ndarray:
    """The keys ``A p mod M`` of positions ``[start, stop)`` (uint64 arithmetic wraps modulo
    2**64, of which M is a divisor)."""
    p = np.arange(start, stop, dtype=np.uint64)
    return (p * np.uint64(A)) & np.uint64(M - 1)


def interleave_bounds(counts: list[int]) -> list[int]:
    """Key bounds ``b_0 = 0 <= b_1 <= ... <= b_m = M``: exactly ``counts[i]`` of the positions
    ``[0, sum(counts))`` have a key in ``[b_i, b_{i+1})``."""
    total = sum(counts)
    if total > M:
        raise ValueError(f"an epoch of {total} records is more than the interleave can deal")
    bounds, below = [0], 0
    for c in counts[:-1]:
        below += c
        lo, hi = bounds[-1], M  # the smallest bound with exactly `below` keys under it
        while lo < hi:
            mid = (lo + hi) // 2
            if count_below(mid, total) >= below:
                hi = mid
            else:
                lo = mid + 1
        bounds.append(lo)
    return [*bounds, M]
