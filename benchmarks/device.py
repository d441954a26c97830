"""Benchmark: what the framework adapters add on top of the bare loader.

Replays the replay benchmark's 2 GB snapshot of image-like records (3x64x64 uint8 + label,
batches of 256 = 3 MiB; ``--codec`` lz4 by default, the fastest compressed replay, so any
per-batch overhead shows) and times four passes, after three untimed ones, of:

  * the bare loader (numpy batches): the baseline;
  * ``loader.to_torch()``: tensors sharing the numpy memory (CPU, no device copy);
  * ``loader.to_jax(prefetch=2)``: placed on the CPU device ahead of use (the runtime call
    ``jax.device_put`` ends in, without its dispatch: ``snapshot_cli/readers/jax_put.py``);
  * ``loader.to_tf()``: a ``tf.data.Dataset`` calling into Python once per 8 batches.

Each consumer touches one byte of every batch (so lazy conversions are paid for), each run
is a fresh process (an imported framework's thread pools would slow whatever runs after it),
the configurations alternate within each repeat, and the table reports the median of each
repeat's ratio of an adapter's rate to the bare loader's (targets: to_torch and to_jax >=
0.95, to_tf >= 0.85). Each child also times its framework alone on batches made in advance
(no loader running): the adapter's conversion and the framework's own per-batch work
(to_jax()'s adapter itself over them; a dataset built by to_tf's own code over them).
The table's "ceiling" is bare / (bare + alone) per batch: the best ratio the adapter can
reach where that work cannot overlap with the loader's, as on 2 cores the loader keeps busy.
The to_tf() child also times tf.data alone handing a Python loop one prepared batch over and
over (no Python, no adapter per element): the least any tf.data.Dataset iterated in Python
costs per batch.
On a machine with a CUDA GPU, ``to_torch(device="cuda")`` is added with a simulated step
(``--step-ms``) and the table reports the share of step time spent waiting for input.
This is a report, not a test: nothing is asserted.

    python benchmarks/device.py                      # ~6 minutes (reuses replay's snapshot)
    python benchmarks/device.py --codec zstd --repeats 5 --json device.json
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # benchmarks/_common.py: the snapshot and its cache

import snapshot_cli as snap

BATCH = 256
# Passes timed per run, after three untimed ones: the adapter's and the bare loader's in
# an order where neither always runs first and a steady drift weighs on both alike (ABBABAAB).
ORDER = ("adapter", "bare", "bare", "adapter", "bare", "adapter", "adapter", "bare")


def _touch(value: Any) -> int:
    """Read one element so that a lazy conversion is paid for; returns its byte count."""
    if hasattr(value, "nbytes"):
        if hasattr(value, "block_until_ready"):
            value.block_until_ready()
        return int(value.nbytes)
    if hasattr(value, "numel"):  # torch
        return int(value.numel() * value.element_size())
    if hasattr(value, "dtype") and hasattr(value.dtype, "size"):  # tf.Tensor
        return int(value.shape.num_elements()) * int(value.dtype.size)
    raise TypeError(f"cannot count the bytes of {type(value)}")


def _run(
    make: Callable[[snap.Loader], Iterable[dict[str, Any]]], s: snap.Snapshot
) -> tuple[float, float]:
    """GB/s of passes through the adapter, after three untimed ones (verify, allocations,
    tuning), and of as many passes of the same loader bare, alternating with them in this
    process (the framework imported, its threads running), in ORDER: (adapter, bare)."""
    loader = s.loader(BATCH, shuffle=True, seed=0, epochs=1)
    adapted = make(loader)
    # untimed: the 1st epoch, an uncompressed snapshot's first gathered one (its batch
    # buffers made), and one more while "auto" settles (a bare loader against itself in this
    # order read 0.88 with two)
    for source in (adapted, loader, adapted):
        for _ in source:
            pass
    took = {"adapter": 0.0, "bare": 0.0}
    nbytes = {"adapter": 0, "bare": 0}
    for side in ORDER:
        source = adapted if side == "adapter" else loader
        t0 = time.perf_counter()
        for batch in source:
            nbytes[side] += _touch(batch["image"]) + _touch(batch["label"])
        took[side] += time.perf_counter() - t0
    loader.close()
    return nbytes["adapter"] / took["adapter"] / 1e9, nbytes["bare"] / took["bare"] / 1e9


FLOOR_BATCHES = 400  # conversions timed by framework_floor


def _prepared() -> list[dict[str, Any]]:
    """Eight batches shaped like the loader's (64-byte aligned, contiguous), made up front."""
    import numpy as np

    from snapshot_cli.readers.window import aligned_empty

    out = []
    for i in range(8):
        image = aligned_empty((BATCH, *_common.IMAGE_SHAPE), np.uint8)
        image[:] = i
        label = aligned_empty((BATCH,), np.int64)
        label[:] = i
        out.append({"image": image, "label": label})
    return out


