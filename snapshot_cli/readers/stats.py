"""The loader's counters, and the rates and stage times users read from ``stats()``."""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class Stats:
    """Counters of one loader. ``to_dict`` gives the rates users read."""

    records: int = 0
    bytes: int = 0
    batches: int = 0
    started: float = 0.0
    consumer_wait: float = 0.0
    read_seconds: float = 0.0  # wall time of window loads (decode + copy), summed
    gather_seconds: float = 0.0
    map_seconds: float = 0.0
    process_cpu_seconds: float = 0.0  # CPU time of decode processes (processes=N)
    process_bytes_read: int = 0  # bytes decode processes read
    windows: int = 0
    windows_read_ahead: int = 0  # of them, read ahead from disk (:mod:`.readahead`)
    window_rows: int = 0
    parallel_reads: int = 0
    prefetch: int = 0
    sources: list[str] = field(default_factory=list)  # a mixture's snapshots, by name
    per_source: list[int] = field(default_factory=list)  # records delivered from each

    def add_sources(self, counts: np.ndarray | tuple[int, ...]) -> None:
        if not self.per_source:
            self.per_source = [0] * len(counts)
        for i, c in enumerate(counts.tolist() if isinstance(counts, np.ndarray) else counts):
            self.per_source[i] += c

    def restore(self, saved: Stats) -> None:
        """The counters as ``saved``, a copy taken before a batch was only peeked at
        (``to_tf()``'s first batch of a map's: it counted as delivered, a probe)."""
        self.__dict__.update(copy.deepcopy(saved.__dict__))

    def to_dict(self) -> dict[str, Any]:
        out = self._rates()
        if self.sources:
            counts = self.per_source or [0] * len(self.sources)
            out["sources"] = dict(zip(unique_names(self.sources), counts, strict=True))
        return out

    def _rates(self) -> dict[str, Any]:
        elapsed = max(1e-9, time.perf_counter() - self.started) if self.started else 0.0
        rate = (lambda x: x / elapsed) if elapsed else (lambda x: 0.0)
        return {
            "records": self.records,
            "batches": self.batches,
            "bytes": self.bytes,
            "seconds": round(elapsed, 4),
            "records_per_s": round(rate(self.records), 1),
            "bytes_per_s": round(rate(self.bytes), 1),
            "consumer_wait_s": round(self.consumer_wait, 4),
            "input_bound_pct": round(100 * self.consumer_wait / elapsed, 2) if elapsed else 0.0,
            "stage_seconds": {
                "read_decode": round(self.read_seconds, 4),
                "gather": round(self.gather_seconds, 4),
                "map": round(self.map_seconds, 4),
                "decode_process_cpu": round(self.process_cpu_seconds, 4),
            },
            "windows": self.windows,
            "windows_read_ahead": self.windows_read_ahead,
            "settings": {
                "window_rows": self.window_rows,
                "parallel_reads": self.parallel_reads,
                "prefetch": self.prefetch,
            },
        }


def records_in(batch: dict[str, Any]) -> int:
    """How many records a batch holds: the length of its first column that has one (a
    ``map`` may put a number, a string or a 0-d array first, or return no column)."""
    for value in batch.values():
        if getattr(value, "ndim", 1) == 0 or isinstance(value, (str, bytes)):
            continue
        try:
            return len(value)
        except TypeError:
            continue
    return 0


def unique_names(names: list[str]) -> list[str]:
    """``names`` with a repeated one numbered ("s", "s#2"): a snapshot mixed with itself, or
    two versions of one path, counted as one source (the last one's count)."""
    seen: dict[str, int] = {}
    out = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
    return out
