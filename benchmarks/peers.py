"""Benchmark: snap against its peers, on the same records, in the same run.

One dataset (the replay benchmark's image-like records: ``image`` uint8 [3, 64, 64], a smooth
pattern plus noise, and an int64 ``label``; ``--size-gb`` of them, 1 GB by default) is
materialised by each system, then replayed with a shuffle in batches of 256 the way each
system's documentation recommends:

  * snap: ``snap create`` (zstd 1, 2 workers), ``snap.open(p).loader(256, shuffle=True)``;
    also its 2nd epoch (one loader, the 1st epoch untimed): what every later epoch costs;
  * tf.data: ``Dataset.save`` (no compression), ``Dataset.load(p).shuffle(10_000)
    .batch(256).prefetch(AUTOTUNE)``;
  * Hugging Face datasets: ``Dataset.from_generator`` (its Arrow cache), ``with_format("numpy")
    .shuffle(seed).iter(batch_size=256)``;
  * LitData: ``optimize`` (2 workers, 64 MB chunks), ``StreamingDataLoader(StreamingDataset(p,
    shuffle=True), batch_size=256, num_workers=2)``;
  * per-record ``.npy`` files read by a torch ``DataLoader(shuffle=True, batch_size=256,
    num_workers=2)`` (the common do-it-yourself baseline);
  * the machine's limits: the snap shards read from the page cache, and decoded by pyarrow
    alone in 2 threads without a shuffle.

Each replay is one epoch in a fresh process (every system's imports and thread pools stay
out of the others' way; the page cache is warm, as after a first epoch), the systems alternate
within each repeat and the table reports medians: records/s, MB/s of delivered image+label
bytes (records x 12,296 bytes for every system), peak RSS (the process plus its largest
worker), bytes on disk, time to materialise, and snap's ratio to each. ``--plot`` writes a
bar chart (matplotlib). This is a report, not a test.

    python benchmarks/peers.py                      # ~10 minutes the first time (materialises)
    python benchmarks/peers.py --size-gb 0.2 --repeats 1    # a quick look
    python benchmarks/peers.py --plot docs/peers.png --json peers.json
    python benchmarks/peers.py --variant tokens --size-gb 0.05  # ragged token sequences
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import argparse
import functools
import importlib
import importlib.util
import json
import platform
import resource
import shutil
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # the records and the pyarrow/page-cache baselines
import peers_tokens  # the token-sequence variant

import snapshot_cli as snap

BATCH = 256
SYSTEMS = ["snap", "tf.data", "hf datasets", "litdata", "npy + DataLoader"]
SNAP2 = "snap (2nd epoch)"  # what every later epoch of a training run costs
VARIANT_ENV = "SNAP_PEERS_VARIANT"
TOKENS = os.environ.get(VARIANT_ENV) == "tokens"


def record_bytes() -> int:
    return peers_tokens.TOKEN_BYTES if TOKENS else _common.ROW_BYTES


LIMITS = ["page-cache read", "pyarrow alone (no shuffle)"]
TARGETS = {"tf.data": 1.5, "hf datasets": 3.0, "litdata": 2.0, "npy + DataLoader": 3.0}


# --- the records --------------------------------------------------------------------------


chunks = _common.image_chunks
# HF datasets hashes the generator with dill, which pickles a function of __main__ by value
# and everything it reaches: the generator lives in an importable module instead.
records_of = _common.image_records


def litdata_chunk(item: list[int]) -> Iterator[dict[str, Any]]:
    """LitData's ``optimize`` function: one input chunk → its records."""
    batch = next(_common.make_records(item, _common.SEED, False, _common.DATA_VERSION))
    for image, label in zip(batch["image"], batch["label"], strict=True):
        yield {"image": image, "label": int(label)}


