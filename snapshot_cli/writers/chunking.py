"""Which inputs make a task: boundaries that survive insertions and deletions (pure).

A task is the unit of work and of reuse: an incremental ``snap create`` recomputes only the
tasks whose inputs changed. So the boundaries between tasks must not depend on an input's
place in the list ("every 16 inputs" would move every later boundary when one input is
added): as in content-defined chunking, whether input ``j`` ends a task depends on its
neighbourhood only. Each input's name (file URL, or the item's JSON) is hashed, and input
``j`` ends a task when its hash is the largest within ``w`` inputs on either side (*local
maximum* chunking): tasks then hold ``2w + 1`` inputs on average, never fewer than ``w + 1``,
and rarely more than three times the average, where a
threshold on the hash alone would make a tenth of them over twice as long. An input of
``bytes`` or more ends a task and is one of its own (large files). Changing an input's
contents changes only the task that holds it. Adding or removing one changes the task that
holds it, or two when it moves a boundary, rarely three: only inputs within ``w`` of it can
gain or lose a boundary (a simulation of 3,000 deletions among 400 inputs changed one task
2,866 times, two 126 times and three 8 times). Every other task keeps exactly its inputs,
and the reuse follows.

The targets are chosen once, when a snapshot is first made (from its inputs' count and
sizes: from about ``MIN_TASKS`` to four times as many tasks, as a task's boundaries in a
window of ``2 * window + 1`` inputs average one input fewer than the power of two (every
input ends a task when it is 2), at most ``MAX_ITEMS_PER_TASK`` inputs,
about ``TASK_INPUT_BYTES`` each), stored in its manifest and kept by every later create; a
create from scratch over the same inputs with the same targets makes the same tasks.
``inputs_per_task=k`` instead fixes groups of exactly ``k`` inputs in order (``1``: one task
per input, stable by nature; larger: an insertion moves the groups after it).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..manifest import canonical_json

# 64: parallel slack for machines of up to ~32 cores, and tasks small enough that adding 5 %
# more inputs to a few hundred computes little more than those (measured: 0.09x the full
# create with 64, 0.11x with 32: benchmarks/create.py --incremental)
MIN_TASKS = 64
TASK_INPUT_BYTES = 64 << 20
MAX_ITEMS_PER_TASK = 1024


def input_name(item: Any) -> str:
    """What an input is called for chunking: a file's URL, or an item's canonical JSON."""
    return item if isinstance(item, str) else canonical_json(item)


def _hash(name: str) -> int:
    # surrogateescape: a local file name that is not UTF-8 reaches here as Python decodes it
    data = name.encode("utf-8", "surrogateescape")
    return int.from_bytes(hashlib.sha256(data).digest()[:8], "little")


def window_max(h: np.ndarray, w: int, pad: int = 0) -> np.ndarray:
    """``max(h[j - w : j + w + 1])`` for every ``j``, the list's ends padded with ``pad``, in
    O(n log w) vectorised steps (maxima of doubling spans, two of which cover a window)."""
    n = len(h)
    if w == 0:
        return h.copy()
    edge = np.full(w, pad, h.dtype)
    padded = np.concatenate([edge, h, edge])
    span, best = 1, padded
    while 2 * span <= 2 * w + 1:  # best[i] = max(padded[i : i + 2 * span])
        best = np.maximum(best[:-span], best[span:])
        span *= 2
    first = best[:n]  # max(padded[j : j + span])
    last = best[2 * w + 1 - span : 2 * w + 1 - span + n]  # max ending at padded[j + 2w]
    return np.maximum(first, last)


@dataclass(frozen=True)
class Chunking:
    """How inputs are grouped into tasks. ``fixed``: groups of exactly ``inputs`` in order;
    else content-defined, ``inputs`` on average (``bytes``: of input per task, 0 for none)."""

    inputs: int
    bytes: int = TASK_INPUT_BYTES
    fixed: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.inputs, bool) or not isinstance(self.inputs, int) or self.inputs < 1:
            raise ValueError(f"inputs per task must be an integer >= 1, got {self.inputs!r}")
        if isinstance(self.bytes, bool) or not isinstance(self.bytes, int) or self.bytes < 0:
            raise ValueError(f"bytes per task must be an integer >= 0, got {self.bytes!r}")

    @classmethod
    def choose(cls, sizes: list[int], inputs_per_task: int | None = None) -> Chunking:
        """The targets for a new snapshot of inputs of ``sizes`` bytes (0 where unknown)."""
        if inputs_per_task is not None:
            return cls(inputs_per_task, 0, fixed=True)
        n = len(sizes)
        if n == 0:
            return cls(1)
        tasks = max(MIN_TASKS, math.ceil(sum(sizes) / TASK_INPUT_BYTES),
                    math.ceil(n / MAX_ITEMS_PER_TASK))  # fmt: skip
        average = max(1.0, n / min(n, tasks))
        # a power of two, at most that average (so from about MIN_TASKS to four times as
        # many tasks: parallel slack, and a small change computes little): a snapshot that grows
        # a little keeps its targets if made again
        return cls(min(MAX_ITEMS_PER_TASK, 1 << max(0, math.floor(math.log2(average)))))

    @property
    def window(self) -> int:
        """Inputs on either side an input's hash must exceed to end a task."""
        return max(0, (self.inputs - 1) // 2)

    def plan(self, names: list[str], sizes: list[int]) -> list[range]:
        """The tasks, as contiguous ranges of input indices in input order; no inputs: one
        empty task (the function is called once, with no argument)."""
        n = len(names)
        if n == 0:
            return [range(0)]
        if self.fixed:
            k = self.inputs
            return [range(i, min(i + k, n)) for i in range(0, n, k)]
        h = np.fromiter((_hash(name) for name in names), np.uint64, n)
        # Beyond the ends, the largest hash: no input within w of an end ends a task (but the
        # last), so inputs added after the last (a new day of files) or before the first
        # change the tasks at that end only, never a boundary further in.
        ends = h == window_max(h, self.window, pad=(1 << 64) - 1)
        if self.bytes:
            big = np.asarray(sizes, np.int64) >= self.bytes
            ends |= big
            ends[:-1] |= big[1:]  # a large input is a task of its own
        ends[-1] = True
        cuts = np.flatnonzero(ends) + 1
        return [range(a, b) for a, b in zip([0, *cuts[:-1].tolist()], cuts.tolist(), strict=True)]

    def to_json(self) -> dict[str, Any]:
        return {"inputs": self.inputs, "bytes": self.bytes, "fixed": self.fixed}

    @classmethod
    def from_json(cls, d: Any) -> Chunking:
        """Raises ValueError (a ManifestError to the caller) for anything else."""
        if not isinstance(d, dict) or set(d) != {"inputs", "bytes", "fixed"}:
            raise ValueError(f"chunking must be {{inputs, bytes, fixed}}, got {d!r}")
        if not isinstance(d["fixed"], bool):
            raise ValueError(f"chunking.fixed must be true or false, got {d['fixed']!r}")
        return cls(d["inputs"], d["bytes"], d["fixed"])
