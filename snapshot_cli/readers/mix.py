"""``snap.mix``: several snapshots read as one, in set proportions; subsets of one snapshot.

``snap.mix([s1, s2, s3], weights=[0.5, 0.3, 0.2])`` returns a :class:`Mixture`, which has
the ``.loader(...)`` of a snapshot. Its batches hold records of every source in the given
proportions (global batches dealt to ranks as in :mod:`.elastic`), each source shuffled as
a snapshot is, deterministic in (seed, epoch), resumable exactly, on any world size that
divides the global batch.

**What an epoch is.** An epoch has ``E`` records, ``n_i = w_i E`` (rounded, summing to
``E``) from source ``i``. ``epoch_records=E`` sets it. By default, with weights, ``E`` is the
longest epoch in which no source repeats a record (the first source to run out ends it:
``E = min(N_i / w_i)``), and without weights the sources are simply concatenated
(``n_i = N_i``, every record once). A source asked for fewer records than it has gives a
random subset, another every epoch; asked for more, it repeats (each record
``n_i // N_i`` or ``n_i // N_i + 1`` times), as Mosaic's ``choose``/``repeat`` do.
``snapshot.sample(records=n)`` or ``sample(fraction=f)`` is the same for one snapshot: a
down- or upsampled epoch without rewriting anything.

**Columns.** The columns every source has, in the first source's order (``columns=`` to
choose); a chosen column of different types in two sources is an :class:`OptionError`
naming both. ``loader.stats()["sources"]`` counts the records delivered from each source.
"""

from __future__ import annotations

import math
import numbers
import os
import reprlib
from collections.abc import Callable, Iterable, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from .. import schema as schema_mod
from ..errors import OptionError
from ..keywords import checked_keywords
from ..progress import counted
from ..units import integer, options_dict
from .elastic import apportion
from .options import Auto, LoaderOptions, checked_columns, local_dir

if TYPE_CHECKING:
    from .loader import Loader
    from .snapshot import Snapshot
    from .trace import Tracer

# weights=: a list of numbers, or a numpy array of them (np.array([0.3, 0.7]), a config's)
Weights = Sequence[float] | npt.NDArray[np.floating[Any] | np.integer[Any]]


