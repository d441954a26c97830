"""How a loader reads a snapshot: one frozen, self-validating options object (as grain's
``ReadOptions``). Every check of a loader option is here, made when the object is made, so a
bad value is an :class:`~snapshot_cli.OptionError` naming the option before anything is
opened or started (pure: no I/O, no threads)."""

from __future__ import annotations

import collections
import difflib
import inspect
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..console import named
from ..cores import cores
from ..errors import OptionError
from ..units import flag, integer, parse_size
from .elastic import GlobalOptions
from .plan import PlanOptions
from .trace import Tracer

Auto = Literal["auto"]
MOST_PROCESSES = 64  # decode processes, whatever the cores: each is an interpreter, started in turn


def most_processes() -> int:
    """The most decode processes a loader may ask for: 4 per core this process may use, at
    most :data:`MOST_PROCESSES`. Beyond the cores they add memory, not speed (a warning), and
    they are started one after another as the first pass begins: ``processes=2**62`` started
    interpreters until the machine ran out, before the first batch."""
    return min(MOST_PROCESSES, 4 * cores())


def local_dir(value: object, name: str) -> str | None:
    """A directory option (``cache_dir=``) as a str path: None, a str or a path object; any
    other value is an OptionError naming ``name`` (``cache_dir=5`` was a TypeError)."""
    if value is None:
        return None
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value:
        raise OptionError(
            f"{name} must be a local directory's path (a str or pathlib.Path), got {value!r:.80}"
        )
    return value


def checked_tracer(trace: object) -> Tracer | None:
    """``trace=``: None or a :class:`~.trace.Tracer`; a path (what ``snap bench --trace``
    takes) or anything else is an OptionError now, not an AttributeError at the first batch."""
    if trace is None or isinstance(trace, Tracer):
        return trace
    raise OptionError(
        f"trace must be a snapshot_cli.readers.trace.Tracer() (its .write(path) writes the "
        f"trace), got {trace!r:.80}; a file name is what snap bench --trace takes"
    )


def _auto_or_count(value: Any, name: str) -> None:
    if value == "auto":
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        what = " or an integer >= 1"  # (shuffle_buffer: a size too, which it did not say)
        if name == "shuffle_buffer":
            what = ", a number of records >= 1, or a size ('64MiB')"
        raise OptionError(f"{name} must be 'auto'{what}, got {value!r}")


def _window_size(value: Any) -> int | None:
    """``shuffle_buffer`` given as a size (``"64MiB"``: a unit is needed, a bare number is a
    count of records) → bytes; None for a count or "auto"."""
    if not isinstance(value, str) or value == "auto":
        return None
    if not any(c.isalpha() for c in value):
        raise OptionError(
            f"shuffle_buffer {value!r}: give a number of records as an integer "
            f"(shuffle_buffer={value.strip()}) or a size with its unit ('64MiB')"
        )
    try:
        return parse_size(value, "shuffle_buffer")
    except ValueError as err:
        raise OptionError(f"{err} (a size), or 'auto', or a number of records") from None


def _accepts_rng(fn: Callable[..., Any]) -> bool:
    """Whether ``map`` is called ``fn(batch, rng)`` rather than ``fn(batch)``.

    With a second positional parameter that has no default, or one named ``rng``, or only
    ``*args``: yes. A second parameter with a default (``def augment(batch, p=0.5)``) keeps
    its default: passing the generator there would make ``p`` a Generator. A function that
    can be called neither way is an OptionError now, not a TypeError at the first batch.
    """
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature: call it with the batch
        return False
    one, two = _binds(sig, 1), _binds(sig, 2)
    if not (one or two):
        name = getattr(fn, "__qualname__", type(fn).__name__)
        raise OptionError(f"map must take (batch) or (batch, rng); {name}{sig} takes neither")
    if not one:
        return True
    if not two:
        return False
    positional = [p for p in sig.parameters.values() if p.kind in (p.POSITIONAL_ONLY,
                  p.POSITIONAL_OR_KEYWORD)]  # fmt: skip
    return len(positional) < 2 or positional[1].name == "rng"


def _binds(sig: inspect.Signature, count: int) -> bool:
    try:
        sig.bind(*range(count))
    except TypeError:
        return False
    return True


