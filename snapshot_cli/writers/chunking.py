"""Which inputs make a task: boundaries that survive insertions and deletions (pure).

A task is the unit of work and of reuse: an incremental ``snap create`` recomputes only the
tasks whose inputs changed. So the boundaries between tasks must not depend on an input's
place in the list ("every 16 inputs" would move every later boundary when one input is
added): as in content-defined chunking, whether input ``j`` ends a task depends on that input
alone — its name (file URL, or the item's JSON) and its size. An input ends a task when the
hash of its name falls under a threshold that makes tasks hold ``inputs`` inputs on average
(``bytes`` of input, for large files). Adding, removing or changing one input thus changes
one task, or two when it is a boundary; every other task keeps its inputs, and the reuse
follows.

The targets are chosen once, when a snapshot is first made (from its inputs' count and
sizes, as many tasks as the machine has use for: at least ``MIN_TASKS``, at most
``MAX_ITEMS_PER_TASK`` inputs, about ``TASK_INPUT_BYTES`` each), stored in its manifest and
kept by every later create; a create from scratch over the same inputs with the same targets
makes the same tasks. ``inputs_per_task=k`` instead fixes groups of exactly ``k`` inputs in
order (``1``: one task per input, stable by nature; larger: an insertion moves the groups
after it).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

from ..manifest import canonical_json

MIN_TASKS = 32
TASK_INPUT_BYTES = 64 << 20
MAX_ITEMS_PER_TASK = 1024
LONGEST = 8  # a task is cut after this many times its average inputs (vanishingly rare)
_ALL = 1 << 64


def input_name(item: Any) -> str:
    """What an input is called for chunking: a file's URL, or an item's canonical JSON."""
    return item if isinstance(item, str) else canonical_json(item)


def _hash(name: str) -> int:
    return int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "little")


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
        # a power of two: a snapshot that grows a little keeps its targets if made again
        return cls(min(MAX_ITEMS_PER_TASK, 1 << max(0, round(math.log2(average)))))

    def plan(self, names: list[str], sizes: list[int]) -> list[range]:
        """The tasks, as contiguous ranges of input indices in input order; no inputs: one
        empty task (the function is called once, with no argument)."""
        n = len(names)
        if n == 0:
            return [range(0)]
        if self.fixed:
            k = self.inputs
            return [range(i, min(i + k, n)) for i in range(0, n, k)]
        out, start = [], 0
        longest = LONGEST * self.inputs
        for j, (name, size) in enumerate(zip(names, sizes, strict=True)):
            p = 1 / self.inputs + (size / self.bytes if self.bytes else 0.0)
            if j + 1 == n or j + 1 - start >= longest or _hash(name) < min(_ALL, p * _ALL):
                out.append(range(start, j + 1))
                start = j + 1
        return out

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