class Mixture:
    """Snapshots read together in set proportions; make with :func:`mix` (or
    :meth:`Snapshot.sample` for one)."""

    def __init__(
        self,
        sources: Sequence[Snapshot],
        weights: Weights | None = None,
        epoch_records: int | None = None,
        names: Sequence[str] | None = None,
    ) -> None:
        if not sources:
            raise OptionError("mix needs at least one snapshot")
        self.sources = list(sources)
        self.names = [s.url for s in self.sources] if names is None else _names(names)
        if len(self.names) != len(self.sources):
            raise OptionError(f"{len(self.names)} names for {len(self.sources)} snapshots")
        if not any(s.num_records for s in self.sources):
            which = (f"the snapshot {self.names[0]} holds" if len(self.names) == 1 else
                     f"none of the snapshots {', '.join(self.names)} holds")  # fmt: skip
            raise OptionError(f"{which} records: there is nothing to mix or sample")
        self.weights = _check_weights(weights, [s.num_records for s in self.sources], self.names)
        self.counts = _counts(self.weights, [s.num_records for s in self.sources], epoch_records)
        self.epoch_records = sum(self.counts)

    def __repr__(self) -> str:
        parts = ", ".join(f"{n}: {c}" for n, c in zip(self.names, self.counts, strict=True))
        return f"Mixture({parts}; {self.epoch_records} records per epoch)"

    @property
    def num_records(self) -> int:
        """Records per epoch."""
        return self.epoch_records

    @property
    def schema(self) -> pa.Schema:
        """The columns its loader reads without ``columns=``: those every source has, in
        the first source's order. OptionError where such a column's types differ."""
        first, names = self.columns()
        return pa.schema([first.field(c) for c in names])

    def columns(self, wanted: Sequence[str] | None = None) -> tuple[pa.Schema, list[str]]:
        """The schema the loader reads (the first source's that gives records) and the
        columns: ``wanted``, or those every source has. Raises OptionError for a column
        missing from a source or of different types in two. A source that gives no records
        (weight 0) is not read, and its columns do not count: an empty snapshot switched off
        with weight 0 had no columns, so the mixture had none either."""
        read = [(n, s) for n, s, c in zip(self.names, self.sources, self.counts, strict=True)
                if c]  # fmt: skip
        first = read[0][1].schema
        if wanted is None:
            names = [c for c in first.names if all(c in s.schema.names for _, s in read)]
            if not names:
                raise OptionError(f"the snapshots have no column in common: {self._columns()}")
        else:
            names = list(wanted)
            for c in names:
                missing = [n for n, s in read if c not in s.schema.names]
                if 0 < len(missing) < len(read):  # (it said "column 'extra' is not
                    # in ['train']: ..."; one in none of them is an unknown column, said below)
                    which = ", ".join(repr(n) for n in missing)
                    snapshots = "snapshot" if len(missing) == 1 else "snapshots"
                    raise OptionError(
                        f"column {c!r} is missing from the mixed {snapshots} {which} (a mixture "
                        f"reads the columns all of them have; their columns: {self._columns()})"
                    )
            names = checked_columns(names, list(first.names))  # none, or one twice
        for c in names:
            types = {n: s.schema.field(c).type for n, s in read}
            if len(set(types.values())) > 1:
                shown = "; ".join(f"{n}: {schema_mod.format_type(t)}" for n, t in types.items())
                raise OptionError(
                    f"column {c!r} has different types in the mixed snapshots ({shown}); leave "
                    "it out with columns=[...] or recreate one of them"
                )
        return first, names

    def _columns(self) -> str:  # (of the sources read: weight 0 leaves one out)
        return "; ".join(f"{n}: {s.schema.names}" for n, s, c in zip(
            self.names, self.sources, self.counts, strict=True) if c)  # fmt: skip

    @checked_keywords
    def loader(
        self,
        batch_size: int | None = None,
        *,
        global_batch_size: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        epochs: int | None = 1,
        rank: int | Auto = 0,
        world_size: int | Auto = 1,
        drop_last: bool = False,
        columns: Sequence[str] | None = None,
        shuffle_buffer: int | str = "auto",
        num_parallel_reads: int | Auto = "auto",
        prefetch: int | Auto = "auto",
        map: Callable[..., Any] | None = None,  # noqa: A002
        verify: bool = True,
        trace: Tracer | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_limit: int | str | None = None,
        processes: int = 0,
    ) -> Loader:
        """A loader of the mixture; the options are those of :meth:`Snapshot.loader`. A
        mixture always reads in the global order: ``global_batch_size`` (or ``batch_size``
        per rank, the global batch then being ``batch_size * world_size``)."""
        from .loader import Loader

        options = LoaderOptions(
            shuffle=shuffle, seed=seed, epochs=epochs, rank=rank, world_size=world_size,
            drop_last=drop_last, columns=columns,
            shuffle_buffer=shuffle_buffer, num_parallel_reads=num_parallel_reads,
            prefetch=prefetch, map=map, verify=verify,
            cache_dir=local_dir(cache_dir, "cache_dir"),
            cache_limit=cache_limit, global_batch_size=global_batch_size, processes=processes,
        )  # fmt: skip
        return Loader(self, batch_size, options, trace)


@checked_keywords
def mix(
    snapshots: Sequence[Snapshot | str | os.PathLike[str]],
    weights: Weights | None = None,
    epoch_records: int | None = None,
    names: Sequence[str] | None = None,
    storage_options: dict[str, Any] | None = None,
) -> Mixture:
    """Several snapshots (opened ones, or URLs) read as one; README, Mixing snapshots.

    Args:
        snapshots: the sources: open Snapshots, or paths or URLs to open.
        weights: each source's share of an epoch's records, one per snapshot (a list or a
            numpy array; they need not sum to 1). None: every record of each, once.
        epoch_records: records per epoch (default: README, Mixing snapshots).
        names: one per snapshot, how ``loader.stats()["sources"]`` and the errors name
            them (default: their URLs).
        storage_options: fsspec options (credentials, project...) for the snapshots given
            as URLs; an open Snapshot keeps its own.

    Raises:
        OptionError: weights negative, NaN, all zero or not one per snapshot; an
            ``epoch_records`` below 1; a source with weight but no records.
    """
    from .snapshot import Snapshot, open

    if isinstance(snapshots, (str, bytes, os.PathLike, Snapshot)) or not isinstance(
        snapshots, Iterable
    ):  # (a path was read letter by letter: "/ is not a snapshot")
        raise OptionError(
            f"snapshots must be a list of snapshots or URLs (snap.mix(['web', 'books'])), got "
            f"{snapshots!r:.80}; one snapshot alone is read by snap.open(url).loader(...)"
        )
    storage_options = options_dict(storage_options, "storage_options")
    opened = [s if isinstance(s, Snapshot) else open(s, storage_options) for s in snapshots]
    return Mixture(opened, weights, epoch_records, names)


