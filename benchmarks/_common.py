"""What the benchmarks share: the records and their cached snapshots, page-cache reads, the
pyarrow baseline, timing, alternating repeats, the environment, child processes, options.

Importing this module pins native thread pools to one thread, so import it before numpy (as
``_common``, with ``benchmarks/`` on sys.path). snap's workers import it by path for its records.
"""

from __future__ import annotations

# Before numpy is imported (here or by snap): an OpenBLAS/OpenMP numpy may start one thread per
# core in every process, so a plain loop or workers=1 would use more than one core and workers=2
# oversubscribe the machine; the loader and the baselines choose their own threads, where a BLAS
# pool only adds noise. Worker processes inherit this environment.
import os

os.environ["OMP_NUM_THREADS"] = "1"
os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ["MKL_NUM_THREADS"] = "1"

import argparse
import contextlib
import functools
import importlib
import json
import platform
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa

import snapshot_cli as snap

T = TypeVar("T")

HERE = os.path.dirname(os.path.abspath(__file__))
GB = 1e9
COLD_GBPS = 3.0  # a re-warming read slower than this found the page cache partly cold
QUICK_NOTE = "(--quick: a smoke run; start-up costs weigh more, so take the targets lightly)"


def out_dir(name: str) -> str:
    """``benchmarks/out/<name>``: where a benchmark caches what it writes (git ignores it)."""
    return os.path.join(HERE, "out", name)


# --- the records (also imported by snap's worker processes, by file path) -------------------

# Bump DATA_VERSION whenever make_records changes what it writes: a cached snapshot is reused
# when its pipeline params (which include it) match.
DATA_VERSION = 1
SEED = 1234
IMAGE_SHAPE = (3, 64, 64)
ROW_BYTES = int(np.prod(IMAGE_SHAPE)) + 8  # image + label
CHUNK_ROWS = 1024  # records per call of make_records (one input)
SHARD_TARGET = 128 << 20  # inputs per task are chosen so that a task writes ~one such shard
MIN_SHARDS = 8
SHARED_DATA_DIR = out_dir("replay-data")  # the snapshots replay.py and device.py share


def make_records(item: list[int], seed: int, tokens: bool, version: int) -> Iterator[snap.Batch]:
    """Input ``[index, rows]`` → one batch of ``rows`` deterministic image-like records.

    image: 128 + 60 sin(plane wave) per channel, + uniform noise in [0, 16), with the top 4
    rows flat (a letterbox band): ~1.2x with zstd level 1, ~1.06x with lz4, like noisy
    uint8 photographs. label: int64 in [0, 1000). tokens (optional): ragged
    int32, 16-256 Zipf-distributed ids per record.
    """
    del version  # part of the params only, so that changing the data changes the fingerprint
    index, rows = item
    rng = np.random.default_rng([seed, index])
    y, x = np.mgrid[0:64, 0:64].astype(np.float32) / np.float32(64)
    images = np.empty((rows, *IMAGE_SHAPE), dtype=np.uint8)
    for a in range(0, rows, 256):  # bounded float temporaries
        n = min(256, rows - a)
        f = rng.uniform(0.5, 3.0, size=(n, 3, 2)).astype(np.float32)
        phase = rng.uniform(0, 2 * np.pi, size=(n, 3, 1, 1)).astype(np.float32)
        wave = f[..., 0, None, None] * x + f[..., 1, None, None] * y
        base = 128 + 60 * np.sin(np.float32(2 * np.pi) * wave + phase)
        part = base.astype(np.uint8)
        part += rng.integers(0, 16, size=part.shape, dtype=np.uint8)
        part[:, :, :4, :] = 16
        images[a : a + n] = part
    columns: dict[str, Any] = {
        "image": images,
        "label": rng.integers(0, 1000, size=rows, dtype=np.int64),
    }
    if tokens:
        lengths = rng.integers(16, 257, size=rows)
        ids = np.minimum(rng.zipf(1.3, size=int(lengths.sum())), 32000).astype(np.int32)
        columns["tokens"] = np.split(ids, np.cumsum(lengths)[:-1])
    yield snap.Batch(**columns)


