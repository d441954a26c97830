"""What a loader's ``map`` returned, checked (:class:`MapOutputs`: not in the memory of a
batch still in use; :func:`not_a_dict_hint`: what to return instead of what is not a dict),
and the rng a map that takes one gets for each batch (:func:`map_rng`)."""

from __future__ import annotations

import weakref
from collections import deque
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from .loader import Batch


class MapOutputs:
    """The arrays the map returned for the last few batches, while those are in use.

    A map that fills the same buffer for every batch (``np.add(a, b, out=buf)``, a
    preallocated array) is right where a batch is used before the next one is made, but a
    loader's map runs ahead of the loop, in threads: every batch the loop got would change
    under it. So a column in the memory of the same column of one of the last ``KEEP`` batches,
    while that batch is in use (its weak reference alive) and no longer holds the values it
    was returned with (a sample of them, kept), is an error naming it, not wrong batches. An
    array returned again unchanged (a constant: positions, a mask) is fine, and so is memory
    whose batch was let go, as the loader's own is reused. Numpy arrays and torch tensors in
    host memory are tracked (``np.may_share_memory``: 0.5 us a pair).
    """

    KEEP, SAMPLES = 2, 32

    def __init__(self) -> None:
        self.live: deque[tuple[int, dict[str, tuple[weakref.ref[Any], bytes]]]] = deque(
            maxlen=self.KEEP
        )
        self.places: dict[int, np.ndarray] = {}  # by array size: where the samples are

    def check(self, out: Batch, index: int, given: frozenset[str] = frozenset()) -> None:
        mine: dict[str, tuple[weakref.ref[Any], bytes]] = {}
        for name, value in out.items():
            if name in given:  # (the loader's own column, returned as it came)
                continue
            array = host_array(value)
            if array is None or not array.nbytes:
                continue
            for before, refs in self.live:
                kept = refs.get(name)
                if kept is None:
                    continue
                old = host_array(kept[0]())
                if old is None or not np.may_share_memory(array, old):
                    continue
                if self._sample(old) != kept[1]:
                    raise ValueError(
                        f"map returned column {name!r} of batch {index} in the memory of what "
                        f"it returned for batch {before}, which is still in use and changed "
                        "(a buffer the map fills each time?): the map runs ahead of your loop, "
                        "in threads, so a batch would change under you; return new arrays "
                        "(np.add(a, b) rather than np.add(a, b, out=buf), or buf.copy())"
                    )
            mine[name] = (weakref.ref(value), self._sample(array))
        self.live.append((index, mine))

    def _sample(self, array: np.ndarray) -> bytes:
        places = self.places.get(array.size)
        if places is None:
            if len(self.places) > 64:  # a map of many sizes: keep a few
                self.places.clear()
            step = max(1, array.size // self.SAMPLES)
            places = np.arange(0, array.size, step)[: 2 * self.SAMPLES]
            self.places[array.size] = places
        return array.flat[places].tobytes()


def map_rng(seed: int, epoch: int, rank: int, index: int) -> np.random.Generator:
    """A map's rng for batch ``index``: ``np.random.default_rng([seed, epoch, rank, index,
    0x6D6170])``, given as an array of uint32 where every number fits one (numpy reads a
    list's ints as those words: the same rng, in 5 us instead of 9.5)."""
    key = (seed, epoch, rank, index, 0x6D6170)
    if min(key) < 0 or max(key) >> 32:  # (a number of more words: numpy splits it itself)
        return np.random.default_rng(list(key))
    return np.random.default_rng(np.array(key, np.uint32))


def host_array(value: Any) -> np.ndarray | None:
    """The numpy view of a column a map returned: an array, or a torch tensor in host memory
    (a torch user's map may fill one with ``torch.add(a, b, out=buf)``); else None."""
    if type(value) is np.ndarray:
        return value
    if type(value).__module__ == "torch" and getattr(value, "device", None) is not None:
        try:
            return value.numpy() if value.device.type == "cpu" else None
        except (RuntimeError, TypeError):  # requires grad, a dtype numpy lacks: not tracked
            return None
    return None


def not_a_dict_hint(out: object) -> str:
    """What a map should return instead of ``out``."""
    if out is None:
        return " (a map that changes the batch in place must still return it)"
    kind = type(out).__name__
    if kind == "DataFrame" and hasattr(out, "columns"):
        return " (a DataFrame: return {c: df[c].to_numpy() for c in df.columns})"
    if kind in ("RecordBatch", "Table") and hasattr(out, "schema"):
        return f" (a {kind}: return {{n: c.to_numpy() for n, c in zip(t.schema.names, t.columns)}})"
    if isinstance(out, (tuple, list)):
        return " (name its columns: return {'x': ..., 'y': ...})"
    return ""
