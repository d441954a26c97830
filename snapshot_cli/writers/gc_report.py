"""What ``snap gc`` found and did, as data: each item it removed (or would), the runs and
superseded versions it kept (a version until its retention is over), and the live writer
beside it; ``to_json`` is ``snap gc --json``'s document."""

from __future__ import annotations

import datetime
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Garbage:
    path: str  # relative to the snapshot
    kind: str  # "shard", "run", "version" or "temporary"
    bytes: int
    reason: str


@dataclass
class GcReport:
    url: str
    dry_run: bool
    garbage: list[Garbage] = field(default_factory=list)
    kept_runs: list[str] = field(default_factory=list)
    kept_versions: dict[int, float] = field(default_factory=dict)  # superseded: kept until
    writer: dict[str, Any] | None = None
    note: str | None = None

    @property
    def bytes(self) -> int:
        return sum(g.bytes for g in self.garbage)

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.url,
            "dry_run": self.dry_run,
            "removed" if not self.dry_run else "would_remove": [asdict(g) for g in self.garbage],
            "bytes": self.bytes,
            "kept_runs": self.kept_runs,
            "kept_versions": [
                {"version": v, "until": _iso(t)} for v, t in sorted(self.kept_versions.items())
            ],
            "writer": self.writer,
            "note": self.note,
        }


FOR_GOOD = "9999-12-31T23:59:59+00:00"  # (a kept version's end past what a date can say)


def _iso(seconds: float) -> str:
    """The UTC time ``seconds`` after the epoch; :data:`FOR_GOOD` past the year 9999 (a
    retention such as 10000000d: it raised after gc's removals, which went unreported)."""
    try:
        when = datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)
    except (OverflowError, ValueError, OSError):
        return FOR_GOOD
    return when.isoformat("T", "seconds")