def image_chunks(records: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(images, labels) of ``records`` image-like records in chunks, the same bytes for every
    system (benchmarks/peers.py)."""
    for index, rows in chunk_items(records):
        batch = next(make_records([index, rows], SEED, False, DATA_VERSION))
        yield batch["image"], batch["label"]


def image_records(n: int) -> Iterator[dict[str, Any]]:
    """The same records one dict at a time, as the peers' generators take them."""
    for images, labels in image_chunks(n):
        for image, label in zip(images, labels, strict=True):
            yield {"image": image, "label": int(label)}


def chunk_items(records: int) -> list[list[int]]:
    """The inputs: ``[index, rows]`` per chunk of CHUNK_ROWS records."""
    return [[i, min(CHUNK_ROWS, records - a)] for i, a in enumerate(range(0, records, CHUNK_ROWS))]


@snap.ragged("tokens")
def make_token_records(
    item: list[int], seed: int, tokens: bool, version: int
) -> Iterator[snap.Batch]:
    """:func:`make_records` with its ragged tokens column declared: a declared column the
    function does not yield has snap warn of a misspelt name (once a create)."""
    yield from make_records(item, seed, tokens, version)


def pipeline_of(tokens: bool) -> Callable[..., Iterator[snap.Batch]]:
    return make_token_records if tokens else make_records


# --- the cached snapshot of the records -----------------------------------------------------


def snapshot_path(
    data_dir: str, codec: str, size_gb: float, tokens: bool, shard_size: int = SHARD_TARGET
) -> str:
    """Where :func:`ensure_snapshot` keeps the snapshot of these records."""
    shards = "" if shard_size == SHARD_TARGET else f"-{shard_size >> 20}MiB"
    return os.path.join(data_dir, f"{codec}-{size_gb:g}GB{'-tokens' if tokens else ''}{shards}")


def _matches(m: snap.Manifest, params: dict[str, Any], codec: str, records: int) -> bool:
    return (
        m.pipeline.get("function") == pipeline_of(bool(params["tokens"])).__name__
        and m.pipeline.get("params") == params
        and m.compression.get("codec") == codec
        and (codec != "zstd" or m.compression.get("level") == 1)
        and m.num_records == records
        and all(e.batch_crc32c for e in m.shards)  # format 1 shards are checked whole
    )


def ensure_snapshot(
    data_dir: str,
    codec: str,
    size_gb: float,
    tokens: bool,
    workers: int,
    shard_size: int = SHARD_TARGET,
) -> snap.Snapshot:
    """Open the cached snapshot of these records, writing it first if needed.

    snap.create reuses a snapshot with the same fingerprint; the fingerprint includes the hash
    of this file, so an edit to the benchmarks alone would force a rewrite. A snapshot whose
    records are the same (same params, data version, codec and size) is reused instead.
    """
    path = snapshot_path(data_dir, codec, size_gb, tokens, shard_size)
    records = max(1, round(size_gb * GB / ROW_BYTES))
    items = chunk_items(records)
    chunk_bytes = CHUNK_ROWS * ROW_BYTES
    # Inputs per task so that a task writes about one shard (tasks never share shards).
    per_task = max(1, min(shard_size // chunk_bytes, len(items) // MIN_SHARDS))
    params = {"seed": SEED, "tokens": tokens, "version": DATA_VERSION}
    options: dict[str, Any] = {
        "inputs_from": functools.partial(chunk_items, records),
        "params": params,
        "workers": workers,
        "compression": codec,
        "level": 1 if codec == "zstd" else None,
        "shard_size": shard_size,
        "inputs_per_task": per_task,
    }
    existing = None
    if os.path.exists(os.path.join(path, "manifest.json")):
        try:
            existing = snap.open(path)
        except snap.SnapError:
            existing = None
    if existing is not None and _matches(existing.manifest, params, codec, records):
        return existing
    started = time.perf_counter()
    print(f"writing {path} ({records} records, {codec}) ...", file=sys.stderr, flush=True)
    # By file spec: worker processes import this file by path, however the benchmark that
    # asks was started.
    spec = f"{os.path.abspath(__file__)}:{pipeline_of(tokens).__name__}"
    info = snap.create(spec, path, overwrite=existing is not None, **options)
    print(
        f"  {info.num_shards} shards, {info.bytes / GB:.2f} GB on disk "
        f"(ratio {info.uncompressed_bytes / max(1, info.bytes):.2f}), "
        f"{time.perf_counter() - started:.1f} s",
        file=sys.stderr,
        flush=True,
    )
    return snap.open(path)


def shard_paths(s: snap.Snapshot) -> list[str]:
    """Local paths of a local snapshot's shard files."""
    return [os.path.join(s.root, e.path) for e in s.shards]


# --- the page cache and the pyarrow baseline ------------------------------------------------


def raw_read(paths: Iterable[str]) -> tuple[int, int]:
    """Read every file with plain 1 MiB reads into one reused buffer → (bytes, 0)."""
    buf = memoryview(bytearray(1 << 20))
    total = 0
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while n := f.readinto(buf):
                total += n
    return total, 0


def large_folio_share(path: str) -> float | None:
    """The share of ``path``'s bytes the kernel maps 2 MiB at a time once every page is read
    through a map (None where there is no ``/proc/self/smaps``, or the file is empty). A file
    read back from disk sits in the page cache in large folios on a recent kernel, mapped
    whole; a file just written in pieces of ~1 MiB, as a shard is, sits in small ones, each
    4 KiB mapped by itself. It changes what the later epochs of an uncompressed snapshot
    hold mapped (their RSS), not their speed: see README (Memory)."""
    import mmap

    if not os.path.exists("/proc/self/smaps") or os.path.getsize(path) == 0:
        return None
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    try:
        pages = np.frombuffer(m, np.uint8)
        int(pages[::4096].sum())  # map every page
        del pages
        real = os.path.realpath(path)
        rss = pmd = 0
        with open("/proc/self/smaps") as smaps:
            mine = False
            for line in smaps:
                if "-" in line.split(" ", 1)[0]:  # a mapping's first line: its range, its file
                    mine = line.rstrip("\n").endswith(real)
                elif mine and line.startswith(("Rss:", "FilePmdMapped:")):
                    kib = int(line.split()[1])
                    rss, pmd = (rss + kib, pmd) if line[0] == "R" else (rss, pmd + kib)
        return pmd / rss if rss else None
    finally:
        m.close()


def rewarm(paths: Iterable[str]) -> float:
    """Read every file again right before a run → the GB/s of that read (the OS evicts file
    pages idle for a while, ~30 s on this VM; below COLD_GBPS the cache was partly cold)."""
    started = time.perf_counter()
    nbytes, _ = raw_read(paths)
    return rate_gbps(nbytes, time.perf_counter() - started)


def decode_batch(
    batch: pa.RecordBatch, tokens: bool = False, copy: bool = False
) -> tuple[int, int]:
    """One record batch's columns to numpy → (bytes, rows).

    ``copy``: also copy the fixed-width columns once into fresh numpy arrays, the least work a
    loader that hands out its own (writable, reusable-buffer-free) batches must add.
    """
    image = batch.column("image").storage.flatten().to_numpy()
    label = batch.column("label").to_numpy()
    if copy:
        image, label = image.copy(), label.copy()
    nbytes = image.nbytes + label.nbytes
    if tokens:
        nbytes += batch.column("tokens").values.to_numpy().nbytes
    return nbytes, batch.num_rows


def decode_file(
    reader: pa.ipc.RecordBatchFileReader, tokens: bool = False, copy: bool = False
) -> tuple[int, int]:
    """Every record batch of an open Arrow file, decoded by :func:`decode_batch` → (bytes, rows)."""
    nbytes = rows = 0
    for i in range(reader.num_record_batches):
        b, r = decode_batch(reader.get_batch(i), tokens, copy)
        nbytes, rows = nbytes + b, rows + r
    return nbytes, rows


def decode_shard(path: str, tokens: bool, copy: bool = False) -> tuple[int, int]:
    """Every record batch of one local shard file, memory-mapped, decoded → (bytes, rows)."""
    return decode_file(pa.ipc.open_file(pa.memory_map(path, "r")), tokens, copy)


def pyarrow_alone(paths: list[str], tokens: bool, copy: bool = False) -> tuple[int, int]:
    """The machine's limit: every shard decoded by pyarrow, 2 threads, no shuffle."""
    with ThreadPoolExecutor(2) as pool:
        parts = list(pool.map(functools.partial(decode_shard, tokens=tokens, copy=copy), paths))
    return sum(p[0] for p in parts), sum(p[1] for p in parts)


def batch_bytes(batch: dict[str, np.ndarray]) -> int:
    """Bytes of the numpy arrays of one loader batch (ragged columns: of their items)."""
    total = 0
    for v in batch.values():
        if v.dtype == object:  # ragged: an array of arrays
            total += sum(x.nbytes for x in v)
        else:
            total += v.nbytes
    return total


# --- timing ---------------------------------------------------------------------------------


# What a loader's first call imports (snap's reader modules, and numpy.random and numpy.ma,
# which numpy loads on first use): ~25 ms with bytecode cached and ~90 ms without (as under
# PYTHONDONTWRITEBYTECODE=1), once per process, like any import of a training script. A
# fresh process's first epoch imports them before its clock starts, as peers.py imports each
# system's framework before its own.
LOADER_MODULES = ("snapshot_cli.readers.loader", "numpy.random", "numpy.ma")


def import_loader_modules() -> None:
    """Import :data:`LOADER_MODULES` (before a fresh process's first epoch is timed)."""
    for name in LOADER_MODULES:
        importlib.import_module(name)


def cpu_time(children: bool = False) -> float:
    """CPU seconds of this process (and of its terminated, waited-for children)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    if not children:
        return me.ru_utime + me.ru_stime
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


class Stopwatch:
    """Wall and CPU seconds of a ``with`` block: ``with Stopwatch() as sw: ...; sw.seconds``.

    Args:
        children: also count the CPU time of child processes that ended during the block.
    """

    def __init__(self, children: bool = False) -> None:
        self.children = children
        self.seconds = self.cpu = 0.0

    def __enter__(self) -> Stopwatch:
        self.t0, self.c0 = time.perf_counter(), cpu_time(self.children)
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.t0
        self.cpu = cpu_time(self.children) - self.c0


def timed(fn: Callable[[], object]) -> float:
    """Wall seconds of one call of ``fn``."""
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def rate_gbps(nbytes: float, seconds: float) -> float:
    """GB/s (1e9 bytes) of ``nbytes`` in ``seconds``."""
    return nbytes / GB / max(1e-9, seconds)


def drain(batches: Iterable[dict[str, np.ndarray]]) -> tuple[int, int]:
    """Consume loader batches → (bytes of their numpy arrays, records)."""
    nbytes = records = 0
    for batch in batches:
        nbytes += batch_bytes(batch)
        records += len(batch["label"])
    return nbytes, records


def timed_epoch(
    s: snap.Snapshot, batch_size: int, warm: bool = False, **options: Any
) -> tuple[int, int, dict[str, Any], float, float]:
    """One timed epoch of a loader → (bytes, records, stats, seconds, cpu seconds).

    ``warm``: run one untimed epoch first and time the loader's second epoch.
    """
    with s.loader(batch_size, **options) as loader:
        if warm:
            for _ in loader:
                pass
        before = process_cpu(loader)
        with Stopwatch() as sw:
            nbytes, records = drain(loader)
            stats = loader.stats()
        return nbytes, records, stats, sw.seconds, sw.cpu + process_cpu(loader) - before


def process_cpu(loader: Any) -> float:
    """CPU seconds the loader's decode processes (``processes=N``) have spent for it so far:
    a timed run's CPU counts theirs too."""
    return float(loader.stats()["stage_seconds"]["decode_process_cpu"])


# --- alternating repeats and their tables ---------------------------------------------------


def rotated(items: Sequence[T], shift: int) -> list[T]:
    """``items`` rotated left by ``shift``: the configurations of a repeat alternate, and the
    order rotates between repeats so that none always runs first (or after the same one)."""
    k = shift % len(items) if items else 0
    return [*items[k:], *items[:k]]


def runs_text(values: Iterable[float], digits: int = 2) -> str:
    """The raw runs behind a median, for the table's runs column."""
    return " ".join(f"{x:.{digits}f}" for x in values)


def verdict(ok: bool, target: str = "") -> str:
    """``"<target> ok"`` or ``"<target> MISSED"`` (the bare word without a target)."""
    word = "ok" if ok else "MISSED"
    return f"{target} {word}" if target else word


def print_header(header: str, rule_extra: int = 30) -> None:
    """A table's header line, then a rule of dashes ``rule_extra`` longer than it."""
    print(header)
    print("-" * (len(header) + rule_extra))


# --- the environment ------------------------------------------------------------------------


def usable_cores() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def environment() -> dict[str, Any]:
    """Cores, machine and versions, for the environment line and the JSON documents."""
    return {
        "cores": usable_cores(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "pyarrow": pa.__version__,
        "snap": snap.__version__,
        "machine": platform.machine(),
    }


def describe(env: dict[str, Any]) -> str:
    """The environment line of :func:`environment`'s document."""
    return (
        f"{env['cores']} usable cores ({env['machine']}), python {env['python']}, "
        f"pyarrow {env['pyarrow']}, numpy {env['numpy']}, snap {env['snap']}"
    )


def run_environment(
    env: dict[str, Any], load: tuple[Any, Any], args: argparse.Namespace, batch_size: int
) -> dict[str, Any]:
    """The ``environment`` of a replay benchmark's JSON document: ``env``, the load averages
    at start and end, and the run's size, repeats and batch size."""
    out = {**env, "load_average_start": load[0], "load_average_end": load[1]}
    return {**out, "size_gb": args.size_gb, "repeats": args.repeats, "batch_size": batch_size}


def load_at_start(text: str, load: tuple[float, float, float]) -> str:
    """``text`` and the 1- and 5-minute load averages, printed as a run starts."""
    return f"{text}; load average {load[0]:.2f} {load[1]:.2f} at start"


def load_summary(text: str, start: float, end: float) -> str:
    """``text`` and the 1-minute load average at start and end: other processes competing
    for the cores make every number noisy, so a report says how busy the machine was."""
    return f"{text}; 1-min load average {start:.2f} at start, {end:.2f} at end"


# --- fresh processes ------------------------------------------------------------------------


class ChildError(RuntimeError):
    """A benchmark's child process failed; ``returncode`` and ``stderr`` say how."""

    def __init__(self, what: str, returncode: int, stderr: str) -> None:
        super().__init__(f"{what} failed ({returncode}):\n{stderr[-3000:]}")
        self.returncode = returncode
        self.stderr = stderr


def last_json_line(stdout: str) -> Any:
    """The JSON document a child printed last (libraries may print before it)."""
    return json.loads(stdout.strip().splitlines()[-1])


def run_child(argv: list[str], what: str, timeout: float | None = None) -> Any:
    """``python *argv`` in a fresh process (no imported framework's thread pools, no
    allocations of an earlier run) → the JSON document of its last stdout line.

    Raises:
        ChildError: the process exited with another status than 0.
    """
    proc = subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, check=False, timeout=timeout
    )
    if proc.returncode != 0:
        raise ChildError(what, proc.returncode, proc.stderr)
    return last_json_line(proc.stdout)


def proc_status_kib(fields: tuple[str, ...]) -> dict[str, int]:
    """These fields of /proc/self/status (VmRSS, VmHWM, RssAnon, ...) in KiB; 0 if absent."""
    out = dict.fromkeys(fields, 0)
    try:
        with open("/proc/self/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in out:
                    out[key] = int(value.split()[0])
    except OSError:
        pass
    return out


# --- options and output ---------------------------------------------------------------------


def parser(doc: str) -> argparse.ArgumentParser:
    """A benchmark's argument parser, described by the first paragraph of its docstring."""
    return argparse.ArgumentParser(description=doc.split("\n\n")[0])


def add_json_option(p: argparse.ArgumentParser) -> None:
    """``--json FILE``: also write the numbers there (see :func:`write_json`)."""
    p.add_argument("--json", metavar="FILE", default=None, help="also write the numbers here")


def add_quick_option(p: argparse.ArgumentParser, smoke: str) -> None:
    """``--quick``: a smoke run of ``smoke`` (e.g. "0.2 GB") and 1 repeat (``smoke`` names
    the sizes only: the help adds the repeat)."""
    p.add_argument("--quick", action="store_true", help=f"smoke run: {smoke}, 1 repeat")


def add_data_dir_option(p: argparse.ArgumentParser, default: str) -> None:
    """``--data-dir DIR``: where a benchmark writes its snapshots and keeps them for later runs
    (``default``, an :func:`out_dir`, named in the help)."""
    p.add_argument(
        "--data-dir",
        metavar="DIR",
        default=default,
        help=f"where the snapshots are written and kept for later runs (default {default})",
    )


def dir_bytes(path: str) -> int:
    """Bytes of the files under ``path`` (0 where it does not exist)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):  # removed meanwhile
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def print_data_kept(data_dir: str) -> None:
    """The last line of a benchmark that keeps its snapshots (stderr): where, and how big."""
    size = dir_bytes(data_dir)
    amount = f"{size / GB:.2f} GB" if size >= GB / 10 else f"{size / 1e6:.1f} MB"
    print(
        f"data kept in {os.path.abspath(data_dir)} ({amount}): later runs reuse it; "
        "delete it to free the space, or pass --data-dir to keep it elsewhere",
        file=sys.stderr,
        flush=True,
    )


def run_main(main: Callable[[], int | None]) -> None:
    """A benchmark's entry point: ``sys.exit(main())``, but an error snap raised on purpose
    (a full disk, a directory that holds something else) or a child process's failure ends
    it as one line, ``<script>: error: <message>``, and exit status 1, not a traceback.

    pyarrow imports pandas at its first array of numpy values (~0.2 s): done here, before
    any clock, or the first baseline a benchmark timed was charged for it (a 1-repeat run of
    shapes.py said the loader ran 33x its baseline)."""
    pa.array(np.zeros(1)).to_numpy()
    try:
        code = main()
    except (snap.SnapError, ChildError) as err:
        print(f"{os.path.basename(sys.argv[0])}: error: {err}", file=sys.stderr, flush=True)
        code = 1
    sys.exit(code)


def resolve_quick(
    args: argparse.Namespace, name: str, default: float, quick: float, repeats: int
) -> None:
    """Fill ``args.<name>`` and ``args.repeats`` left unset (None): with the smoke run's values
    under ``--quick`` (``quick`` and 1 repeat), else with ``default`` and ``repeats``."""
    if getattr(args, name) is None:
        setattr(args, name, quick if args.quick else default)
    if args.repeats is None:
        args.repeats = 1 if args.quick else repeats


def subset(p: argparse.ArgumentParser, flag: str, text: str, allowed: Sequence[str]) -> list[str]:
    """A comma-separated option's values, which must be a non-empty subset of ``allowed``
    (a usage error, exit 2, otherwise)."""
    values = [v.strip() for v in text.split(",") if v.strip()]
    if not values or any(v not in allowed for v in values):
        p.error(f"{flag} must be a comma-separated subset of {','.join(allowed)}")
    return values


def write_json(path: str, doc: Any) -> None:
    """Write ``doc`` to ``path`` as indented JSON with a final newline."""
    with open(path, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
