"""``snap.snapshot()``: the one call that uses both sides, create then open. It lives here, at
the package top, so that ``readers`` and ``writers`` never import each other."""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from typing import Any, ParamSpec

from .errors import OptionError
from .readers.snapshot import Snapshot, open
from .units import flag
from .writers.create import create

P = ParamSpec("P")


def _parameters_of(
    _: Callable[P, Any],
) -> Callable[[Callable[..., Snapshot]], Callable[P, Snapshot]]:
    """Types the function it decorates as taking ``_``'s parameters: a type checker then
    checks each of :func:`create`'s options given to :func:`snapshot` (``**create_options``
    would take anything)."""

    def typed(fn: Callable[..., Snapshot]) -> Callable[P, Snapshot]:
        return fn

    return typed


@_parameters_of(create)
def snapshot(pipeline: Any, path: str | os.PathLike[str], **create_options: Any) -> Snapshot:
    """tf.data ``snapshot`` semantics: materialise ``pipeline`` at ``path`` on first use
    (reusing a matching snapshot, resuming an interrupted one), then open it.

    ``create_options`` are those of :func:`snapshot_cli.create` (inputs, params, workers...)
    but ``dry_run``: there would be nothing to open.

    Raises:
        OptionError: ``dry_run=True`` (before anything is done).
        SnapError: what :func:`snapshot_cli.create` and :func:`snapshot_cli.open` raise.
    """
    if _dry_run(create_options.get("dry_run", False)):
        raise OptionError(
            "snap.snapshot() creates the snapshot, then opens it: dry_run=True would leave "
            "nothing to open; dry_run belongs to snap.create(..., dry_run=True), which says "
            "what would be reused and computed"
        )
    takes, loads = inspect.signature(create).parameters, inspect.signature(Snapshot.loader)
    for_loader = sorted(k for k in create_options if k not in takes and k in loads.parameters)
    if for_loader:  # tf.data's snapshot is a dataset; this is a Snapshot, read by its loader
        shown = ", ".join(f"{k}=..." for k in for_loader)
        raise TypeError(
            f"snap.snapshot() got loader options ({shown}): it returns a Snapshot; pass them "
            f"to its loader, as in snap.snapshot(...).loader({shown})"
        )
    info = create(pipeline, path, **create_options)
    opened = open(path, create_options.get("storage_options"))
    if opened.version == info.version:
        return opened
    # Another process committed after this create (a sweep's trials with other params and
    # overwrite=True, or other inputs): its version is not this call's (a concurrency probe
    # got the other trial's records). The version this create made, or found up to date:
    return open(path, create_options.get("storage_options"), version=info.version)


def _dry_run(value: object) -> bool:
    """``dry_run=`` as create takes it; a value that is not True or False is create's to
    refuse (as any other option of it is)."""
    try:
        return flag(value, "dry_run")
    except ValueError:
        return False
