"""A numpy batch as torch tensors (pure but for importing torch): numeric columns shared
without a copy, ragged ones as lists of tensors, and what torch has no dtype for (text,
bytes, structs, datetimes of a yielded Arrow table) as Python values, which a DataLoader's
workers also hand on as they are."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .adapter import as_array

if TYPE_CHECKING:
    from .loader import Batch


def import_torch() -> Any:
    try:
        import torch
    except ImportError as err:
        raise ImportError(
            "the PyTorch adapter needs torch: pip install 'arrowsnap[torch]' "
            "(or a torch build for your accelerator)"
        ) from err
    return torch


NUMERIC = "biufc"  # numpy kinds torch has tensors of


def to_tensors(batch: Batch) -> dict[str, Any]:
    """numpy batch → tensors without copying numeric columns (see the module docstring)."""
    torch = import_torch()
    out: dict[str, Any] = {}

    def tensor(a: np.ndarray) -> Any:
        # read-only arrays (Arrow's zero-copy views of ragged values) are copied: a tensor
        # is always writable, and writing into Arrow's buffers would be undefined
        return torch.from_numpy(a if a.flags.writeable else a.copy())

    for name, value in batch.items():
        if isinstance(value, torch.Tensor):  # a map's own tensor: as it is
            out[name] = value
            continue
        value = as_array(name, value)
        if value.dtype.kind in NUMERIC:
            out[name] = tensor(value)
        elif value.dtype.kind in "mM":  # datetimes of a user's Arrow table: no torch dtype,
            # and a DataLoader would fail on the array: Python's (to the microsecond)
            out[name] = value.astype(f"{value.dtype.kind}8[us]").tolist()
        elif len(value) and isinstance(value[0], np.ndarray) and value[0].dtype.kind in NUMERIC:
            out[name] = [tensor(v) for v in value]
        else:  # text, bytes, lists of text, structs: Python values
            items = value.tolist()
            if items and isinstance(items[0], np.ndarray):  # lists of text
                items = [v.tolist() if isinstance(v, np.ndarray) else v for v in items]
            out[name] = items
    return out
