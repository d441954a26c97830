"""A shard's tail (its footer) is fetched once, however many reader threads open the shard
at once.

Threads opening one shard together each fetched its tail: an extra range request per
thread on remote storage, and a flipped bit at rest in the tail was then read more times
than "read again once before the verdict" allows (``make test`` failed now and then in
``test_a_flip_at_rest_is_never_a_wrong_record`` with the byte served 5 times, not at most
4). Now one thread fetches it and the others wait for it; a fetch asked to be fresh (after a
mismatch) is fetched again, once, whoever asks.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import fsspec
import pytest
from fsspec.implementations.memory import MemoryFileSystem

from snapshot_cli.readers.ranged import Tails

THREADS = 6
PATH = "/tails/shard.arrow"


class MeetingFileSystem(MemoryFileSystem):
    """memory:// whose reads wait until every thread is reading (or ``patience`` passes), so
    readers that should have waited for another's fetch are all caught fetching."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reads = 0
        self.counting = threading.Lock()
        self.meeting = threading.Barrier(THREADS, timeout=1.0)

    def cat_file(self, path: str, start: Any = None, end: Any = None, **kwargs: Any) -> bytes:
        with self.counting:
            self.reads += 1
        with contextlib.suppress(threading.BrokenBarrierError):  # (a bound, not the sync)
            self.meeting.wait()
        return bytes(super().cat_file(path, start=start, end=end, **kwargs))


@pytest.fixture
def fs() -> Iterator[MeetingFileSystem]:
    fs = MeetingFileSystem(skip_instance_cache=True)
    fs.pipe_file(PATH, b"x" * 5000 + (20).to_bytes(4, "little") + b"ARROW1")
    yield fs
    fs.rm(PATH)


def gets_at_once(tails: Tails, fs: fsspec.AbstractFileSystem, fresh: bool) -> list[Any]:
    got: list[Any] = [None] * THREADS
    start = threading.Barrier(THREADS)

    def get(i: int) -> None:
        start.wait()
        got[i] = tails.get(fs, PATH, 5010, fresh)

    threads = [threading.Thread(target=get, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return got


def test_threads_opening_a_shard_at_once_fetch_its_tail_once(fs: MeetingFileSystem) -> None:
    tails = Tails()
    got = gets_at_once(tails, fs, fresh=False)
    assert fs.reads == 1
    assert tails.requests == 1
    assert all(g is got[0] for g in got)  # the one tail, shared
    assert got[0] == (0, fs.cat_file(PATH))


def test_a_fresh_tail_asked_by_threads_at_once_is_fetched_again_once(
    fs: MeetingFileSystem,
) -> None:
    tails = Tails()
    first = tails.get(fs, PATH, 5010)  # (alone: its read waits out the meeting)
    fs.reads = 0
    fs.meeting.reset()
    got = gets_at_once(tails, fs, fresh=True)
    assert fs.reads == 1
    assert all(g is got[0] for g in got) and got[0] is not first
    assert tails.get(fs, PATH, 5010) is got[0]  # and kept
