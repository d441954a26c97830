"""What ``snap verify`` reports: each shard's check and the whole snapshot's verdict.
Pure: the checks are :mod:`.verify`'s, the snapshot's own files :mod:`.verify_files`'s."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import StorageError


class Lost(str):
    """A problem a create of the same snapshot repairs (it computes the shard's task again):
    the shard is missing or cut short. Any other problem is a plain ``str``."""


MISSING = Lost("missing")  # a shard's problem when it is not there


class Refused(str):
    """A problem found before any byte was read: the shard's path is a link out of the
    snapshot, a FIFO or a device, which every reader refuses unopened."""


class Contradicted(str):
    """A shard whose bytes are as written (its crc32c is the manifest's) yet whose schema
    differs from the manifest's: the manifest's schema is damaged, not the shard (the
    problem is how the schemas differ; :func:`.verify.verify` reports it as the manifest's)."""


@dataclass
class ShardCheck:
    """The outcome for one shard. ``problem`` is None when it is intact."""

    path: str
    url: str
    bytes: int
    records: int
    check: str  # "full", "storage-crc32c" or "size"
    problem: str | None = None
    unreadable: bool = False  # the storage failed to read it: ``problem`` says how, no damage
    cause: str | None = None  # an unreadable shard's errno name (EIO), else the error's class

    @property
    def ok(self) -> bool:
        return self.problem is None

    @property
    def damaged(self) -> bool:
        return self.problem is not None and not self.unreadable

    @property
    def read(self) -> bool:  # (its bytes checked: not missing, cut short, refused, unreadable)
        return not (self.lost or self.unreadable or isinstance(self.problem, Refused))

    @property
    def lost(self) -> bool:
        """Missing or cut short (another size than the manifest's): what a create of the
        same snapshot computes again, where other damage needs the shard deleted first."""
        return isinstance(self.problem, Lost)


def sizes_only(checks: list[ShardCheck]) -> list[str]:
    """The note of a ``--fast`` check that compared sizes only, if it did: an intact shard
    checked by its size (the storage gave no crc32c; a missing or cut one is checked by its
    size whatever the storage reports)."""
    if not any(c.check == "size" and c.ok for c in checks):
        return []
    return [
        "this storage reports no crc32c, so --fast compared sizes only; run snap verify "
        "without --fast to read and check every byte"
    ]


@dataclass
class VerifyReport:
    url: str
    fast: bool
    seconds: float
    shards: list[ShardCheck] = field(default_factory=list)
    unloadable: list[str] = field(default_factory=list)  # (see stored_types.unloadable_columns)
    problems: list[str] = field(default_factory=list)  # of its own files (verify_files)
    notes: list[str] = field(default_factory=list)  # what is not damage (a missing task table)
    replaced_by: int | None = None  # the version that replaced the one checked, while it was

    @property
    def damaged(self) -> list[ShardCheck]:
        return [s for s in self.shards if s.damaged]

    @property
    def unreadable(self) -> list[ShardCheck]:
        return [s for s in self.shards if s.unreadable]

    @property
    def ok(self) -> bool:
        return not (self.damaged or self.unloadable or self.unreadable or self.problems)

    def unreadable_error(self) -> StorageError | None:
        """One line for the shards the storage failed to read (the report lists them)."""
        unreadable = self.unreadable
        if len(unreadable) <= 1:
            return StorageError(unreadable[0].problem) if unreadable else None
        return StorageError(
            f"{len(unreadable)} of {len(self.shards)} shards of {self.url} could not be read "
            f"(listed above; none is known to be damaged), the first: {unreadable[0].problem}"
        )

    @property
    def checks(self) -> dict[str, int]:
        """How many shards got each check: not those missing, refused or unreadable."""
        out: dict[str, int] = {}
        for s in self.shards:
            if not (s.problem == MISSING or s.unreadable or isinstance(s.problem, Refused)):
                out[s.check] = out.get(s.check, 0) + 1
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.url,
            "ok": self.ok,
            "fast": self.fast,
            "num_shards": len(self.shards),
            "num_damaged": len(self.damaged),
            "num_unreadable": len(self.unreadable),
            "checks": self.checks,
            "bytes_checked": sum(s.bytes for s in self.shards if s.check == "full" and s.read),
            "seconds": round(self.seconds, 3),
            "damaged": [{**asdict(s), "ok": s.ok, "lost": s.lost} for s in self.damaged],
            "unreadable": [asdict(s) for s in self.unreadable],
            "unloadable": self.unloadable,
            "problems": self.problems,
            "notes": self.notes,
            "replaced_by": self.replaced_by,
            "shards": [{**asdict(s), "ok": s.ok, "lost": s.lost} for s in self.shards],
        }
