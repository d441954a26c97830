"""Unknown keyword arguments of the public calls, answered with the name that was meant.

Python says only "got an unexpected keyword argument 'shufle'". snap's users come from
tf.data, PyTorch, Hugging Face datasets and Mosaic Streaming, whose names for the same
settings differ, and put an option of one call on another (``snap.open(path,
batch_size=256)``): each gets the snap name that does it, or the call that takes it. Still a
``TypeError``, as Python's own is.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import inspect
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

# Other libraries' names for snap's settings (only those a call takes are suggested).
ELSEWHERE: dict[str, tuple[str, ...]] = {
    "num_workers": ("num_parallel_reads", "processes", "workers"),  # torch DataLoader
    "num_proc": ("workers",),  # HF datasets' map
    "workers": ("num_parallel_reads", "processes"),  # create's, given to a loader
    "threads": ("num_parallel_reads",),
    "buffer_size": ("shuffle_buffer",),  # tf.data shuffle
    "shuffle_buffer_size": ("shuffle_buffer",),
    "prefetch_factor": ("prefetch",),
    "num_parallel_calls": ("num_parallel_reads",),
    "cycle_length": ("num_parallel_reads",),
    "drop_remainder": ("drop_last",),
    "num_epochs": ("epochs",),
    "shuffle_seed": ("seed",),
    "random_seed": ("seed",),
    "num_replicas": ("world_size",),
    "num_shards": ("world_size",),
    "num_ranks": ("world_size",),
    "shard_index": ("rank",),
    "local_rank": ("rank",),
    "transform": ("map",),
    "collate_fn": ("map",),
    "compression_level": ("level",),
    "codec": ("compression",),
    "max_shard_size": ("shard_size",),
    "size_limit": ("shard_size",),
}

SHOWN_AS = {"FrameworkAdapters": "Loader"}  # a mixin's methods, as users call them

# The modules of the checked calls, so that a keyword of one given to another is found.
CHECKED_MODULES = ("snapshot_cli.writers.create", "snapshot_cli.readers.snapshot",
                   "snapshot_cli.readers.mix", "snapshot_cli.readers.adapter")  # fmt: skip

_TAKES: dict[str, frozenset[str]] = {}  # every checked call's name -> its keywords


def checked_keywords(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn``, refusing an unknown keyword with the name meant (``fn`` has no ``**kwargs``)."""
    params = inspect.signature(fn).parameters.values()
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    takes = frozenset(p.name for p in params if p.kind in kinds and p.name != "self")
    owner, _, method = fn.__qualname__.rpartition(".")
    name = f"{SHOWN_AS.get(owner, owner)}.{method}" if owner else method
    _TAKES[name] = takes

    @functools.wraps(fn)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        if not takes.issuperset(kwargs):
            unknown = next(k for k in kwargs if k not in takes)
            raise TypeError(unknown_message(name, unknown, takes))
        return fn(*args, **kwargs)

    return call


def unknown_message(call: str, given: str, takes: frozenset[str]) -> str:
    """Python's words, and then the keyword ``call`` takes that was meant, or the call that
    takes ``given``, or the keywords it takes."""
    for module in CHECKED_MODULES:  # (imported lazily by snapshot_cli: all are needed here)
        importlib.import_module(module)
    said = f"{call}() got an unexpected keyword argument {given!r}"
    meant = [n for n in ELSEWHERE.get(given.lower(), ()) if n in takes]
    meant += [n for n in difflib.get_close_matches(given, sorted(takes), n=2, cutoff=0.7)
              if n not in meant]  # fmt: skip
    others: dict[str, str] = {}  # one call per method name, Snapshot's first (not Mixture's)
    for c in sorted(_TAKES, key=lambda c: (not c.startswith("Snapshot."), c)):
        if given in _TAKES[c] and c != call:
            others.setdefault(c.rsplit(".", 1)[-1], c)
    where = " and ".join(c + "()" for c in others.values())
    if meant:
        also = f" ({given!r} is an option of {where})" if others else ""
        return f"{said}; did you mean {' or '.join(repr(n) for n in meant)}?{also}"
    if others:
        return f"{said}; it is an option of {where}"
    return f"{said}; it takes {', '.join(sorted(takes))}"