class _Prepared:
    """What ``to_tf()`` and ``to_jax()`` ask of a loader, over the prepared batches
    (FLOOR_BATCHES a pass)."""

    epochs = 1
    map = None  # to_tf() takes a map's columns from its first batch
    plan_options = None  # to_jax() reads it only in a job of several processes

    def __init__(self, schema: Any, batches: list[dict[str, Any]]) -> None:
        self.schema, self.columns, self._batches, self._at = schema, list(batches[0]), batches, 0

    def __len__(self) -> int:
        return FLOOR_BATCHES

    def batches_per_epoch(self) -> int:
        return FLOOR_BATCHES

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for i in range(FLOOR_BATCHES):
            self._at = i + 1
            yield self._batches[i % 8]

    def state_dict(self) -> dict[str, Any]:
        return {"batch": self._at}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._at = state["batch"]

    def close(self) -> None:
        pass


def framework_floor(name: str, schema: Any = None) -> float:
    """Seconds per batch the adapter's framework spends on batches that already exist (no
    loader running): the adapter's own conversion, then what the framework does per batch.
    On 2 cores that the loader keeps busy, this cannot overlap with reading, so
    ``bare / (bare + floor)`` (per-batch times) bounds the adapter's ratio."""
    batches = _prepared()
    if name.startswith("bare"):
        return 0.0
    if name.startswith("to_torch"):
        import torch

        def each() -> Iterable[Any]:
            for i in range(FLOOR_BATCHES):
                yield {k: torch.from_numpy(v) for k, v in batches[i % 8].items()}

    elif name.startswith("to_jax"):
        from snapshot_cli.readers.jax import JaxBatches

        adapted = JaxBatches(_Prepared(schema, batches), prefetch=2)  # to_jax()'s own work

        def each() -> Iterable[Any]:
            return adapted

    elif name.startswith("to_tf"):
        from snapshot_cli.readers.tf import to_dataset

        ds = to_dataset(_Prepared(schema, batches))  # to_tf()'s own dataset, over them

        def each() -> Iterable[Any]:
            return ds

    else:
        return 0.0
    for _ in each():  # warm up: imports, tracing, thread pools
        pass
    t0 = time.perf_counter()
    for batch in each():
        _touch(batch["image"]) + _touch(batch["label"])
    return (time.perf_counter() - t0) / FLOOR_BATCHES


def tfdata_floor() -> float:
    """Seconds per element tf.data itself takes to hand a Python loop an element it already
    holds: one prepared batch, repeated, with no Python and no adapter per element (the
    options to_tf() sets). Any ``tf.data.Dataset`` iterated in Python pays this per batch."""
    import tensorflow as tf

    ds = tf.data.Dataset.from_tensors(_prepared()[0]).repeat(FLOOR_BATCHES)
    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = False
    options.autotune.enabled = False
    ds = ds.with_options(options)
    for _ in ds:  # warm up
        pass
    t0 = time.perf_counter()
    for element in ds:
        _touch(element["image"]) + _touch(element["label"])
    return (time.perf_counter() - t0) / FLOOR_BATCHES


