"""JAX: batches as ``jax.Array``, placed on the devices ahead of use.

``loader.to_jax(sharding=None, prefetch=2)`` yields ``dict[str, jax.Array]``. Each batch is
handed to ``jax.device_put`` ``prefetch`` batches before it is used; ``device_put`` is
asynchronous, so the transfer of the next batches overlaps the step on this one (what
Grain's and Flax's prefetch-to-device do). With a ``sharding`` (e.g.
``NamedSharding(mesh, PartitionSpec("batch"))``) every column is split along the batch axis
over its devices; in a multi-process job each process's loader reads its own part of the
snapshot (make it with ``rank="auto"``: ``jax.process_index()``/``process_count()`` are
used once ``jax.distributed`` is initialised) and the global array is assembled with
``jax.make_array_from_process_local_data``. Ragged, string and bytes columns cannot be
device arrays: they stay numpy object arrays.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import OptionError
from .adapter import Adapter

if TYPE_CHECKING:
    from .loader import Batch, Loader


def _jax() -> Any:
    try:
        import jax
    except ImportError as err:
        raise ImportError("the JAX adapter needs jax: pip install 'arrowsnap[jax]'") from err
    return jax


class JaxBatches(Adapter[dict[str, Any]]):
    """``loader.to_jax(...)``: iterate for ``dict[str, jax.Array]`` batches."""

    def __init__(self, loader: Loader, sharding: Any = None, prefetch: int = 2) -> None:
        jax = _jax()
        super().__init__(loader, depth=prefetch)
        self.sharding = sharding
        self._processes = jax.process_count()
        options = loader.plan_options
        if self._processes > 1 and options.world_size != self._processes:
            raise OptionError(
                f"this is process {jax.process_index()} of {self._processes}, but the loader "
                f"reads part {options.rank} of {options.world_size}: make it with "
                "rank='auto', world_size='auto' so that each process reads its own part"
            )
        if sharding is not None and self._processes == 1:  # multi-process: checked per batch
            pieces = self._pieces(options.batch_size)
            if options.batch_size % pieces:
                raise OptionError(
                    f"batch_size {options.batch_size} does not split over the {pieces} "
                    f"devices of {sharding} along the batch axis: use a multiple of {pieces}"
                )

    def _pieces(self, rows: int) -> int:
        """Into how many pieces ``sharding`` cuts the batch axis (1 if it cannot tell)."""
        try:
            size = rows * len(self.sharding.device_set)  # divisible by any split of the devices
            local = self.sharding.shard_shape((size,))[0]
        except (ValueError, TypeError, AttributeError):
            return 1
        return max(1, size // max(1, local))

    def _start(self, batch: Batch) -> dict[str, Any]:
        jax = _jax()
        # Object columns (ragged, strings) cannot be device arrays; the rest go in one call:
        # one dispatch per batch, not one per column.
        out: dict[str, Any] = {k: v for k, v in batch.items() if v.dtype == object}
        arrays = {k: v for k, v in batch.items() if v.dtype != object}
        if not arrays:
            return out
        if self.sharding is None:
            out.update(jax.device_put(arrays))
            return {k: out[k] for k in batch}  # the loader's column order
        try:
            if self._processes > 1:
                out.update(
                    {k: jax.make_array_from_process_local_data(self.sharding, v)
                     for k, v in arrays.items()}
                )  # fmt: skip
            else:
                out.update(jax.device_put(arrays, self.sharding))
        except ValueError as err:
            rows = len(next(iter(arrays.values())))
            raise OptionError(
                f"a batch of {rows} records cannot be placed with {self.sharding} ({err}); "
                "if it is the last, partial batch of an epoch, make the loader with "
                "drop_last=True"
            ) from err
        return {k: out[k] for k in batch}  # the loader's column order
