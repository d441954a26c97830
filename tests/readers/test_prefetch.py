"""The hand-off between the producer and the consumer: what the producer may wait for.

The loader starts a window in the slab of the window before once the consumer has let go of
it (:class:`snapshot_cli.readers.run._Later`), which it knows from the buffer: the consumer
took a batch (``taken``), or took them all and asks for more (``drained``)."""

from __future__ import annotations

import threading

import pytest

from snapshot_cli.readers.prefetch import Closed, PrefetchBuffer


def consume(buffer: PrefetchBuffer, got: list[int]) -> threading.Thread:
    """A consumer thread that takes items until the buffer is closed."""

    def run() -> None:
        try:
            while True:
                got.append(buffer.get())
        except Closed:
            pass

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_drained_returns_once_every_item_is_taken_and_the_consumer_asks_for_more() -> None:
    buffer = PrefetchBuffer(8)
    for i in range(5):
        buffer.put(i)
    got: list[int] = []
    thread = consume(buffer, got)
    buffer.drained()
    assert got == [0, 1, 2, 3, 4]  # all taken before drained() returned
    buffer.put(5)
    buffer.drained()
    assert got == [0, 1, 2, 3, 4, 5]
    buffer.close()
    thread.join()


def test_taken_returns_once_the_consumer_takes_an_item() -> None:
    buffer = PrefetchBuffer(8)
    buffer.put(0)
    buffer.put(1)
    got: list[int] = []
    thread = consume(buffer, got)
    buffer.taken()
    assert buffer._taken >= 1  # (the consumer's append may trail its take)
    buffer.drained()
    buffer.taken()  # the consumer waits with nothing left: nothing to wait for
    assert got == [0, 1]
    buffer.close()
    thread.join()


@pytest.mark.parametrize("wait", ["taken", "drained"])
def test_waits_end_when_the_buffer_is_closed(wait: str) -> None:
    """A loader that shuts down while the producer waits for its consumer stops waiting."""
    buffer = PrefetchBuffer(2)
    buffer.put(0)  # nobody will take it
    done = threading.Event()

    def producer() -> None:
        getattr(buffer, wait)()
        done.set()

    thread = threading.Thread(target=producer)
    thread.start()
    buffer.close()
    thread.join()
    assert done.is_set()