TARGETS = {"to_torch() (cpu)": 0.95, "to_jax(prefetch=2) (cpu)": 0.95, "to_tf()": 0.85}


def configs(step_ms: float) -> dict[str, Callable[[snap.Loader], Iterable[dict[str, Any]]]]:
    out: dict[str, Callable[[snap.Loader], Iterable[dict[str, Any]]]] = {
        "bare loader (numpy)": lambda loader: loader,
        "to_torch() (cpu)": lambda loader: loader.to_torch(),
        "to_jax(prefetch=2) (cpu)": lambda loader: loader.to_jax(prefetch=2),
        "to_tf()": lambda loader: loader.to_tf(),
    }
    import torch

    if torch.cuda.is_available():
        out["to_torch(device='cuda')"] = lambda loader: loader.to_torch(device="cuda")
    return out


def gpu_wait(s: snap.Snapshot, step_ms: float) -> dict[str, float] | None:
    """Share of a simulated step's time the GPU waited for input (CUDA only)."""
    import torch

    if not torch.cuda.is_available():
        return None
    batches = s.loader(BATCH, shuffle=True, seed=0).to_torch(device="cuda")
    waited = steps = 0.0
    t_end = time.perf_counter()
    for batch in batches:
        waited += time.perf_counter() - t_end
        torch.cuda._sleep(int(step_ms * 1e6))  # a kernel of ~step_ms on the device
        batch["image"].float().mean().item()
        steps += 1
        t_end = time.perf_counter()
    total = time.perf_counter() - t_end + waited + steps * step_ms / 1000
    return {"input_wait_pct": round(100 * waited / max(1e-9, total), 2), "steps": steps}


