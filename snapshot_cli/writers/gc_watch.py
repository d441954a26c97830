"""A ``snap gc`` that runs while another writer holds the lease (gc keeps that writer's run
and removes without the lease): what it must not take from a writer that takes the lease
after it looked.

gc sees the live writer once, then lists and removes. If that writer commits and lets go
and another create takes the lease meanwhile (a queued create, a sweep's next step), the
new writer's run and shards were, to gc, "state of a dead run" and "in no committed
version": gc removed them (a concurrency probe; on GCS the writer then committed a version
with shards missing, which its commit now refuses). So gc, not holding the lease:

- never lists a shard named by a later writer (its name carries the lease epoch of the
  create that wrote it, above the one gc saw) as garbage;
- looks at the lease again before it removes anything, before each run, and every
  ``RECHECK`` shards, and stops where the lease changed hands, saying so: what it had not
  removed is the next gc's to judge.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fsspec import AbstractFileSystem

from .. import layout
from . import lease as lease_mod

if TYPE_CHECKING:
    from .gc_report import Garbage
    from .lease_files import LeaseInfo

RECHECK = 64  # shards removed between two looks at the lease
STOPPED = (
    "another writer took the lease while gc ran, so gc stopped before removing the rest "
    "(which may be that writer's): run snap gc again"
)


class Watch:
    """The lease as gc saw it (``seen``: the live writer's, gc not holding the lease)."""

    def __init__(self, fs: AbstractFileSystem, root: str, seen: LeaseInfo) -> None:
        self.fs, self.root, self.seen = fs, root, seen

    def spare(self, garbage: list[Garbage]) -> list[Garbage]:
        """``garbage`` without the shards of writers after the one seen."""
        return [
            g
            for g in garbage
            if g.kind not in ("shard", "upload")
            or (w := layout.shard_writer(g.path.rsplit("/", 1)[-1])) is None
            or w <= self.seen.epoch
        ]

    def taken_over(self) -> bool:
        """Whether the lease is another's now than the one seen (a newer epoch)."""
        now = lease_mod.current(self.fs, self.root)
        return now is not None and now.epoch != self.seen.epoch

    def due(self, done: int, g: Garbage) -> bool:
        """Whether to look at the lease before removing ``g``, the ``done``-th."""
        return g.kind == "run" or done % RECHECK == 0
