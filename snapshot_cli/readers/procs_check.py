"""``processes=N`` checked against what decode processes (:mod:`.procs`) can do, as the
loader is made: Linux, columns of fixed width, a filesystem another process sees."""

from __future__ import annotations

import warnings
from typing import Any

from .. import storage
from ..console import named
from ..cores import cores as cpus
from ..errors import OptionError, outside_snap
from . import shm
from .window import fixed_width
from .wire import MAX_FDS


def checked_count(n: int | None, reading: Any) -> int:
    """``processes=n`` for the loader of ``reading`` (a :class:`~.sources.ReadSet`), checked
    against what decode processes can do: an OptionError names what stands in the way (as
    the caller gave it: ``--processes`` in ``snap bench``, ``processes=`` in Python)."""
    if not n:
        return 0
    given, zero = named("--processes", "processes="), named("--processes 0", "processes=0")
    if not shm.AVAILABLE:
        raise OptionError(f"{given} needs Linux (shared memory by memfd_create); use {zero}")
    for name in reading.columns:
        t = reading.schema.field(name).type
        if not fixed_width(t):
            raise OptionError(
                f"{given} decodes columns of numbers, tensors, times and durations only: "
                "decode processes write them into the window's shared memory, and other "
                "columns (text, ragged arrays, ...) are decoded in this process; "
                f"column {name!r} is {t}: leave it out "
                f"({named('--columns', 'columns=[...]')}) or use {zero}"
            )
    fixed = len(reading.columns)
    if fixed >= MAX_FDS:
        raise OptionError(
            f"{given} reads at most {MAX_FDS - 1} columns, and {fixed} were selected: "
            f"choose fewer with {named('--columns', 'columns=[...]')} or use {zero}"
        )
    for s in reading.sources:
        if storage.protocol(s.fs) == "memory":
            raise OptionError(
                f"{given} cannot read {s.url}: another process cannot see this "
                f"process's memory:// filesystem; use {zero}"
            )
    cores = cpus()
    if n > cores:  # as torch's DataLoader warns of more workers than cores
        warnings.warn(
            f"{named(f'--processes {n}', f'processes={n}')} on {cores} cores: decode processes "
            "beyond the core count add memory (each is a Python interpreter with pyarrow) and "
            "no speed",
            UserWarning,
            stacklevel=outside_snap(),
        )
    return int(n)
