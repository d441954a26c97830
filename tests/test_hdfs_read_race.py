"""``hdfs.read`` racing a replace (HDFS deletes the old file, then renames the new one over
its name): a read whose file was deleted under it fails with an I/O error (its blocks gone),
which was a StorageError ("check that its DataNodes are up") for a reader of a manifest
being committed. The read is repeated when the file changed meanwhile (found by the backend
suite's readers-see-old-or-new test, once in CI). Fault injection on fsspec's in-memory
filesystem: each read raises as the racing replace happens; the real race is the backend
suite's (tests/backends/test_backends.py, against a real HDFS)."""

from __future__ import annotations

import itertools
import uuid
from typing import Any

import pytest
from fsspec.implementations.memory import MemoryFileSystem

from snapshot_cli import hdfs


class Racing(MemoryFileSystem):
    """A read fails ``failures`` times; with ``replaced``, each failure is a replace of the
    file by a new version (a new mtime), as the writer's delete + rename is."""

    def __init__(self, failures: int, replaced: bool) -> None:
        super().__init__()
        self.failures, self.replaced = failures, replaced
        self.clock = itertools.count(1)
        self.mtimes: dict[str, int] = {}

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        return {**super().info(path, **kwargs), "mtime": self.mtimes.get(path, 0)}

    def cat_file(self, path: str, start: Any = None, end: Any = None, **kwargs: Any) -> bytes:
        if self.failures:
            self.failures -= 1
            if self.replaced:
                self.pipe_file(path, b"new version")
                self.mtimes[path] = next(self.clock)
            raise OSError(5, "Could not obtain block: the file was deleted")
        return super().cat_file(path, start, end, **kwargs)


@pytest.mark.parametrize("failures", [1, 2])
def test_a_read_whose_file_was_replaced_under_it_reads_the_new_one(failures: int) -> None:
    fs = Racing(failures, replaced=True)
    path = f"/race-{uuid.uuid4().hex}/manifest.json"
    fs.pipe_file(path, b"old")
    assert hdfs.read(fs, path) == b"new version"


def test_a_failing_read_of_an_unchanged_file_is_the_error() -> None:
    fs = Racing(1, replaced=False)
    path = f"/race-{uuid.uuid4().hex}/manifest.json"
    fs.pipe_file(path, b"old")
    with pytest.raises(OSError, match="Could not obtain block"):
        hdfs.read(fs, path)
