"""``loader.to_torch(device=None, prefetch=2)``: the loader's batches as tensors, copied to a
device ahead (see :mod:`.torch`'s docstring for what each column becomes)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import OptionError
from .adapter import Adapter
from .torch_tensors import import_torch as _torch
from .torch_tensors import to_tensors

if TYPE_CHECKING:
    from .loader import Batch, Loader


class TorchBatches(Adapter[dict[str, Any]]):
    """``loader.to_torch(...)``: iterate for ``dict[str, torch.Tensor]`` batches."""

    def __init__(self, loader: Loader, device: Any = None, prefetch: int = 2) -> None:
        torch = _torch()
        try:
            self.device = None if device is None else torch.device(device)
        except (RuntimeError, TypeError, ValueError) as err:  # (torch lists the device types;
            # an index beyond int64 is its ValueError "Overflow when unpacking long long")
            first = str(err).strip().splitlines()[0]
            raise OptionError(f"device={device!r} is not a torch device: {first}") from None
        self._cuda = self.device is not None and self.device.type == "cuda"
        if self._cuda and not torch.cuda.is_available():
            raise OptionError(f"device={device!r} but torch sees no CUDA device")
        if self.device is not None and self.device.type != "cpu":
            try:  # a device torch knows but this build or machine lacks: said now, not mid-epoch
                torch.empty(0).to(self.device)
            except Exception as err:  # noqa: BLE001 - RuntimeError, AssertionError (xpu), ...
                first = (str(err).strip().splitlines() or [type(err).__name__])[0]
                raise OptionError(f"device={device!r} cannot be used here: {first}") from None
        on_host = self.device is None or self.device.type == "cpu"
        prefetch = self.checked_prefetch(prefetch)  # on the host too, where it is not used
        super().__init__(loader, depth=0 if on_host else prefetch)
        self._stream = torch.cuda.Stream(self.device) if self._cuda else None

    def _start(self, batch: Batch) -> Any:
        tensors = to_tensors(batch)
        if self.device is None or self.device.type == "cpu":
            return tensors, None
        torch = _torch()
        if not self._cuda:
            return {k: _move(v, lambda t: t.to(self.device)) for k, v in tensors.items()}, None
        with torch.cuda.stream(self._stream):
            moved = {
                k: _move(v, lambda t: t.pin_memory().to(self.device, non_blocking=True))
                for k, v in tensors.items()
            }
            done = torch.cuda.Event()
            done.record(self._stream)
        return moved, done

    def _finish(self, started: Any) -> dict[str, Any]:
        tensors, done = started
        if done is not None:
            torch = _torch()
            current = torch.cuda.current_stream(self.device)
            current.wait_event(done)
            for value in tensors.values():  # memory made on the side stream, used on this one
                _move(value, lambda t: t.record_stream(current))
        return tensors


def _move(value: Any, fn: Any) -> Any:
    torch = _torch()
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, list) and value and isinstance(value[0], torch.Tensor):
        return [fn(v) for v in value]
    return value
