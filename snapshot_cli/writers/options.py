"""Write options and the task plan (pure)."""

from __future__ import annotations

import logging
import numbers
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..console import named
from ..cores import cores
from ..errors import OptionError
from ..history import MAX_COUNT
from ..progress import counted
from ..units import KiB, MiB, flag, integer, options_dict, parse_size

if TYPE_CHECKING:
    from ..manifest import Manifest

log = logging.getLogger(__name__)

CODECS = {"zstd": "zstd", "lz4": "lz4_frame", "none": None}
DEFAULT_LEVEL = 1  # zstd 1 decodes faster than 3 at nearly the same ratio (measured)
WIDE_BATCH_BYTES = 16 * MiB  # the most a record batch of many columns is made to hold


class _DefaultCodec(str):
    """The ``compression=`` default, told apart from a ``"zstd"`` asked for by identity: a
    grow of an lz4 snapshot given ``--compression zstd`` kept lz4 without a word."""


DEFAULT_CODEC = _DefaultCodec("zstd")


def codec_name(value: Any) -> Any:
    """``compression=`` as :data:`CODECS` names it: any case, ``None`` for "none", and
    pyarrow's ``"lz4_frame"``; anything else as it is (:class:`Compression` refuses it)."""
    if value is None:
        return "none"
    if isinstance(value, str):
        name = value.lower()
        return {arrow: ours for ours, arrow in CODECS.items() if arrow}.get(name, name)
    return value


def codec_text(compression: dict[str, Any]) -> str:
    """``{"codec": "zstd", "level": 1}`` as "zstd level 1" (a note printed its dict)."""
    level = compression.get("level")
    return f"{compression.get('codec')}{f' level {level}' if level is not None else ''}"


@dataclass(frozen=True)
class Compression:
    """How shard buffers are compressed. ``level`` applies to zstd only."""

    codec: str = "zstd"
    level: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.codec, str) or self.codec not in CODECS:
            raise ValueError(f"compression must be one of {sorted(CODECS)}, got {self.codec!r}")
        level = integer(self.level)
        if level is not None and (isinstance(level, bool) or not isinstance(level, int)):
            # (True and 1.5 were written into the manifest, which snap then refused to open)
            raise ValueError(f"level must be an integer from 1 to 22 (zstd's), got {level!r}")
        object.__setattr__(self, "level", level)  # numpy's as int: the manifest is JSON
        if self.level is not None and self.codec != "zstd":
            level_of = named("--level applies to --compression zstd", "level= applies to zstd")
            raise ValueError(f"{level_of} only, not to {self.codec!r}")
        if self.level is not None and not 1 <= self.level <= 22:
            raise ValueError(f"zstd level must be between 1 and 22, got {self.level}")

    def ipc_options(self) -> pa.ipc.IpcWriteOptions:
        """Arrow's options for writing shards: never on its thread pool. A process at its
        memory or thread limit crashed about one time in two where Arrow's pool could not
        start a thread (see ipc_layout.message_batch), and the workers fill the cores anyway
        (the threads a worker may use are ``cores // workers``: README, Tasks and workers)."""
        arrow_codec = CODECS[self.codec]
        if arrow_codec is None:
            return pa.ipc.IpcWriteOptions(compression=None, use_threads=False)
        if self.codec == "zstd":
            codec = pa.Codec("zstd", compression_level=self.effective_level)
        else:
            codec = pa.Codec(arrow_codec)
        return pa.ipc.IpcWriteOptions(compression=codec, use_threads=False)

    @property
    def effective_level(self) -> int | None:
        if self.codec != "zstd":
            return None
        return DEFAULT_LEVEL if self.level is None else self.level

    def to_json(self) -> dict[str, Any]:
        return {"codec": self.codec, "level": self.effective_level}