def du(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


# --- materialise (once, cached in --data-dir) --------------------------------------------


def materialise(system: str, root: str, n: int) -> dict[str, Any]:
    path = os.path.join(root, system.replace(" ", "-").replace("+", "").replace(".", ""))
    done = path + ".done.json"
    if os.path.exists(done):
        with open(done) as f:
            return json.load(f)  # type: ignore[no-any-return]
    shutil.rmtree(path, ignore_errors=True)
    t0 = time.perf_counter()
    if TOKENS:
        peers_tokens.materialise(system, path, n)
        shutil.rmtree(path + "-cache", ignore_errors=True)
    elif system == "snap":
        snap.create(_common.make_records, path,
                    inputs_from=functools.partial(_common.chunk_items, n),
                    params={"seed": _common.SEED, "tokens": False,
                            "version": _common.DATA_VERSION},
                    workers=2, shard_size="128MiB")  # fmt: skip
    elif system == "tf.data":
        import tensorflow as tf

        spec = {"image": tf.TensorSpec((3, 64, 64), tf.uint8), "label": tf.TensorSpec((), tf.int64)}
        ds = tf.data.Dataset.from_generator(lambda: records_of(n), output_signature=spec)
        ds.save(path)
    elif system == "hf datasets":
        import datasets

        features = datasets.Features(
            {"image": datasets.Array3D((3, 64, 64), "uint8"), "label": datasets.Value("int64")}
        )
        ds = datasets.Dataset.from_generator(
            records_of, gen_kwargs={"n": n}, features=features, cache_dir=path + "-cache"
        )
        ds.save_to_disk(path)
        shutil.rmtree(path + "-cache", ignore_errors=True)
    elif system == "litdata":
        import litdata

        litdata.optimize(fn=litdata_chunk, inputs=_common.chunk_items(n), output_dir=path,
                         chunk_bytes="64MB", num_workers=2)  # fmt: skip
    elif system == "npy + DataLoader":
        os.makedirs(path)
        i = 0
        for images, labels in chunks(n):
            for image, label in zip(images, labels, strict=True):
                np.save(os.path.join(path, f"{i:07d}-{label}.npy"), image)
                i += 1
    info = {"path": path, "seconds": time.perf_counter() - t0, "bytes": du(path)}
    with open(done, "w") as f:
        json.dump(info, f)
    return info


# --- replay one epoch (in a child process) -----------------------------------------------


def epoch(system: str, path: str, snap_path: str) -> tuple[int, int]:
    """Replay one shuffled epoch; returns (records, bytes of image+label delivered)."""
    records = nbytes = 0
    if system == "snap":
        for b in snap.open(path).loader(BATCH, shuffle=True, seed=0):
            records += len(b["label"])
            nbytes += b["image"].nbytes + b["label"].nbytes
    elif system == "tf.data":
        import tensorflow as tf

        ds = tf.data.Dataset.load(path).shuffle(10_000, seed=0).batch(BATCH)
        for b in ds.prefetch(tf.data.AUTOTUNE):
            records += int(b["label"].shape[0])
            nbytes += int(b["image"].shape.num_elements()) + 8 * int(b["label"].shape[0])
    elif system == "hf datasets":
        import datasets

        ds = datasets.load_from_disk(path).with_format("numpy").shuffle(seed=0)
        for b in ds.iter(batch_size=BATCH):
            records += len(b["label"])
            nbytes += b["image"].nbytes + b["label"].nbytes
    elif system == "litdata":
        import litdata

        ds = litdata.StreamingDataset(path, shuffle=True, seed=0)
        for b in litdata.StreamingDataLoader(ds, batch_size=BATCH, num_workers=2):
            records += len(b["label"])
            nbytes += b["image"].numel() + 8 * len(b["label"])
    elif system == "npy + DataLoader":
        import torch

        files = peers_tokens.NpyPerRecord(path)
        dl = torch.utils.data.DataLoader(files, batch_size=BATCH, shuffle=True, num_workers=2)
        for image, label in dl:
            records += len(label)
            nbytes += image.numel() + 8 * len(label)
    elif system == "page-cache read":
        nbytes, _ = _common.raw_read(_common.shard_paths(snap.open(snap_path)))
        records = snap.open(snap_path).num_records
    elif system == "pyarrow alone (no shuffle)":
        nbytes, records = _common.pyarrow_alone(_common.shard_paths(snap.open(snap_path)), False)
    return records, nbytes


def peak_rss_mib() -> float:
    """This process's peak RSS (VmHWM: ru_maxrss would include the parent's at fork) plus
    its largest worker process's (DataLoader workers; an upper bound: they share pages)."""
    hwm = _common.proc_status_kib(("VmHWM",))["VmHWM"]
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB, the largest child
    return (hwm + kids) / 1024


# The libraries each system's epoch imports: imported before its clock starts (an epoch times
# reading; TensorFlow's import alone took 3.7 s); snap's are its loader's modules.
FRAMEWORKS = {
    "snap": list(_common.LOADER_MODULES),
    "tf.data": ["tensorflow"],
    "hf datasets": ["datasets"],
    "litdata": ["litdata", "torch"],
    "npy + DataLoader": ["torch"],
}


def child(system: str, path: str, snap_path: str) -> None:
    for name in FRAMEWORKS.get(system, []):
        importlib.import_module(name)
    _common.raw_read(_common.shard_paths(snap.open(snap_path)))  # everyone: a warm cache
    if os.path.isdir(path) and system not in LIMITS:  # warm the system's own files too
        _common.raw_read(os.path.join(d, f) for d, _, files in os.walk(path) for f in files)
    if system == SNAP2:  # one untimed epoch (checksums, window memory), then the timed one
        loader = snap.open(path).loader(BATCH, shuffle=True, seed=0)
        for _ in loader:
            pass
        t0 = time.perf_counter()
        records = sum(len(b["label"]) for b in loader)
        nbytes = records * record_bytes()
    elif TOKENS and system not in LIMITS:
        t0 = time.perf_counter()
        records = peers_tokens.epoch(system, path)
        nbytes = records * peers_tokens.TOKEN_BYTES
    else:
        t0 = time.perf_counter()
        records, nbytes = epoch(system, path, snap_path)
    seconds = time.perf_counter() - t0
    print(json.dumps({"records": records, "bytes": nbytes, "seconds": seconds,
                      "rss_mib": peak_rss_mib()}))  # fmt: skip


# --- driver -------------------------------------------------------------------------------


def run_child(system: str, path: str, snap_path: str) -> dict[str, Any]:
    cmd = [os.path.abspath(__file__), "--child", system, path, snap_path]
    return _common.run_child(cmd, system, timeout=3600)  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> int:
    p = _common.parser(__doc__)
    p.add_argument("--size-gb", type=float, default=1.0)
    p.add_argument("--repeats", type=int, default=3)
    _common.add_data_dir_option(p, _common.out_dir("peers-data"))
    p.add_argument(
        "--systems",
        default=",".join([*SYSTEMS, SNAP2, *LIMITS]),
        help="comma-separated subset of: " + ", ".join([*SYSTEMS, SNAP2, *LIMITS]),
    )
    _common.add_json_option(p)
    p.add_argument("--plot", default=None, help="write a PNG bar chart here")
    p.add_argument("--child", nargs=3, default=None, help=argparse.SUPPRESS)
    p.add_argument(
        "--variant",
        choices=["images", "tokens"],
        default=os.environ.get(VARIANT_ENV, "images"),
        help="images: 3x64x64 uint8 + label; tokens: ragged int32 ids + label",
    )
    args = p.parse_args(argv)
    os.environ[VARIANT_ENV] = args.variant  # the children replay the same variant
    global TOKENS
    TOKENS = args.variant == "tokens"
    if args.child:
        child(*args.child)
        return 0
    systems = [s for s in args.systems.split(",") if s]
    known = [*SYSTEMS, SNAP2, *LIMITS]
    if unknown := [s for s in systems if s not in known]:
        p.error(f"--systems: unknown {', '.join(map(repr, unknown))}; choose from "
                f"{', '.join(map(repr, known))}")  # fmt: skip
    needed = {m for s in systems for m in FRAMEWORKS.get(s, [])} | (
        {"matplotlib"} if args.plot else set()
    )
    if missing := sorted(m for m in needed if importlib.util.find_spec(m) is None):
        p.error(
            f"{', '.join(missing)} not installed: `make bench` installs every peer "
            "(or leave out the systems that need them with --systems, and --plot)"
        )
    if TOKENS and (left := [s for s in systems if s in LIMITS]):
        # the limits' readers know the image columns only: said, not dropped silently
        print(f"--variant tokens: leaving out {', '.join(left)} (image columns only)",
              file=sys.stderr)  # fmt: skip
        systems = [s for s in systems if s not in LIMITS]
    n = max(1, round(args.size_gb * _common.GB / record_bytes()))
    root = os.path.join(args.data_dir, f"{args.size_gb:g}GB" + ("-tokens" if TOKENS else ""))
    os.makedirs(root, exist_ok=True)
    env = (f"{_common.usable_cores()} cores, python {platform.python_version()}, "
           f"snap {snap.__version__}; {n} records, {args.size_gb:g} GB")  # fmt: skip
    print(env, file=sys.stderr)
    made = {}
    for system in ["snap", *[s for s in systems if s in SYSTEMS and s != "snap"]]:
        print(f"materialising {system} ...", file=sys.stderr, flush=True)
        made[system] = materialise(system, root, n)
        print(f"  {made[system]['seconds']:.1f} s, {made[system]['bytes'] / 1e9:.2f} GB",
              file=sys.stderr, flush=True)  # fmt: skip
    snap_path = made["snap"]["path"]
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
    for r in range(args.repeats):
        for system in _common.rotated(systems, r):
            path = made[system]["path"] if system in made else snap_path  # SNAP2, limits
            out = run_child(system, path, snap_path)
            runs[system].append(out)
            print(f"  repeat {r + 1}/{args.repeats} {system:28s} "
                  f"{out['records'] / out['seconds']:10.0f} rec/s  {out['rss_mib']:7.0f} MiB",
                  file=sys.stderr, flush=True)  # fmt: skip
    rows = []
    for system in systems:
        rs = runs[system]
        system_made = made.get(system if system != SNAP2 else "snap")
        rate = statistics.median(x["records"] / x["seconds"] for x in rs)
        mbps = rate * record_bytes() / 1e6  # the same record bytes for every system
        rows.append({"system": system, "records_per_s": rate, "mb_per_s": mbps,
                     "rss_mib": max(x["rss_mib"] for x in rs),
                     "disk_gb": system_made["bytes"] / 1e9 if system_made else None,
                     "materialise_s": system_made["seconds"] if system_made else None,
                     "records": rs[0]["records"]})  # fmt: skip
    snap_rate = next(r["records_per_s"] for r in rows if r["system"] == "snap")
    snap2_rate = next((r["records_per_s"] for r in rows if r["system"] == SNAP2), None)
    print(f"\npeers benchmark: {env}; shuffle, batch {BATCH}, one epoch per fresh process, "
          f"page cache warm, median of {args.repeats}")  # fmt: skip
    print(f"{'system':28s} {'records/s':>10s} {'MB/s':>7s} {'peak RSS':>9s} {'on disk':>8s} "
          f"{'make s':>7s} {'snap/x':>7s}  target")  # fmt: skip
    for r in rows:
        ratio = snap_rate / r["records_per_s"]
        target = TARGETS.get(r["system"])
        if r["system"] == "pyarrow alone (no shuffle)":
            ratio_text, verdict = f"{ratio:6.2f}x", _common.verdict(ratio >= 0.8)
            target_text = f"snap >= 0.80x of it: {verdict}"
            if snap2_rate:
                ratio2 = snap2_rate / r["records_per_s"]
                verdict2 = _common.verdict(ratio2 >= 0.8)
                target_text += f"; 2nd epoch {ratio2:.2f}x: {verdict2}"
        else:
            ratio_text = f"{ratio:6.2f}x"
            target_text = f">= {target}x: {_common.verdict(ratio >= target)}" if target else ""
        disk = f"{r['disk_gb']:.2f} GB" if r["disk_gb"] is not None else ""
        make = f"{r['materialise_s']:.1f}" if r["materialise_s"] is not None else ""
        rss = f"{r['rss_mib']:6.0f} MiB"
        print(f"{r['system']:28s} {r['records_per_s']:10.0f} {r['mb_per_s']:7.0f} {rss} "
              f"{disk:>8s} {make:>7s} {ratio_text}  {target_text}")  # fmt: skip
    print("(snap/x: snap's records/s over the row's; for the limits, snap's fraction of them)")
    if args.json:
        _common.write_json(args.json, {"environment": env, "rows": rows, "runs": runs})
    if args.plot:
        plot(rows, env, args.plot)
    _common.print_data_kept(args.data_dir)
    return 0


def plot(rows: list[dict[str, Any]], env: str, out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in rows if r["system"] != "page-cache read"]  # 20x off the scale
    names = [r["system"] for r in rows]
    rates = [r["records_per_s"] / 1000 for r in rows]
    colors = [
        "#d62728" if n.startswith("snap") else "#7f7f7f" if n in LIMITS else "#1f77b4"
        for n in names
    ]
    fig, ax = plt.subplots(figsize=(8, 3.6))
    ax.barh(names[::-1], rates[::-1], color=colors[::-1])
    for y, v in enumerate(rates[::-1]):
        ax.text(v, y, f" {v:.0f}k", va="center", fontsize=8)
    ax.set_xlabel("thousand records/s (shuffled epoch, batch 256; limits without shuffle)")
    ax.set_title(f"replay speed, {env}", fontsize=9)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    _common.run_main(main)