def _child_run(name: str, args: argparse.Namespace) -> tuple[float, float, float, float | None]:
    """One configuration in a fresh process: a framework's thread pools (TensorFlow's,
    XLA's) keep running once imported and would slow every later configuration. →
    (GB/s, the bare loader's GB/s in the same process, the framework's own seconds per
    batch: :func:`framework_floor`)."""
    cmd = [__file__, "--child", name, "--codec", args.codec,
           "--size-gb", str(args.size_gb), "--data-dir", args.data_dir]  # fmt: skip
    out = _common.run_child(cmd, name)
    tfdata = out.get("tfdata_s")
    return (float(out["gb_per_s"]), float(out["bare_gb_per_s"]), float(out["floor_s"]),
            None if tfdata is None else float(tfdata))  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = _common.parser(__doc__)
    p.add_argument("--codec", default="lz4", choices=["zstd", "lz4", "none"])
    p.add_argument("--size-gb", type=float, default=2.0)
    _common.add_data_dir_option(p, _common.SHARED_DATA_DIR)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--step-ms", type=float, default=20.0)
    _common.add_json_option(p)
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    s = _common.ensure_snapshot(args.data_dir, args.codec, args.size_gb, False, 2)
    cfgs = configs(args.step_ms)
    if args.child:
        rate, bare = _run(cfgs[args.child], s)
        floor = framework_floor(args.child, s.schema)
        tfdata = tfdata_floor() if args.child.startswith("to_tf") else None
        print(json.dumps({"gb_per_s": rate, "bare_gb_per_s": bare, "floor_s": floor,
                          "tfdata_s": tfdata}))  # fmt: skip
        return 0
    mib = BATCH * _common.ROW_BYTES / 2**20
    print(f"{os.cpu_count()} cores, python {platform.python_version()}; {args.codec} "
          f"{args.size_gb:g} GB, batch {BATCH} ({mib:.1f} MiB)")  # fmt: skip
    runs: dict[str, list[float]] = {name: [] for name in cfgs}
    same: dict[str, list[float]] = {name: [] for name in cfgs}  # x its own process's bare
    floors: dict[str, list[float]] = {name: [] for name in cfgs}
    tfdata_runs: list[float] = []  # tf.data's own cost per element (tfdata_floor)
    names = list(cfgs)
    for r in range(args.repeats):
        for name in _common.rotated(names, r):
            _common.raw_read(_common.shard_paths(s))  # page cache warm: measure memory
            rate, bare, floor, tfdata = _child_run(name, args)
            if tfdata is not None:
                tfdata_runs.append(tfdata)
            runs[name].append(rate)
            same[name].append(rate / bare)
            floors[name].append(floor)
            print(f"  repeat {r + 1}/{args.repeats} {name:28s} {rate:6.2f} GB/s  bare in the "
                  f"same process {bare:6.2f} GB/s  framework alone {floor * 1e6:6.0f} "
                  "us/batch", flush=True)  # fmt: skip
    bare_runs = runs["bare loader (numpy)"]
    base = statistics.median(bare_runs)
    per_batch = BATCH * _common.ROW_BYTES / (base * 1e9)  # the bare loader's seconds per batch
    rows = []
    print(f"\n{'configuration':28s} {'GB/s':>6s} {'x bare':>7s}  overhead  target        "
          f"{'alone':>8s} {'ceiling':>7s} {'same':>5s}  runs; x bare of each repeat")  # fmt: skip
    for name in names:
        med = statistics.median(runs[name])
        # each repeat's own ratio (its runs alternate with the bare loader's), then their
        # median: a slow minute of the machine slows both sides of a ratio, not one median
        ratios = [a / b for a, b in zip(runs[name], bare_runs, strict=True)]
        ratio = statistics.median(ratios)
        target = TARGETS.get(name, 0.0)
        verdict = _common.verdict(ratio >= target) if target else ""
        floor = statistics.median(floors[name])
        ceiling = per_batch / (per_batch + floor)
        in_process = statistics.median(same[name])
        print(f"{name:28s} {med:6.2f} {ratio:7.3f}  {100 * (1 - ratio):6.1f} %  "
              f"{f'>= {target:.2f}' if target else '':7s} {verdict:6s} "
              f"{floor * 1e6:5.0f} us {ceiling:7.2f} {in_process:5.2f}  "
              + _common.runs_text(runs[name]) + "; " + _common.runs_text(ratios))  # fmt: skip
        rows.append({"config": name, "gb_per_s": med, "ratio": ratio, "runs": runs[name],
                     "ratios": ratios, "framework_s_per_batch": floor, "ceiling": ceiling,
                     "same_process_ratio": in_process,
                     "same_process_ratios": same[name]})  # fmt: skip
    print(
        f"alone: the framework's own time per batch for batches made in advance (no loader: "
        f"the adapter's conversion, then {FLOOR_BATCHES} batches through the framework); "
        f"ceiling: bare / (bare + alone) per batch ({per_batch * 1e6:.0f} us bare), the best "
        "ratio when the framework's work cannot overlap with the loader's (no idle core); "
        "same: the adapter against the bare loader in its own process, their passes "
        "alternating (the framework imported for both: what a user of it compares)"
    )
    tfdata = statistics.median(tfdata_runs) if tfdata_runs else None
    if tfdata is not None:
        print(
            f"tf.data alone: {tfdata * 1e6:.0f} us an element (one batch repeated, no Python "
            f"per element): no tf.data.Dataset iterated in Python passes "
            f"{per_batch / (per_batch + tfdata):.2f} of the bare loader here"
        )
    wait = gpu_wait(s, args.step_ms)
    print("GPU input wait: " + (json.dumps(wait) if wait else "no CUDA device here: not measured"))
    if args.json:
        _common.write_json(args.json, {"rows": rows, "gpu": wait, "codec": args.codec,
                                       "tfdata_s_per_element": tfdata})  # fmt: skip
    _common.print_data_kept(args.data_dir)
    return 0


if __name__ == "__main__":
    _common.run_main(main)
