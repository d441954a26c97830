"""Benchmark: the first epoch of a fresh process, and what checksums cost in it (issue 16).

Each run is a fresh process (no warm loader, no imported thread pools) that opens the cached
image-like snapshot and replays one shuffled epoch in batches of 256, page cache warm. Per
codec, alternating in one run: ``verify=True`` (every shard's crc32c checked before its first
record is used, today a separate pass over its bytes) and ``verify=False``; reported are the
epoch time, the time from ``iter()`` to the first batch, and the ratio verify/no-verify of
their medians (issue 16's targets: first epoch with verify >= 0.95 of without, first batch
<= 0.3 s).

Usage: python benchmarks/first_epoch.py [--size-gb 2.0] [--repeats 3] [--codecs zstd,lz4,none]
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402 - the benchmarks' shared scaffolding

CODECS = ("zstd", "lz4", "none")
BATCH = 256


def child(path: str, verify: bool) -> None:
    """One fresh-process epoch; prints a JSON line with its times."""
    import snapshot_cli as snap

    s = snap.open(path)
    loader = s.loader(BATCH, shuffle=True, seed=1, verify=verify)
    started = time.perf_counter()
    first = None
    records = 0
    for batch in loader:
        if first is None:
            first = time.perf_counter() - started
        records += len(next(iter(batch.values())))
    print(json.dumps({"seconds": time.perf_counter() - started, "first": first,
                      "records": records}))  # fmt: skip


def main() -> None:
    p = _common.parser(__doc__)
    p.add_argument("--size-gb", type=float, default=2.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--codecs", default=",".join(CODECS))
    p.add_argument("--data-dir", default=_common.out_dir("replay-data"))
    p.add_argument("--child", nargs=2, help=json.dumps("internal: PATH VERIFY"))
    _common.add_json_option(p)
    args = p.parse_args()
    if args.child:
        child(args.child[0], args.child[1] == "1")
        return
    doc: dict[str, object] = {"environment": _common.environment(), "codecs": {}}
    print(f"{'codec':6} {'verify':6} {'epoch s':>8} {'first s':>8} {'ratio':>6}  runs (epoch s)")
    for codec in _common.subset(p, "--codecs", args.codecs, CODECS):
        s = _common.ensure_snapshot(args.data_dir, codec, args.size_gb, tokens=False, workers=2)
        _common.rewarm(_common.shard_paths(s))
        runs: dict[bool, list[dict[str, float]]] = {True: [], False: []}
        for repeat in range(args.repeats):
            for verify in _common.rotated([True, False], repeat):
                argv = [__file__, "--child", s.url, "1" if verify else "0"]
                runs[verify].append(_common.run_child(argv, f"{codec} verify={verify}"))
        base = statistics.median(r["seconds"] for r in runs[False])
        for verify in (True, False):
            epoch = statistics.median(r["seconds"] for r in runs[verify])
            first = statistics.median(r["first"] for r in runs[verify])
            print(f"{codec:6} {str(verify):6} {epoch:8.3f} {first:8.3f} {base / epoch:6.2f}  "
                  + _common.runs_text(r["seconds"] for r in runs[verify]))  # fmt: skip
        doc["codecs"][codec] = {str(v): runs[v] for v in (True, False)}  # type: ignore[index]
    if args.json:
        _common.write_json(args.json, doc)


if __name__ == "__main__":
    main()
