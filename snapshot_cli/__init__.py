"""snap: materialise an expensive preprocessing function once, replay it fast.

import snapshot_cli as snap
info = snap.create(preprocess, "out/train", inputs="raw/*.jpg", params={"size": 64})
s = snap.open("out/train")
"""

from __future__ import annotations

__version__ = "0.1.0"

from .errors import (
    CorruptShardError,
    LeaseError,
    ManifestError,
    OptionError,
    PipelineError,
    PipelineLoadError,
    RecordError,
    SchemaMismatchError,
    SnapError,
    SnapshotExistsError,
    StorageError,
)
from .facade import snapshot
from .manifest import FORMAT_VERSION, Manifest, ShardEntry
from .readers.loader import Loader
from .readers.mix import Mixture, mix
from .readers.snapshot import Snapshot, open
from .writers.convert import Batch, ragged
from .writers.create import CreateInfo, create

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
    "open",
    "ragged",
    "snapshot",
]
