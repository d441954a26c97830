"""Benchmark: what the framework adapters add on top of the bare loader.

Replays the replay benchmark's 2 GB snapshot of image-like records (3x64x64 uint8 + label,
batches of 256 = 3 MiB; ``--codec`` lz4 by default, the fastest compressed replay, so any
per-batch overhead shows) and times the second epoch of:

  * the bare loader (numpy batches): the baseline;
  * ``loader.to_torch()``: tensors sharing the numpy memory (CPU, no device copy);
  * ``loader.to_jax(prefetch=2)``: ``jax.device_put`` ahead of use onto the CPU device;
  * ``loader.to_tf()``: ``tf.data.Dataset.from_generator`` with the output signature.

Each consumer touches one byte of every batch (so lazy conversions are paid for), each run
is a fresh process (an imported framework's thread pools would slow whatever runs after
it), the configurations alternate within each repeat, and the table reports medians and the ratio
of each adapter's rate to the bare loader's (target: overhead < 5 % for batches >= 1 MiB).
On a machine with a CUDA GPU, ``to_torch(device="cuda")`` is added with a simulated step
(``--step-ms``) and the table reports the share of step time spent waiting for input.
This is a report, not a test: nothing is asserted.

    python benchmarks/device.py                      # ~3 minutes (reuses replay's snapshot)
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
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # benchmarks/_common.py: the snapshot and its cache

import snapshot_cli as snap

BATCH = 256


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


def _run(make: Callable[[snap.Loader], Iterable[dict[str, Any]]], s: snap.Snapshot) -> float:
    """GB/s of the second pass of one loader (the first is untimed: verify, allocations)."""
    loader = s.loader(BATCH, shuffle=True, seed=0, epochs=1)
    adapted = make(loader)
    for _ in adapted:
        pass
    t0 = time.perf_counter()
    nbytes = 0
    for batch in adapted:
        nbytes += _touch(batch["image"]) + _touch(batch["label"])
    seconds = time.perf_counter() - t0
    loader.close()
    return nbytes / seconds / 1e9


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


def _child_run(name: str, args: argparse.Namespace) -> float:
    """One configuration in a fresh process: a framework's thread pools (TensorFlow's,
    XLA's) keep running once imported and would slow every later configuration."""
    cmd = [__file__, "--child", name, "--codec", args.codec,
           "--size-gb", str(args.size_gb), "--data-dir", args.data_dir]  # fmt: skip
    return float(_common.run_child(cmd, name)["gb_per_s"])


def main(argv: list[str] | None = None) -> int:
    p = _common.parser(__doc__)
    p.add_argument("--codec", default="lz4", choices=["zstd", "lz4", "none"])
    p.add_argument("--size-gb", type=float, default=2.0)
    p.add_argument("--data-dir", default=_common.SHARED_DATA_DIR)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--step-ms", type=float, default=20.0)
    _common.add_json_option(p)
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    s = _common.ensure_snapshot(args.data_dir, args.codec, args.size_gb, False, 2)
    cfgs = configs(args.step_ms)
    if args.child:
        print(json.dumps({"gb_per_s": _run(cfgs[args.child], s)}))
        return 0
    mib = BATCH * _common.ROW_BYTES / 2**20
    print(f"{os.cpu_count()} cores, python {platform.python_version()}; {args.codec} "
          f"{args.size_gb:g} GB, batch {BATCH} ({mib:.1f} MiB)")  # fmt: skip
    runs: dict[str, list[float]] = {name: [] for name in cfgs}
    names = list(cfgs)
    for r in range(args.repeats):
        for name in _common.rotated(names, r):
            _common.raw_read(_common.shard_paths(s))  # page cache warm: measure memory
            rate = _child_run(name, args)
            runs[name].append(rate)
            print(f"  repeat {r + 1}/{args.repeats} {name:28s} {rate:6.2f} GB/s", flush=True)
    base = statistics.median(runs["bare loader (numpy)"])
    rows = []
    print(f"\n{'configuration':28s} {'GB/s':>6s} {'x bare':>7s}  overhead  target     runs")
    for name in names:
        med = statistics.median(runs[name])
        ratio = med / base
        verdict = "" if name.startswith("bare") else _common.verdict(ratio >= 0.95)
        print(f"{name:28s} {med:6.2f} {ratio:7.3f}  {100 * (1 - ratio):6.1f} %  "
              f"{'< 5 %' if verdict else '':6s} {verdict:6s} "
              + _common.runs_text(runs[name]))  # fmt: skip
        rows.append({"config": name, "gb_per_s": med, "ratio": ratio, "runs": runs[name]})
    wait = gpu_wait(s, args.step_ms)
    print("GPU input wait: " + (json.dumps(wait) if wait else "no CUDA device here: not measured"))
    if args.json:
        _common.write_json(args.json, {"rows": rows, "gpu": wait, "codec": args.codec})
    return 0


if __name__ == "__main__":
    sys.exit(main())