@dataclass(frozen=True)
class WriteOptions:
    """How records become shards.

    Args:
        shard_size: a shard is closed once it holds this many bytes on disk.
        compression: codec and level of the Arrow IPC buffers.
        batch_bytes: target uncompressed size of one record batch.
        batch_rows: most rows in one record batch. A record batch is the loader's unit of
            shuffle, so it is kept to a small slice of the data even for tiny records.
        column_bytes: a record batch of many columns holds at least this many bytes of each
            (up to :data:`WIDE_BATCH_BYTES` in all) where ``batch_bytes`` would leave fewer:
            each column costs ~100 bytes a record batch on disk (its buffers' layout and
            frames) and its own work to write and to read (5,000 float64 columns made
            record batches of 26 rows, 4.4x the bytes of 1,024 rows and 2-3x the time). 0
            when ``batch_bytes`` is given: it holds as given.
        inputs_per_task: inputs grouped into one task (None: chosen from the input count).
        codec_given: the codec was asked for (any but :data:`DEFAULT_CODEC`, "zstd" included):
            only then does a grow or an up-to-date create of a snapshot of another codec
            say it keeps that one (a nightly grow of an lz4 snapshot said so every night).
    """

    shard_size: int = 256 * MiB
    compression: Compression = field(default_factory=Compression)
    batch_bytes: int = 1 * MiB
    batch_rows: int = 1024
    inputs_per_task: int | None = None
    codec_given: bool = True
    column_bytes: int = 2 * KiB

    def __post_init__(self) -> None:
        column_bytes = integer(self.column_bytes)
        if isinstance(column_bytes, bool) or not isinstance(column_bytes, int) or column_bytes < 0:
            raise ValueError(f"column_bytes must be an integer >= 0, got {column_bytes!r}")
        object.__setattr__(self, "column_bytes", column_bytes)
        for name in ("shard_size", "batch_bytes", "batch_rows", "inputs_per_task"):
            value = integer(getattr(self, name))  # numpy's as int; a bool is no count
            if value is None and name == "inputs_per_task":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
            if name == "inputs_per_task" and value >= MAX_COUNT:  # (a manifest's counts)
                raise ValueError(f"{name} must be below 2**40, got {value!r}")
            object.__setattr__(self, name, value)

    def to_json(self) -> dict[str, Any]:
        return {
            "shard_size": self.shard_size,
            "compression": {"codec": self.compression.codec, "level": self.compression.level},
            "batch_bytes": self.batch_bytes,
            "batch_rows": self.batch_rows,
            "inputs_per_task": self.inputs_per_task,
            "column_bytes": self.column_bytes,
        }

    def batch_bytes_for(self, columns: int) -> int:
        """The target uncompressed bytes of a record batch of ``columns`` columns."""
        return max(self.batch_bytes, min(WIDE_BATCH_BYTES, columns * self.column_bytes))

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> WriteOptions:
        return cls(
            shard_size=d["shard_size"],
            compression=Compression(**d["compression"]),
            batch_bytes=d["batch_bytes"],
            batch_rows=d["batch_rows"],
            inputs_per_task=d["inputs_per_task"],
            column_bytes=d.get("column_bytes", 0),  # (a run of an older snap: as it wrote)
        )


EXECUTORS = ("local", "ray")


def address_problem(address: object) -> str | None:
    """What is wrong with ``address`` as a Ray cluster's (None: nothing): ``auto``,
    ``host:port`` (``[::1]:6379``) or ``ray://host[:port]``. A malformed one was found only
    after planning, leaving a run behind, and ``:6390`` printed Ray's own traceback."""
    shown = f"{address!r} is no Ray cluster's address"
    todo = ("give host:port (the head's GCS port, 6379 by default), ray://host:10001 or auto; "
            "or leave it out for RAY_ADDRESS, else a local Ray")  # fmt: skip
    if not isinstance(address, str) or not address.strip():
        return f"{shown}: {todo}"
    if address == "auto":
        return None
    rest = address.removeprefix("ray://")
    host, colon, port = rest.rpartition(":")
    if not colon:  # (ray://host: Ray's client port, 10001)
        host = rest
        if not address.startswith("ray://"):
            return f"{shown} (no port): {todo}"
    elif not port.isdigit() or not 0 < int(port) < 65536:
        return f"{shown} (port {port!r}): {todo}"
    if not host or "/" in host:
        return f"{shown} ({'no host' if not host else 'not a host'}): {todo}"
    return None


