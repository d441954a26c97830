"""What a pipeline's function returned, as the items a task writes: a generator, a list or a
tuple of records or batches, one record or batch, or None; and the errors for what is none
of these (a coroutine, a string, a tuple of a record's parts)."""

from __future__ import annotations

import inspect
import types
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ..errors import RecordError
from . import advice, convert

PLAIN = (types.GeneratorType, list, tuple)


def items(result: Any) -> Iterable[Any]:
    """What the function returned → items. A lone record/batch or None is accepted too."""
    if type(result) is tuple and result and not any(map(is_record, result)):
        kinds = ", ".join(type(x).__name__ for x in result[:4]) + (", ..." * (len(result) > 4))
        raise RecordError(  # (a torch Dataset's __getitem__ habit: return features, label)
            f"the pipeline returned a tuple ({kinds}), and a returned tuple is taken as its "
            "records, one an item: return one record as a dict of column → value instead "
            "(return {'x': x, 'label': label}), or yield records"
        )
    if type(result) in PLAIN:  # the usual: a generator or a list of records, told at once
        return result
    if result is None:
        return ()
    if is_record(result):  # (a structured array: a table, one batch, not its rows one by one)
        return (result,)
    if inspect.isasyncgen(result) or inspect.isawaitable(result):
        kind = "an async generator" if inspect.isasyncgen(result) else "a coroutine"
        if inspect.iscoroutine(result):
            result.close()  # (never awaited: Python would warn of it at exit)
        raise RecordError(
            f"the pipeline is async (it returned {kind}): snap calls it as a plain function; "
            "make it a plain def that yields, and run any async code in it with asyncio.run"
        )
    if hasattr(result, "shape") and str(getattr(result, "dtype", "object")) != "object":
        # (an array, a tensor, a Series of numbers: iterated, its rows were said as values
        # yielded, "of type float64"; one of objects may hold records)
        kind = f"{type(result).__module__.partition('.')[0]} {type(result).__name__}"
        raise RecordError(
            f"the pipeline returned a {kind} (dtype {result.dtype}, shape {tuple(result.shape)}), "
            "whose items are values, not records: return or yield records that name their "
            "columns ({'x': value}), or a Batch of columns (snapshot_cli.Batch(x=array))"
        )
    if isinstance(result, (str, bytes)) or not isinstance(result, Iterable):
        raise RecordError(
            f"the pipeline returned a value of type {type(result).__name__}; it must yield or "
            f"return records (dicts) or batches{advice.not_a_record_hint(result)}"
        )
    return result


def is_record(item: Any) -> bool:
    """A record or a batch, as :meth:`.task.TaskWriter.add` takes them."""
    if isinstance(item, Mapping) or convert.is_batch(item):
        return True
    return isinstance(item, np.ndarray) and item.dtype.names is not None


def structured_batch(array: np.ndarray) -> convert.Batch:
    """A numpy structured array, a table of named fields: a batch of its fields' columns
    (``arr[name]`` each; a 0-d one is one record)."""
    if array.ndim > 1:
        raise RecordError(
            f"the pipeline yielded a numpy structured array of shape {array.shape}; a "
            "structured array is a batch of records, one per row: yield arr.reshape(-1)"
        )
    array = array.reshape(-1)
    return convert.Batch({name: array[name] for name in array.dtype.names or ()})
