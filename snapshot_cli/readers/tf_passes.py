"""The loader passes a ``to_tf()`` dataset's passes take their batches from (:mod:`.tf`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .loader import Batch, Loader


class Reading:
    """The loader passes a :class:`TFBatches` takes its batches from. Apart from it, so that
    the generator of a pass holds this, not the TFBatches: a dataset dropped with its
    iterators frees both at once, and the loader's pass stops (the generator would make a
    cycle with the TFBatches, freed only by the cyclic garbage collector)."""

    def __init__(self, loader: Loader) -> None:
        self.loader = loader
        self.pass_: Iterator[Batch] | None = None  # the loader's pass under way

    def stop(self) -> None:
        if self.pass_ is not None:
            reading, self.pass_ = self.pass_, None
            reading.close()  # type: ignore[attr-defined]  # a generator: stops its threads

    def batches(self, n: int) -> Iterator[Batch]:
        """``n`` batches (-1: endless) from as many loader passes as they take."""
        remaining = None if n < 0 else n
        empty = 0  # loader passes in a row that yielded nothing
        while remaining is None or remaining > 0:
            fresh = self.pass_ is None
            if self.pass_ is None:
                self.pass_ = self.loader._one_pass()  # (not iter(): its consumer is ours)
            batch = next(self.pass_, None)
            if batch is None:  # the loader's pass ended; this pass goes on into the next
                self.pass_ = None
                empty = empty + 1 if fresh else 0
                if empty > 1:  # the loader yields nothing at all: nothing more will come
                    return  # (one empty pass: a state taken after a pass's last batch,
                continue  # as a pass of this dataset leaves it; the next is the next epoch)
            empty = 0
            if remaining is not None:
                remaining -= 1
                if not remaining:  # the pass's last: no thread runs on (the loader keeps its
                    self.stop()  # place; TensorFlow may never ask for one more)
            yield batch