RAY_ONLY = (  # what a ray_address without the ray executor is told: a command, Python
    "--ray-address applies to --executor ray only",
    "ray_address= applies to executor='ray' only",
)
DEFAULT_LEASE_TTL = 30.0  # seconds; a dead writer on another host is taken over within this
MAX_LEASE_TTL = 7 * 86400.0  # a week: a writer silent longer is dead (and inf stopped the beat)


def overwrite_said() -> str:
    """``--overwrite`` to a command, ``overwrite=True`` in Python (:func:`.console.named`)."""
    return named("--overwrite", "overwrite=True")


def _other_grouping(chunking: dict[str, Any], inputs_per_task: int) -> bool:
    """Whether a snapshot grouping its inputs as ``chunking`` (its history's) groups them
    otherwise than ``--inputs-per-task`` would."""
    return (chunking["fixed"], chunking["inputs"]) != (True, inputs_per_task)


def grown_layout(options: WriteOptions, previous: Manifest | None) -> WriteOptions:
    """A grow's options: the new shards compressed as the snapshot's others, whose
    ``previous`` manifest states their compression (one codec for them all: a grow with
    ``--compression lz4`` made lz4 shards beside zstd ones, and the manifest said lz4 of all
    of them); the other codec is said to need ``--overwrite``, as another
    ``--inputs-per-task`` is (the grow keeps the snapshot's grouping: :func:`.incremental.
    chunking_for`; it computed every task again without a word)."""
    if previous is None:
        return options
    chunking = previous.history.chunking if previous.history is not None else None
    given = options.inputs_per_task
    if given is not None and chunking is not None and _other_grouping(chunking, given):
        log.warning(
            "note: growing keeps the snapshot's grouping of inputs into tasks (%s): "
            "%s would compute every task again: pass %s to regroup it so",
            f"{counted(chunking['inputs'], 'input')} a task" if chunking["fixed"]
            else f"content-defined, {counted(chunking['inputs'], 'input')} a task on average",
            named(f"--inputs-per-task {given}", f"inputs_per_task={given}"), overwrite_said(),
        )  # fmt: skip
    if previous.compression == options.compression.to_json():
        return options
    kept = Compression(codec=previous.compression["codec"], level=previous.compression.get("level"))
    if options.codec_given:  # (the default: nothing asked for, nothing to say)
        log.warning(
            "note: growing keeps the snapshot's compression, %s (its shards share one): %s "
            "applies to a snapshot made anew: pass %s to rewrite it so",
            codec_text(previous.compression), codec_text(options.compression.to_json()),
            overwrite_said(),
        )  # fmt: skip
    return replace(options, compression=kept)