def _names(names: object) -> list[str]:
    """``names=``, one per snapshot, as given: non-empty str, no two alike (they were
    taken as ``str(n)``, "" and 5 too, and a name given twice renamed in ``stats()`` only);
    a str is refused (``names="ab"`` was split into "a" and "b"), as is a value that is no
    list (``names=0`` was a TypeError)."""
    if isinstance(names, (str, bytes)) or not isinstance(names, Iterable):
        raise OptionError(
            f"names must be a list of names, one per snapshot (names=['web', 'books']), got "
            f"{names!r:.80}"
        )
    out = list(names)
    for n in out:  # (a name's text is how stats() and errors tell the sources apart)
        if not isinstance(n, str) or not n.strip():
            raise OptionError(
                f"names must be non-empty str, one per snapshot (names=['web', 'books']), got "
                f"{n!r:.40} in {out!r:.80}"
            )
    if len(set(out)) < len(out):
        twice = next(n for n in out if out.count(n) > 1)
        raise OptionError(
            f"names must differ: {twice!r} is given twice, and loader.stats()['sources'] would "
            f"count the two apart only as {twice!r} and {twice + '#2'!r}"
        )
    return out


def _check_weights(weights: Weights | None, sizes: list[int], names: list[str]) -> list[float]:
    if weights is None:
        return [float(n) for n in sizes]
    if getattr(weights, "ndim", 1) == 1 and hasattr(weights, "tolist"):  # a numpy array
        weights = weights.tolist()
    if isinstance(weights, (str, bytes)) or not isinstance(weights, Sequence):
        raise OptionError(f"weights must be a list of numbers, one per snapshot, got {weights!r}")
    if len(weights) != len(sizes):
        given, wanted = counted(len(weights), "weight"), counted(len(sizes), "snapshot")
        raise OptionError(f"{given} for {wanted}: give one each")
    out: list[float] = []
    for i, w in enumerate(weights):
        number = isinstance(w, numbers.Real) and not isinstance(w, bool)
        big = ""
        try:  # (an int or Fraction beyond a float's range raised OverflowError, not this)
            value = float(w) if number else math.nan
        except OverflowError:
            value, big = math.inf, " (beyond a float's range)"
        if not math.isfinite(value) or value < 0:
            shown = reprlib.repr(w)  # (10**400: not its 401 digits)
            raise OptionError(
                f"weight {i} is {shown}{big}: weights must be finite numbers >= 0 (proportions)"
            )
        out.append(value)
    if not any(out):
        raise OptionError("every weight is 0: give at least one snapshot a weight above 0")
    empty = [names[i] for i, (w, n) in enumerate(zip(out, sizes, strict=True)) if w and not n]
    if empty:
        raise OptionError(
            f"{', '.join(map(repr, empty))} {'hold' if len(empty) > 1 else 'holds'} no records "
            "but a weight above 0: give it the weight 0, or leave it out"
        )
    return out


def _counts(weights: list[float], sizes: list[int], epoch_records: int | None) -> list[int]:
    """Records per epoch from each source (see "What an epoch is")."""
    if epoch_records is not None:
        epoch_records = integer(epoch_records)
        if (
            isinstance(epoch_records, bool)
            or not isinstance(epoch_records, int)
            or (epoch_records < 1)
        ):
            raise OptionError(f"epoch_records must be an integer >= 1, got {epoch_records!r}")
        return apportion(epoch_records, weights)
    if all(w == n for w, n in zip(weights, sizes, strict=True)):
        return list(sizes)
    given = [Fraction(w) for w in weights]  # (exact: 1e308 twice overflowed a float sum)
    total = sum(given)
    longest = min(n * total / w for w, n in zip(given, sizes, strict=True) if w > 0)
    whole = round(longest)
    if abs(longest - whole) > longest * Fraction(1, 10**9):
        whole = math.floor(longest)
    # else weights in proportion to the sizes, as floats spell them (0.2 and 0.30000000000000004
    # for 2 and 3 records give 4.9999999999999996): the whole epoch, not one record short
    return apportion(max(1, whole), weights, caps=sizes)
