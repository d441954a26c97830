"""A hyperparameter sweep, with and without a snapshot: where snap pays for itself.

    python examples/sweep/sweep.py [--out DIR] [--trials 8] [--images 4000] [--epochs 3]
                                   [--parallel N] [--workers N] [--reuse] [--json FILE]

A sweep trains the same model many times (here: one learning rate and one seed per trial)
on the same preprocessed data. Without a snapshot every trial decodes, cleans and resizes
every JPEG again in every epoch; with one the preprocessing runs once and every trial
replays its output, each with its own shuffle. This script times both on one machine:

1. ``make_inputs``: ``--images`` synthetic 256x256 JPEGs of 10 classes (coloured shapes on
   noise) under ``DIR/inputs``, generated deterministically and kept for later runs.
2. Mode **snap**: ``snap.create("examples/sweep/pipeline.py:preprocess", DIR/snapshot,
   inputs=..., workers=N)`` materialises the preprocessed 3x64x64 uint8 images (about 3 ms
   of Pillow work each: see pipeline.py), then the trials train from
   ``snap.open(...).loader(batch_size=128, shuffle=True, seed=trial_seed)``. The snapshot is
   deleted first so its making is timed too (``--reuse`` keeps it: a later sweep over the
   same data then costs only its trials).
3. Mode **recompute**: the same trials, each preprocessing every JPEG in every epoch in its
   own process, through a ``torch`` ``Dataset`` and ``DataLoader`` as a sweep without a
   snapshot would (see trials.py).
4. A table: each mode's wall time, the speedup (recompute / snap; the project's target is
   >= 5x), each trial's learning rate, seed and final-epoch training accuracy in both modes,
   and how many trials saw distinct shuffles. ``--json FILE`` writes all of it.

Trials run as spawned processes (one thread each: ``OMP_NUM_THREADS=1``,
``torch.set_num_threads(1)``), ``--parallel`` at a time (default: one per core), and a
process runs trial after trial, so torch is imported once per process, not once per trial.
One per core finishes first: the work is CPU-bound, so running all 8 at once on 2 cores
adds no CPU, only 8 torch start-ups at once, context switches and cache thrashing. Measured
on 2 cores: the 8 snap trials took 8.2 s two at a time and 18.9 s all at once; 8 recompute
trials of one epoch over 1,000 images took 13 s two at a time and 35 s all at once.

The speedup follows Amdahl's law: per epoch, recompute costs preprocessing + training and
snap costs reading + training. The model here is tiny (~0.4 s per epoch on one core against
~12 s of preprocessing), so the preprocessing dominates; a model whose step costs more than
the preprocessing would gain less; more epochs or more trials gain more. The defaults (4,000
images, 8 trials x 3 epochs) take about 2-3 minutes on 2 cores, nearly all of it in mode
recompute. No network, no downloads.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import TYPE_CHECKING, Any

from make_inputs import make_inputs
from pipeline import SIZE

import snapshot_cli as snap

if TYPE_CHECKING:  # imported in main(): snap.create's spawned workers re-run this module's
    from trials import TrialConfig, TrialResult  # top level, and need no torch

HERE = Path(__file__).resolve().parent
PIPELINE = f"{HERE / 'pipeline.py'}:preprocess"
MODES = ("snap", "recompute")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    cpus = os.cpu_count() or 1
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--out", default="demo-output/sweep", help="inputs and snapshot go here")
    p.add_argument("--trials", type=int, default=8)
    p.add_argument("--images", type=int, default=4000)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--parallel", type=int, default=cpus, help="trials at a time (default: CPUs)")
    p.add_argument("--workers", type=int, default=cpus, help="snap.create worker processes")
    p.add_argument("--reuse", action="store_true", help="keep a snapshot from an earlier run")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = p.parse_args(argv)
    if min(args.trials, args.images, args.epochs, args.batch_size, args.parallel) < 1:
        p.error("--trials, --images, --epochs, --batch-size and --parallel must be >= 1")
    return args


def learning_rates(trials: int) -> list[float]:
    """Log-spaced from 0.003 to 0.3 (SGD with momentum 0.9)."""
    if trials == 1:
        return [0.03]
    return [float(f"{0.003 * 100 ** (i / (trials - 1)):.3g}") for i in range(trials)]


def run_trials(configs: list[TrialConfig], parallel: int) -> tuple[list[TrialResult], float]:
    """Run every trial in spawned processes, ``parallel`` at a time; results and wall time."""
    from trials import run_trial

    started = time.perf_counter()
    results: list[TrialResult] = []
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(min(parallel, len(configs)), mp_context=ctx) as pool:
        futures = [pool.submit(run_trial, cfg) for cfg in configs]
        for future in as_completed(futures):
            r = future.result()
            results.append(r)
            print(f"  [{r.mode}] trial {r.trial} (lr {r.lr:g}, seed {r.seed}): "
                  f"accuracy {r.accuracy:.3f} in {r.seconds:.1f} s",
                  file=sys.stderr, flush=True)  # fmt: skip
    return sorted(results, key=lambda r: r.trial), time.perf_counter() - started


def materialise(out: Path, inputs: list[str], workers: int, reuse: bool) -> dict[str, Any]:
    """Create the snapshot (from scratch unless ``reuse``); what it took."""
    path = out / "snapshot"
    if not reuse and path.exists():
        shutil.rmtree(path)
    started = time.perf_counter()
    progress = sys.stderr.isatty()
    try:  # an existing snapshot of the same pipeline, params and inputs is reused as it is
        info = snap.create(PIPELINE, path, inputs=inputs, workers=workers, progress=progress)
    except snap.SnapshotExistsError as e:  # made from other inputs (another --images)
        print(f"  {e}: replacing it", file=sys.stderr, flush=True)
        info = snap.create(
            PIPELINE, path, inputs=inputs, workers=workers, progress=progress, overwrite=True
        )
    seconds = time.perf_counter() - started
    s = snap.open(path)
    return {
        "path": str(path), "seconds": seconds, "reused": info.reused,
        "num_records": s.num_records, "num_shards": len(s.shards), "bytes": info.bytes,
    }  # fmt: skip


def distinct(results: list[TrialResult]) -> int:
    return len({r.order_hash for r in results})


def report(args: argparse.Namespace, res: dict[str, Any]) -> str:
    """The table printed at the end."""
    snap_m, rec_m = res["modes"]["snap"], res["modes"]["recompute"]
    made = snap_m["snapshot"]
    n, trials = args.images, args.trials
    lines = [
        f"sweep: {n} JPEGs (256x256 -> 3x{SIZE}x{SIZE} uint8), {trials} trials x "
        f"{args.epochs} epoch{'s' * (args.epochs != 1)}, batch {args.batch_size}, "
        f"{args.parallel} trials at a time on {os.cpu_count()} CPUs",
        "",
        f"{'mode':<10} {'materialise':>12} {'trials':>9} {'total':>9}",
        f"{'snap':<10} {made['seconds']:>10.1f} s {snap_m['trials_seconds']:>7.1f} s "
        f"{snap_m['seconds']:>7.1f} s   ({made['num_records']} records, {made['num_shards']} "
        f"shards, {made['bytes'] / 1e6:.1f} MB{', reused' if made['reused'] else ''})",
        f"{'recompute':<10} {'-':>12} {rec_m['trials_seconds']:>7.1f} s {rec_m['seconds']:>7.1f} s",
        f"speedup: {res['speedup']:.1f}x (recompute / snap; the target is >= 5x)",
        "",
        f"{'trial':>5} {'lr':>7} {'seed':>4} {'acc snap':>9} {'acc recompute':>14}  "
        f"{'first-epoch order':<17}  first labels (snap)",
    ]
    for s, r in zip(snap_m["trials"], rec_m["trials"], strict=True):
        labels = " ".join(str(label) for label in s["first_labels"][:12])
        lines.append(
            f"{s['trial']:>5} {s['lr']:>7g} {s['seed']:>4} {s['accuracy']:>9.3f} "
            f"{r['accuracy']:>14.3f}  {s['order_hash']:<17}  {labels} ..."
        )
    complete = all(t["complete_epochs"] for m in (snap_m, rec_m) for t in m["trials"])
    lines += [
        "",
        f"distinct shuffles: {snap_m['distinct_shuffles']} of {trials} "
        f"(recompute: {rec_m['distinct_shuffles']} of {trials})",
        f"every epoch of every trial held each of the {n} images exactly once: "
        f"{'yes' if complete else 'NO'}",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    os.environ["OMP_NUM_THREADS"] = "1"  # inherited by the trial processes: set before torch
    from trials import TrialConfig

    args = parse_args(argv)
    out = Path(args.out).resolve()
    started = time.perf_counter()
    inputs = make_inputs(str(out / "inputs"), args.images, args.workers)
    inputs_seconds = time.perf_counter() - started
    print(f"inputs: {len(inputs)} JPEGs in {out / 'inputs'} ({inputs_seconds:.1f} s)",
          file=sys.stderr, flush=True)  # fmt: skip

    def configs(mode: str) -> list[TrialConfig]:
        return [
            TrialConfig(
                trial=i,
                mode=mode,
                lr=lr,
                seed=i,
                epochs=args.epochs,
                batch_size=args.batch_size,
                snapshot=str(out / "snapshot"),
                inputs=tuple(inputs),
            )
            for i, lr in enumerate(learning_rates(args.trials))
        ]

    modes: dict[str, dict[str, Any]] = {}
    for mode in MODES:
        print(f"mode {mode}:", file=sys.stderr, flush=True)
        made = materialise(out, inputs, args.workers, args.reuse) if mode == "snap" else None
        results, seconds = run_trials(configs(mode), args.parallel)
        modes[mode] = {
            "snapshot": made,
            "trials_seconds": seconds,
            "seconds": seconds + (made["seconds"] if made else 0.0),
            "distinct_shuffles": distinct(results),
            "trials": [r.to_dict() for r in results],
        }
    res = {
        "config": {k: v for k, v in vars(args).items() if k != "json"}
        | {"out": str(out), "cpus": os.cpu_count(), "inputs_seconds": inputs_seconds},
        "modes": modes,
        "speedup": modes["recompute"]["seconds"] / modes["snap"]["seconds"],
    }
    print(report(args, res), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n")
    return res


if __name__ == "__main__":
    main()
