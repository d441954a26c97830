"""``processes=N`` checked against what decode processes (:mod:`.procs`) can do, as the
loader is made: Linux, columns of fixed width, a filesystem another process sees."""

from __future__ import annotations

import pickle
import pickletools
import warnings
from typing import Any

from .. import schema as schema_mod
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
                f"{given} decodes columns of numbers, tensors, timestamps and durations only: "
                "decode processes write them into the window's shared memory, and other "
                "columns (text, ragged arrays, dates, ...) are decoded in this process; "
                f"column {name!r} is {_shown(t)}: leave it out "
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
        if problem := unshippable(s.fs):
            raise OptionError(f"{given} cannot read {s.url}: {problem}; or use {zero}")
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


def unshippable(fs: Any) -> str | None:
    """Why a decode process (a new interpreter) cannot make ``fs`` as this process has it,
    or None: it must pickle, and name nothing of ``__main__`` (a filesystem class defined
    in the script or notebook that runs the loader), which that interpreter cannot import.
    Found in the process, it failed the pass it met it in, some epochs in (the processes
    start in the background and take over when ready)."""
    try:  # (protocol 2: every global a GLOBAL opcode, its module named beside it)
        payload = pickle.dumps(fs, protocol=2)
    except Exception as err:  # (any: a lock, a client, a lambda in its options)
        return (
            f"its filesystem ({type(fs).__qualname__}) cannot be sent to another process "
            f"({type(err).__name__}: {err})"
        )
    mains = sorted({
        str(arg).split(" ", 1)[1]
        for op, arg, _ in pickletools.genops(payload)
        if op.name == "GLOBAL" and str(arg).split(" ", 1)[0] in ("__main__", "__mp_main__")
    })  # fmt: skip
    if mains:
        return (
            f"its filesystem uses {', '.join(mains)}, defined in __main__ (the script or "
            "notebook running this), which a decode process cannot import: define it in a "
            "module of its own"
        )
    return None


def _shown(t: Any) -> str:
    """A column type as errors show it (``float32[?,?] (ragged)``, not its Arrow storage)."""
    kind = schema_mod.kind(t)
    return schema_mod.format_type(t) + (" (ragged)" if kind == "ragged" else "")
