"""snap: materialise an expensive preprocessing function once, replay it fast.

import snapshot_cli as snap
info = snap.create(preprocess, "out/train", inputs="raw/*.jpg", params={"size": 64})
s = snap.open("out/train")

The public names are imported on first use (PEP 562): a worker process that imports
``snapshot_cli.writers.worker`` does not pay for the readers (or the other way round).
"""

from __future__ import annotations

import importlib
import logging
import sys
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"


def _no_bytecode_under_a_file_size_limit() -> None:
    """A process limited in the size of its files (``ulimit -f``) writes no bytecode: Python
    writes a ``.pyc`` in one ``write()`` and renames it into place however much of it the
    limit let through, and every later import of that module, in any process, then failed
    "EOFError: marshal data too short" (snap's own, compiled first under an 8 KiB limit)."""
    try:
        import resource
    except ImportError:  # (not a Unix)
        return
    if resource.getrlimit(resource.RLIMIT_FSIZE)[0] != resource.RLIM_INFINITY:
        sys.dont_write_bytecode = True


_no_bytecode_under_a_file_size_limit()

from .errors import (  # noqa: E402 (after the bytecode guard: it covers this import too)
    CorruptShardError,
    LeaseError,
    ManifestError,
    OptionError,
    OutOfMemoryError,
    PipelineError,
    PipelineLoadError,
    RecordError,
    SchemaMismatchError,
    SnapError,
    SnapshotExistsError,
    StorageError,
)

if TYPE_CHECKING:
    from .facade import snapshot
    from .manifest import FORMAT_VERSION, Manifest, ShardEntry
    from .readers.loader import Loader
    from .readers.mix import Mixture, mix
    from .readers.snapshot import Snapshot
    from .readers.snapshot import open as open  # (public, though not in __all__: below)
    from .writers.convert import Batch, ragged
    from .writers.create import CreateInfo, create


class _Unconfigured(logging.Handler):
    """snap's warnings as ``snap: ...`` lines on stderr while nothing else shows them.

    Without it, a library user who has not configured logging gets Python's last-resort
    handler: the bare message (``waiting for the writer lease of ...``) with nothing naming
    snap. Once the root logger or snap's has another handler (``logging.basicConfig``,
    pytest, a framework), this one stays silent and records go there; the CLI replaces it."""

    def __init__(self, name: str = __name__) -> None:
        super().__init__(logging.WARNING)
        self.name = name

    def emit(self, record: logging.LogRecord) -> None:
        ours = logging.getLogger(self.name).handlers
        if logging.getLogger().handlers or any(h is not self for h in ours):
            return
        said = record.getMessage()
        if self.name != __name__:  # (a storage library's: one line, no traceback)
            said = f"{record.name}: {' '.join(said.split())}"
        elif record.levelno == logging.WARNING and not said.startswith("note: "):
            said = f"warning: {said}"  # (as the CLI's: a script that looks for them finds them)
        try:
            sys.stderr.write(f"snap: {said}\n")
        except Exception:  # stderr closed or replaced by something that cannot write
            self.handleError(record)


logging.getLogger(__name__).addHandler(_Unconfigured())
# The storage libraries snap drives log a traceback as they give up on a request (gcsfs:
# "... out of retries", 32 of them, ~800 lines, in one outage of a loader's epoch), before
# snap says what failed; unconfigured, Python printed them whole. One line each, as the CLI.
for _library in ("gcsfs", "s3fs", "adlfs", "fsspec"):
    logging.getLogger(_library).addHandler(_Unconfigured(_library))

_LAZY = {
    "snapshot": ".facade",
    "FORMAT_VERSION": ".manifest",
    "Manifest": ".manifest",
    "ShardEntry": ".manifest",
    "Loader": ".readers.loader",
    "Mixture": ".readers.mix",
    "mix": ".readers.mix",
    "Snapshot": ".readers.snapshot",
    "open": ".readers.snapshot",
    "Batch": ".writers.convert",
    "ragged": ".writers.convert",
    "CreateInfo": ".writers.create",
    "create": ".writers.create",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:  # another library's name gets snap's (``snap.load`` -> ``snap.open``)
        from .keywords import PACKAGE_INSTEAD, no_attribute

        raise no_attribute(sys.modules[__name__], name, PACKAGE_INSTEAD)
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


# What ``from snapshot_cli import *`` binds. ``open`` is public (``snap.open``) but left out:
# starred, it replaced the built-in ``open`` in the importing module, whose ``open("a.csv")``
# then said the file is not a snapshot. No other name here is a built-in's.
__all__ = [
    "FORMAT_VERSION",
    "Batch",
    "CorruptShardError",
    "CreateInfo",
    "LeaseError",
    "Loader",
    "Manifest",
    "ManifestError",
    "Mixture",
    "OptionError",
    "OutOfMemoryError",
    "PipelineError",
    "PipelineLoadError",
    "RecordError",
    "SchemaMismatchError",
    "ShardEntry",
    "SnapError",
    "Snapshot",
    "SnapshotExistsError",
    "StorageError",
    "__version__",
    "create",
    "mix",
    "ragged",
    "snapshot",
]