@dataclass(frozen=True)
class CreateOptions:
    """How ``create`` runs: everything but what it runs (pipeline, inputs, params) and where
    (OUTPUT). Frozen and checked when made: a bad value is an OptionError naming the option,
    before anything is read or started. See :func:`snapshot_cli.create` for each option."""

    workers: int | None = None
    executor: str = "local"
    ray_address: str | None = None
    shard_size: str | int = "256MiB"
    compression: str | None = DEFAULT_CODEC
    level: int | None = None
    batch_rows: int | None = None
    batch_bytes: str | int | None = None
    inputs_per_task: int | None = None
    overwrite: bool = False
    storage_options: dict[str, Any] | None = None
    progress: bool = False
    wait: bool = True
    lease_ttl: float = DEFAULT_LEASE_TTL
    dry_run: bool = False
    write: WriteOptions = field(init=False)

    def __post_init__(self) -> None:
        for name in ("overwrite", "progress", "wait", "dry_run"):
            try:
                object.__setattr__(self, name, flag(getattr(self, name), name))
            except ValueError as err:
                raise OptionError(str(err)) from err
        for name in ("workers", "level", "batch_rows", "inputs_per_task"):  # numpy's as int
            object.__setattr__(self, name, integer(getattr(self, name)))
        if not isinstance(self.executor, str) or self.executor not in EXECUTORS:
            raise OptionError(
                f"executor {self.executor!r} is not available; this version of snap has: "
                + ", ".join(EXECUTORS)
            )
        if self.executor == "ray":
            from .ray_executor import check_installed

            check_installed()
        if self.ray_address is not None and self.executor != "ray":
            raise OptionError(named(*RAY_ONLY))
        if self.ray_address is not None and (problem := address_problem(self.ray_address)):
            raise OptionError(f"ray_address {problem}")
        workers = self.workers
        if workers is not None and (
            isinstance(workers, bool) or not isinstance(workers, int) or workers < 0
        ):
            raise OptionError(
                f"{named('--workers', 'workers=')} must be an integer >= 0, got {workers!r}"
            )
        if workers == 0 and self.executor == "ray":  # (it ran with Ray's default, unsaid)
            raise OptionError(ray_not_in_process())
        ttl = self.lease_ttl
        if isinstance(ttl, bool) or not (
            isinstance(ttl, numbers.Real) and 0 < ttl <= MAX_LEASE_TTL
        ):  # (inf or 1e300 stopped the heartbeat: a wait that long overflowed)
            raise OptionError(
                f"lease_ttl must be a number of seconds > 0 and at most {MAX_LEASE_TTL:.0f} "
                f"(a week), got {ttl!r}"
            )
        object.__setattr__(self, "lease_ttl", float(ttl))
        object.__setattr__(
            self, "storage_options", options_dict(self.storage_options, "storage_options")
        )
        try:
            write = WriteOptions(
                shard_size=parse_size(self.shard_size, "shard_size"),
                compression=Compression(codec_name(self.compression), self.level),
                batch_bytes=(
                    WriteOptions.batch_bytes
                    if self.batch_bytes is None
                    else parse_size(self.batch_bytes, "batch_bytes")
                ),
                batch_rows=WriteOptions.batch_rows if self.batch_rows is None else self.batch_rows,
                inputs_per_task=self.inputs_per_task,
                codec_given=self.compression is not DEFAULT_CODEC or self.level is not None,
                column_bytes=WriteOptions.column_bytes if self.batch_bytes is None else 0,
            )
        except ValueError as err:
            raise OptionError(str(err)) from err
        object.__setattr__(self, "write", write)

    @property
    def worker_count(self) -> int:
        """Workers to start: the given number, else one per CPU (none for Ray, whose cluster
        decides)."""
        if self.workers is not None:
            return self.workers
        return 0 if self.executor == "ray" else cores()

    @property
    def in_process(self) -> bool:
        """The pipeline runs in the calling process (``workers=0``, local executor)."""
        return self.executor != "ray" and self.worker_count == 0

    def layout_not_applied(self, m: Manifest) -> list[str]:
        """The layout options (the codec aside) given that an up-to-date create does not
        apply, as its caller spells them (``--shard-size``, ``shard_size=``): those the
        snapshot ``m`` shows were not its own (a nightly create given its usual options was
        told so every night)."""
        chunking = m.history.chunking if m.history is not None else None
        rows = max((r for s in m.shards for r, _ in s.batch_rows), default=0)
        # A shard's record batches over twice the target, on average (not of a record each:
        # records larger than the target make such batches under any --batch-bytes).
        cap = 2 * self.write.batch_bytes
        big_batches = any(
            s.uncompressed_bytes > cap * s.record_batches and s.records > s.record_batches
            for s in m.shards
        )
        given = {
            "--inputs-per-task": self.write.inputs_per_task is not None
            and (chunking is None or _other_grouping(chunking, self.write.inputs_per_task)),
            "--shard-size": self.write.shard_size != WriteOptions.shard_size
            and max((s.bytes for s in m.shards), default=0) > 2 * self.write.shard_size,
            "--batch-rows": self.batch_rows is not None and rows > self.write.batch_rows,
            "--batch-bytes": self.batch_bytes is not None and big_batches,
        }
        return [named(name, f"{name[2:].replace('-', '_')}=") for name, on in given.items() if on]


def ray_not_in_process() -> str:
    """Why ``workers=0`` does not go with ``executor="ray"`` (a usage error to the command)."""
    ray = named("--executor ray", "executor='ray'")
    return (
        f"{named('--workers 0', 'workers=0')} runs the tasks in this process, which {ray} "
        "does not: give the tasks in flight on the cluster (N >= 1), or leave it out for 2 "
        "per cluster CPU"
    )
