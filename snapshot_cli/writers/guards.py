"""Where a create would wait forever, and how it waits for another writer's lease.

A create called while a worker process imports the pipeline's module, or while a "spawn" /
"forkserver" child re-runs its parent's script, can only deadlock on its parent: it fails at
once (:func:`refuse_nested`). Otherwise a create waits for the writer lease of its snapshot
while another live writer holds it, saying so (:func:`wait_for_lease`).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from .. import storage
from ..errors import OptionError
from ..manifest import Manifest
from . import lease as lease_mod
from . import worker as worker_mod

log = logging.getLogger("snapshot_cli")


def bootstrapping() -> bool:
    """True while a multiprocessing "spawn"/"forkserver" child re-runs its parent's script."""
    return bool(getattr(multiprocessing.current_process(), "_inheriting", False))


_GUARD = (
    'put the code that runs snap.create under\n\n    if __name__ == "__main__":\n\n'
    "so that it runs only when the script is started, not when another process imports it"
)


def refuse_nested(url: str) -> None:
    """Fail at once, not wait forever, where a create can only deadlock on its parent."""
    if worker_mod.IMPORTING:
        raise OptionError(
            f"snap.create({url!r}) was called inside a snap worker process, while it imported "
            f"the pipeline's module: {_GUARD}"
        )
    if bootstrapping():
        raise OptionError(
            f"snap.create({url!r}) was called while this process "
            f"({multiprocessing.current_process().name}), started by multiprocessing's "
            f"'spawn' or 'forkserver' method, re-ran its parent's script, and the snapshot is "
            f"not ready yet: {_GUARD}"
        )


WAIT_REPORT_S = 15.0  # a waiting writer says again who holds the lease this often


def wait_for_lease(
    fs: Any, root: str, ttl: float, wait: bool, url: str, reusable: Callable[[], Manifest | None]
) -> lease_mod.Lease | Manifest:
    """Take the writer lease, waiting while another live writer holds it (saying so on
    stderr, again every WAIT_REPORT_S), or return the snapshot that writer committed."""
    storage.makedirs(fs, root)
    said = -float("inf")
    while True:
        got = lease_mod.try_acquire(fs, root, ttl, watch=wait)  # (one look: the clocks decide)
        if isinstance(got, lease_mod.Lease):
            return got
        who = got.describe()
        if not wait:
            raise lease_mod.LeaseError(
                f"another snap create is writing {url}: {who}; wait for it to finish"
            )
        h = got.holder
        if h.get("host") == socket.gethostname() and h.get("pid") == os.getppid():
            raise lease_mod.LeaseError(
                f"the writer lease of {url} is held by this process's parent ({who}), which "
                f"waits for this process: waiting would never end. {_GUARD[0].upper()}"
                f"{_GUARD[1:]}"
            )
        if time.monotonic() - said >= WAIT_REPORT_S:
            log.warning(
                "waiting for the writer lease of %s, held by %s; it is taken over if that "
                "writer stops (Ctrl-C to give up)",
                url,
                who,
            )
            said = time.monotonic()
        time.sleep(min(2.0, ttl / 10))
        if (m := reusable()) is not None:  # the other writer committed what we wanted
            return m
