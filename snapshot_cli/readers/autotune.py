"""AUTOTUNE for the loader: read parallelism and prefetch depth from observed rates (pure).

- Read parallelism: hill climbing on the decode rate of each window (bytes per second of
  wall time). Start at the number of cores; after each window step once in the current
  direction; keep a step that made it faster by more than ``tolerance``, otherwise turn
  around. It settles within a few windows and follows changes (other processes on the
  machine, slower storage).
- Prefetch depth: grows by one whenever the consumer had to wait for a batch while the
  producer was not waiting on the consumer, up to a memory budget.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ParallelismTuner:
    """Chooses how many threads decode a window. ``fixed`` disables tuning.

    Alternates between the best known setting and a one-step exploration next to it. An
    exploration that is faster by more than ``tolerance`` becomes the best; one that is not
    turns the direction around and doubles the wait before the next one (up to 16 windows),
    so a settled loader spends few windows at a worse setting.
    """

    start: int
    low: int = 1
    high: int = 16
    tolerance: float = 0.10
    fixed: bool = False
    current: int = field(init=False)
    best: int = field(init=False)
    _best_rate: float = field(default=0.0, init=False)
    _direction: int = field(default=1, init=False)
    _period: int = field(default=1, init=False)
    _wait: int = field(default=0, init=False)
    history: list[tuple[int, float]] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self.current = self.best = max(self.low, min(self.high, self.start))

    def observe(self, rate: float) -> int:
        """Record the rate achieved with ``current`` threads; return the next setting."""
        self.history.append((self.current, rate))
        if self.fixed or self.low == self.high:
            return self.current
        if self.current == self.best:
            # Re-measure the best setting (smoothed) so the baseline follows the machine.
            self._best_rate = rate if self._best_rate == 0 else (self._best_rate + rate) / 2
        elif rate > self._best_rate * (1 + self.tolerance):
            self.best, self._best_rate, self._period = self.current, rate, 1
        else:
            self._direction = -self._direction
            self._period = min(16, self._period * 2)
            self._wait = self._period
        if self.current != self.best or self._wait > 0:
            self._wait = max(0, self._wait - 1)
            self.current = self.best
            return self.current
        nxt = self.best + self._direction
        if not self.low <= nxt <= self.high:
            self._direction = -self._direction
            nxt = self.best + self._direction
        self.current = nxt
        return self.current


@dataclass
class PrefetchTuner:
    """Chooses how many ready batches are kept ahead of the consumer."""

    start: int = 2
    high: int = 32
    fixed: bool = False
    current: int = field(init=False)

    def __post_init__(self) -> None:
        self.current = max(1, min(self.high, self.start))

    def consumer_waited(self) -> int:
        if not self.fixed and self.current < self.high:
            self.current += 1
        return self.current
