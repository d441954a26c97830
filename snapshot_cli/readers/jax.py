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

Every batch of an epoch must split evenly over the sharding's devices along the batch axis.
``to_jax(sharding=...)`` checks that when it is made, from the loader's plan (arithmetic, no
data read): the batch size, and with ``drop_last=False`` the final partial batch of each
epoch (the records per rank modulo the batch size). The ``OptionError`` names the size, the
number of devices and the way out: a batch size that divides, and ``drop_last=True`` or a
world size that leaves a number of records per rank that divides. Two cases are checked only
when a batch is placed, with the same advice: a multi-process job (``jax.process_count() >
1``), where the global array is assembled from every process's part and this up-front check
is not made; and a ``map`` that changes the number of records in a batch.

64-bit columns: unless ``jax.config.update("jax_enable_x64", True)`` is on, JAX makes
32-bit arrays of them: int64 → int32, uint64 → uint32, float64 → float32. ``device_put``
does that without a warning, and an integer that does not fit keeps its low 32 bits
(2**32 + 5 becomes 5): an id or a hash silently becomes another. So each batch's int64 and
uint64 columns are checked (their minimum and maximum: ~3 us for a column of labels, ~0.2 ms
for 4 MiB of token ids, about what JAX's own narrowing copy costs), and a value that does
not fit is an ``OptionError`` naming the column, the value and the ways out. So is a finite
float64 beyond float32's range, which JAX would make inf (numpy only warned "overflow
encountered in cast"); inf and NaN pass as they are, and the precision is float32's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import OptionError
from .adapter import Adapter
from .elastic import GlobalOptions
from .jax_put import DirectPut
from .map_arrays import mapped_arrays
from .plan import EpochPlan
from .stats import records_in

if TYPE_CHECKING:
    from .loader import Batch, Loader


def _jax() -> Any:
    try:
        import jax
    except ImportError as err:
        raise ImportError("the JAX adapter needs jax: pip install jax") from err
    return jax


class JaxBatches(Adapter[dict[str, Any]]):
    """``loader.to_jax(...)``: iterate for ``dict[str, jax.Array]`` batches."""

    def __init__(self, loader: Loader, sharding: Any = None, prefetch: int = 2) -> None:
        jax = _jax()
        super().__init__(loader, depth=prefetch)
        if sharding is not None and not isinstance(sharding, (jax.sharding.Sharding, jax.Device)):
            raise OptionError(
                f"sharding must be None, a jax.sharding.Sharding or a jax.Device, got "
                f"{sharding!r:.80}"
            )
        self.sharding: Any = sharding
        self._processes = jax.process_count()
        self._put = DirectPut(jax)  # jax.device_put(arrays) without its dispatch
        options = loader.plan_options
        if self._processes > 1 and options.world_size != self._processes:
            raise OptionError(
                f"this is process {jax.process_index()} of {self._processes}, but the loader "
                f"reads part {options.rank} of {options.world_size}: make it with "
                "rank='auto', world_size='auto' so that each process reads its own part"
            )
        if sharding is not None and self._processes == 1:  # multi-process: checked per batch
            self._check_batches_split(loader)

    def _check_batches_split(self, loader: Loader) -> None:
        """Raise OptionError now if a batch of an epoch would not split over the devices.

        Every epoch has the same sizes (the plan's records per rank do not depend on the
        epoch): full batches of ``batch_size``, then with ``drop_last=False`` one partial
        batch of the remainder. Found here, not at the end of the first epoch.
        """
        options = loader.plan_options
        b = options.batch_size
        pieces = self._pieces(b)
        if b % pieces and isinstance(options, GlobalOptions):  # (b: a rank's slice of it)
            g, ws = options.global_batch_size, options.world_size
            raise OptionError(
                f"global_batch_size {g} gives each of the {ws} ranks batches of {b} records, "
                f"which do not split over the {pieces} devices of {self.sharding} along the "
                f"batch axis: use a global_batch_size that is a multiple of {ws * pieces}"
            )
        if b % pieces:
            raise OptionError(
                f"batch_size {b} does not split over the {pieces} devices of "
                f"{self.sharding} along the batch axis: use a multiple of {pieces}"
            )
        if isinstance(options, GlobalOptions):
            return  # the global order pads its last batch: every batch is full
        plan = EpochPlan(loader.blocks, options, 0)
        rows = plan.num_rows
        last = 0 if options.drop_last else rows % b  # the partial batch (0: none)
        if last % pieces:
            # b is a multiple of pieces, so last ≡ rows (mod pieces): every batch size that
            # splits leaves a last batch that does not; only the records per rank can change
            ws = options.world_size
            dropped = plan.total // ws // b  # batches per epoch with drop_last=True
            raise OptionError(
                f"the last batch of every epoch has {last} records, which do not split over "
                f"the {pieces} devices of {self.sharding} along the batch axis: this rank "
                f"reads {rows} records per epoch ({plan.total} over world_size {ws}, rounded "
                f"up), and {rows} % batch_size {b} = {last}. Make the loader with "
                f"drop_last=True (batches of {b} only: {dropped} per epoch"
                + (", so choose a smaller batch_size too" if not dropped else "")
                + f"), or a world_size for which the records per rank are a multiple of "
                f"{pieces}; any other batch_size that splits leaves a last batch that does not"
            )

    def _pieces(self, rows: int) -> int:
        """Into how many pieces ``sharding`` cuts the batch axis (1 if it cannot tell), asked
        of a shape of as many axes as it names (``P("data", None, "model")``: three; asked
        of one axis, JAX raised IndexError)."""
        try:
            size = rows * len(self.sharding.device_set)  # divisible by any split of the devices
        except (TypeError, AttributeError):
            return 1
        for axes in range(1, 9):
            try:
                local = self.sharding.shard_shape((size,) * axes)[0]
            except (ValueError, TypeError, AttributeError, IndexError):
                continue
            return max(1, size // max(1, local))
        return 1

    def _start(self, batch: Batch) -> dict[str, Any]:
        jax = _jax()
        batch = mapped_arrays(batch)  # (a map may return tensors, lists or numbers)
        # Object columns (ragged, strings) cannot be device arrays; the rest go in one call:
        # one dispatch per batch, not one per column.
        # (Datetimes of a user's Arrow table have no JAX dtype either: left as they are.)
        out: dict[str, Any] = {k: v for k, v in batch.items() if v.dtype.kind not in "biufc"}
        arrays = {k: v for k, v in batch.items() if v.dtype.kind in "biufc"}
        if not arrays:
            return out
        if not jax.config.jax_enable_x64:
            _check_narrowing(arrays)
        if self.sharding is None:
            out.update(self._put(arrays) if self._processes == 1 else jax.device_put(arrays))
            return {k: out[k] for k in batch}  # the loader's column order
        named = len(getattr(self.sharding, "spec", None) or ())  # (axes a NamedSharding names)
        if (short := next((k for k, v in arrays.items() if v.ndim < named), None)) is not None:
            # (JAX asserts on it: an AssertionError from its internals, or nothing under -O)
            reason = f"it has {arrays[short].ndim} axes, the sharding names {named}"
            raise self._not_placed(arrays, short, reason)
        try:
            if self._processes > 1:
                out.update(
                    {k: jax.make_array_from_process_local_data(self.sharding, v)
                     for k, v in arrays.items()}
                )  # fmt: skip
            else:
                out.update(jax.device_put(arrays, self.sharding))
        except ValueError as err:
            jax_ = _jax()
            name = next((k for k, v in arrays.items() if not _places(jax_, v, self.sharding)), None)
            raise self._not_placed(arrays, name, str(err)) from err
        return {k: out[k] for k in batch}  # the loader's column order

    def _not_placed(self, arrays: dict[str, np.ndarray], name: str | None, err: str) -> OptionError:
        """Why ``arrays`` cannot be placed with the sharding: ``name``, the column that cannot
        (one sharding applies to every column: one of more axes than a column has fails
        it), or the last, partial batch of an epoch said as such."""
        rows, full = records_in(arrays), self.loader.plan_options.batch_size
        what = f"a batch of {rows} records" if name is None else (
            f"column {name!r} (shape {arrays[name].shape}) of a batch of {rows} records"
        )  # fmt: skip
        hint = (
            "; as the last, partial batch of an epoch: make the loader with drop_last=True"
            if rows < full
            else "; the sharding applies to every column: leave this one out (columns=[...]) "
            "or reshape it (map=), or shard only the batch axis"
        )
        return OptionError(f"{what} cannot be placed with {self.sharding} ({err}){hint}")


def _places(jax: Any, array: np.ndarray, sharding: Any) -> bool:
    try:
        jax.device_put(array, sharding)
    except (ValueError, AssertionError):
        return False
    return True


# What JAX without x64 makes of a 64-bit integer column, and the values that fit it
_NARROWED = {np.dtype(np.int64): np.int32, np.dtype(np.uint64): np.uint32}


def _check_narrowing(arrays: dict[str, np.ndarray]) -> None:
    """Raise OptionError if a 64-bit integer column holds a value its 32-bit JAX array cannot
    (it would keep only its low 32 bits), or a float64 column a finite value float32 cannot
    (it would be inf)."""
    for name, values in arrays.items():
        if values.dtype == np.float64 and values.size:
            _check_float32(name, values)
        narrow = _NARROWED.get(values.dtype)
        if narrow is None or not values.size:
            continue
        info = np.iinfo(narrow)
        low, high = values.min(), values.max()
        if low >= info.min and high <= info.max:
            continue
        bad = int(low if low < info.min else high)
        raise OptionError(
            f"column {name!r} holds {bad:,} in this batch, which JAX without x64 cannot: it "
            f"makes {values.dtype} columns {np.dtype(narrow)}, keeping the low 32 bits of a "
            "value (silently another number). Turn x64 on before iterating "
            "(jax.config.update('jax_enable_x64', True)), leave the column out "
            "(loader(columns=[...])), or map it into range with the loader's map"
        )


_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _check_float32(name: str, values: np.ndarray) -> None:
    """A finite float64 beyond float32's range (1e300: a sentinel, a sum, a variance) is
    inf in JAX without x64; inf and NaN stay what they are, small values lose precision
    only. Two reductions a batch where every value fits (NaN or inf: a third pass)."""
    low, high = values.min(), values.max()
    if low >= -_FLOAT32_MAX and high <= _FLOAT32_MAX:
        return
    with np.errstate(over="ignore", invalid="ignore"):
        lost = np.isfinite(values) & np.isinf(values.astype(np.float32))
    if lost.any():
        bad = float(values[lost].flat[0])
        raise OptionError(
            f"column {name!r} holds {bad:g} in this batch, which JAX without x64 makes inf: "
            "it makes float64 columns float32, whose largest value is 3.4e+38. Turn x64 on "
            "before iterating (jax.config.update('jax_enable_x64', True)), leave the column "
            "out (loader(columns=[...])), or map it into range with the loader's map"
        )