@dataclass(frozen=True)
class LoaderOptions:
    """Everything but the batch size; see :meth:`snapshot_cli.Snapshot.loader` for each.

    ``rank``/``world_size`` "auto" are resolved by the loader (they read the environment);
    ``cache_limit`` is kept in bytes; ``columns`` as a tuple (None: every column).
    """

    shuffle: bool = True
    seed: int = 0
    epochs: int | None = 1
    rank: int | Auto = 0
    world_size: int | Auto = 1
    drop_last: bool = False
    columns: Sequence[str] | None = None
    shuffle_buffer: int | str = "auto"  # records, a size ("64MiB") or "auto"
    num_parallel_reads: int | Auto = "auto"
    prefetch: int | Auto = "auto"
    map: Callable[..., Any] | None = None
    verify: bool = True
    cache_dir: str | None = None
    cache_limit: int | str | None = None  # bytes once made ("50GiB" is parsed)
    global_batch_size: int | None = None  # the global order (readers/elastic.py)
    processes: int = 0  # decode processes (readers/procs.py); 0: threads of this process
    # (worker, workers): DataLoader worker ``worker`` of the rank's ``workers`` reads its share
    # of the rank's batches (SnapshotDataset's, per-rank order; not a loader() keyword)
    worker_split: tuple[int, int] = (0, 1)
    map_takes_rng: bool = field(init=False, default=False)
    shuffle_buffer_bytes: int | None = field(init=False, default=None)  # shuffle_buffer="64MiB"

    def __post_init__(self) -> None:
        for name in ("shuffle", "drop_last", "verify"):
            try:
                object.__setattr__(self, name, flag(getattr(self, name), name))
            except ValueError as err:
                raise OptionError(str(err)) from err
        for name in ("seed", "epochs", "rank", "world_size", "shuffle_buffer", "prefetch",
                     "num_parallel_reads", "global_batch_size", "processes"):  # fmt: skip
            object.__setattr__(self, name, integer(getattr(self, name)))
        for name, what in (("seed", "an integer >= 0"), ("rank", "an integer or 'auto'"),
                           ("world_size", "a positive integer or 'auto'")):  # fmt: skip
            if isinstance(getattr(self, name), bool):  # True == 1: a mistake, not a count
                raise OptionError(f"{name} must be {what}, got {getattr(self, name)!r}")
        epochs = self.epochs
        if epochs is not None and (
            isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1
        ):
            raise OptionError(f"epochs must be None (forever) or an integer >= 1, got {epochs!r}")
        object.__setattr__(self, "shuffle_buffer_bytes", _window_size(self.shuffle_buffer))
        for name in ("shuffle_buffer", "num_parallel_reads", "prefetch"):
            if name != "shuffle_buffer" or self.shuffle_buffer_bytes is None:
                _auto_or_count(getattr(self, name), name)
        g = self.global_batch_size
        if g is not None and (isinstance(g, bool) or not isinstance(g, int) or g < 1):
            raise OptionError(f"global_batch_size must be None or an integer >= 1, got {g!r}")
        p = self.processes
        if isinstance(p, bool) or not isinstance(p, int) or p < 0:
            raise OptionError(f"processes must be an integer >= 0, got {p!r}")
        if p > (most := most_processes()):
            raise OptionError(
                f"{named(f'--processes {p}', f'processes={p}')} is more decode processes "
                f"than snap starts: at most {most} here (4 per core, {cores()} cores, and "
                f"never more than {MOST_PROCESSES}); beyond the cores they add memory, not "
                "speed, and each is started in turn before the first batch"
            )
        if self.map is not None and not callable(self.map):
            raise OptionError(f"map must be a function of a batch, got {self.map!r}")
        if self.columns is not None:
            object.__setattr__(self, "columns", tuple(column_list(self.columns)))
        if (where := local_dir(self.cache_dir, "cache_dir")) is not None:
            scheme, sep, rest = str(where).partition("://")
            if sep and scheme != "file":  # it was made as the directory ./memory:/c
                raise OptionError(
                    f"{named('--cache-dir', 'cache_dir')} must be a local directory (the cache "
                    f"is this machine's disk), got the URL {where!r}"
                )
            object.__setattr__(self, "cache_dir", rest if sep else where)
        if self.cache_limit is not None:
            if self.cache_dir is None:
                raise OptionError("cache_limit needs cache_dir (the directory to cache shards in)")
            try:
                object.__setattr__(self, "cache_limit", parse_size(self.cache_limit, "cache_limit"))
            except ValueError as err:
                raise OptionError(str(err)) from err
        object.__setattr__(self, "map_takes_rng", self.map is not None and _accepts_rng(self.map))

    def column_names(self, available: list[str]) -> list[str]:
        """The columns to read, checked against the snapshot's."""
        return checked_columns(self.columns, available)

    def plan_options(
        self,
        batch_size: int | None,
        rank: int,
        world_size: int,
        window_rows: int,
        first_rows: int,
        counts: tuple[int, ...],
        single: bool,
    ) -> PlanOptions | GlobalOptions:
        """The per-rank plan's options, or the global order's (``global_batch_size``, or a
        mixture or sample: not ``single``, reading ``counts`` records of each source an
        epoch); a value that cannot work is an OptionError naming it."""
        g, batch_size = self.global_batch_size, integer(batch_size)
        if isinstance(batch_size, bool):
            raise OptionError(f"batch_size must be a positive integer, got {batch_size!r}")
        if g is not None and batch_size is not None:
            raise OptionError(
                "give batch_size (per rank) or global_batch_size (for all ranks), not both"
            )
        try:
            if g is None and single:
                plan = PlanOptions(
                    batch_size=256 if batch_size is None else batch_size,
                    shuffle=bool(self.shuffle), seed=self.seed, rank=rank,
                    world_size=world_size, drop_last=bool(self.drop_last),
                    window_rows=window_rows, first_window_rows=first_rows,
                    worker=self.worker_split[0], workers=self.worker_split[1],
                )  # fmt: skip
                part = counts[0] // plan.world_size  # (an empty snapshot reads nothing, no error)
                if plan.drop_last and counts[0] and part < plan.batch_size:
                    raise OptionError(no_batch(counts[0], plan.batch_size, world_size))
                return plan
            if self.worker_split != (0, 1):  # (the global order's workers are its parts)
                raise ValueError("a worker_split is for the per-rank order (batch_size=) only")
            if g is None:  # a mixture given a per-rank batch size
                per = 256 if batch_size is None else batch_size
                if isinstance(per, bool) or not isinstance(per, int) or per <= 0:
                    raise ValueError(f"batch_size must be a positive integer, got {per!r}")
                if isinstance(world_size, bool) or not isinstance(world_size, int):
                    raise ValueError(f"world_size must be a positive integer, got {world_size!r}")
                g = per * world_size
            if sum(counts) < g:
                raise OptionError(
                    self._no_global_batch(sum(counts), g, world_size, batch_size is None)
                )
            return GlobalOptions(
                global_batch_size=g, counts=counts, shuffle=bool(self.shuffle), seed=self.seed,
                rank=rank, world_size=world_size, drop_last=bool(self.drop_last),
                window_rows=window_rows, first_window_rows=first_rows,
            )  # fmt: skip
        except ValueError as err:
            raise OptionError(str(err)) from err

    def _no_global_batch(self, records: int, g: int, world_size: int, default: bool) -> str:
        ranks = f" x {world_size} ranks" if world_size > 1 else ""
        per = "" if self.global_batch_size else f" (batch_size {g // world_size}{ranks})"
        if default and not self.global_batch_size:  # (the user wrote no batch size)
            per = f" (the default batch_size, {g // world_size}{ranks})"
        if not records:
            return f"an epoch of 0 records (nothing to read) holds no global batch of {g}{per}"
        return (
            f"an epoch of {records:,} record{'' if records == 1 else 's'} holds no global batch "
            f"of {g}{per}: with drop_last=True no rank would read any, without it the one "
            "batch would hold records twice; use a smaller batch or more records per epoch"
        )

    @property
    def cache_bytes(self) -> int | None:
        """``cache_limit`` in bytes (None: no limit)."""
        return None if self.cache_limit is None else int(self.cache_limit)

    def shuffle_rows(self, bytes_per_row: int) -> int | None:
        """The shuffle window in records: as given, as many as fit in the size given
        (``shuffle_buffer="64MiB"``), or None for "auto"."""
        if self.shuffle_buffer_bytes is not None:
            return max(1, self.shuffle_buffer_bytes // max(1, bytes_per_row))
        return self.count_or_none(self.shuffle_buffer)  # type: ignore[arg-type]  # (a count)

    @staticmethod
    def count_or_none(value: int | Auto) -> int | None:
        """An "auto or N" option as N, or None for "auto"."""
        return None if value == "auto" else int(value)


def no_batch(records: int, per: int, world_size: int) -> str:
    """Why ``drop_last=True`` leaves no batch of ``per`` in an epoch of ``records`` records
    split over ``world_size`` ranks, and what to change (a rank's DataLoader workers share
    its batches, so they do not change it)."""
    fix = "a smaller batch_size or drop_last=False"
    if records < world_size:  # (no batch size helps: drop_last=False repeats records)
        fix = "drop_last=False (each rank then repeats records to fill its part) or fewer ranks"
    part = f" ({records // world_size} on each of {world_size} ranks)" if world_size > 1 else ""
    return (
        f"an epoch of {records:,} record{'' if records == 1 else 's'}{part} holds no batch of "
        f"{per}: with drop_last=True every epoch would be empty; use {fix}"
    )


def no_split(global_batch_size: int, world_size: int, workers: int) -> str:
    """Why ``global_batch_size`` does not split over ``world_size`` ranks x ``workers``
    DataLoader workers (SnapshotDataset's parts: workers are not called ranks), and what
    does ("" when it splits, or there are no workers: the loader says it of the ranks)."""
    g, parts = global_batch_size, world_size * workers
    if workers <= 1 or not g % parts:
        return ""
    split = f"global_batch_size={g} does not split over {world_size} ranks x {workers} "
    split += f"DataLoader workers ({parts} parts)"
    if g % world_size:
        return (
            f"{split}, nor over the {world_size} ranks alone: use a world size that divides "
            f"{g}, or another global_batch_size"
        )
    fits = [0, *(w for w in range(1, 65) if not (g // world_size) % w)]
    return f"{split}: use a num_workers for which ranks x workers divides {g}, one of {fits}"


def checked_columns(columns: object, available: list[str]) -> list[str]:
    """``columns`` (None: all of ``available``) as a list of distinct names of ``available``;
    anything else is an OptionError saying what to give."""
    if columns is None:
        return list(available)
    names = column_list(columns)
    known = set(available)  # sets: a wide table has tens of thousands of columns
    unknown = [c for c in names if c not in known]
    if unknown:
        raise OptionError(
            f"unknown columns {unknown}; the snapshot has {_listed(available)}"
            + _meant(unknown, available)
        )
    if not names and available:
        raise OptionError(f"columns=[] selects no column; the snapshot has {_listed(available)}")
    repeated = sorted(c for c, n in collections.Counter(names).items() if n > 1)
    if repeated:
        raise OptionError(f"columns name {repeated} more than once")
    return names


SHOWN_COLUMNS = 30  # of a wide table's columns named in an error (tens of thousands)


def _listed(available: list[str]) -> str:
    shown = repr(available[:SHOWN_COLUMNS])
    more = len(available) - SHOWN_COLUMNS
    return shown if more <= 0 else f"{shown[:-1]}, ... ({len(available):,} in all)]"


def _meant(unknown: list[Any], available: list[str]) -> str:
    """ "; did you mean 'text'?" for names like a column but for case or a typo."""
    by_case = {c.casefold(): c for c in available}
    guesses = []
    for name in unknown:
        if not isinstance(name, str):
            continue
        near = by_case.get(name.casefold()) or next(
            iter(difflib.get_close_matches(name, available, n=1, cutoff=0.8)), None
        )
        if near is not None:
            guesses.append(repr(near) if len(unknown) == 1 else f"{near!r} for {name!r}")
    return f"; did you mean {', '.join(guesses)}?" if guesses else ""


def column_list(columns: object) -> list[str]:
    """``columns`` as a list, if it is a collection of names (a str is not)."""
    if isinstance(columns, (str, bytes)):
        raise OptionError(
            f"columns must be a list of column names, got {columns!r}: for one column, "
            f"columns=[{columns!r}]"
        )
    try:
        names = list(columns)  # type: ignore[call-overload]
    except TypeError:
        raise OptionError(f"columns must be a list of column names, got {columns!r}") from None
    # a numpy array's names are np.str_: the batches' keys are plain str
    return [str(c) if isinstance(c, str) else c for c in names]
