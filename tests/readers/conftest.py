"""What the reader tests share: small snapshots of numbered records, made in a test's dir."""

from __future__ import annotations

import textwrap
from pathlib import Path

import snapshot_cli as snap

PER_INPUT = 40  # records each input file yields


def numbered_snapshot(root: Path, records: int, record: str, shard_size: str) -> str:
    """Make a snapshot of ``records`` records under ``root``; return its path.

    Args:
        records: a multiple of PER_INPUT.
        record: the Python expression of the record numbered ``n`` (``i`` is its input,
            ``k`` its place there; ``np`` is numpy), e.g. ``{"label": np.int64(n)}``.
        shard_size: small sizes make many shards and record batches.
    """
    (root / "pipe.py").write_text(
        textwrap.dedent(
            f"""
            import numpy as np
            def preprocess(path):
                with open(path) as f:
                    i = int(f.read())
                for k in range({PER_INPUT}):
                    n = i * {PER_INPUT} + k
                    yield {record}
            """
        )
    )
    (root / "in").mkdir()
    for i in range(records // PER_INPUT):
        (root / "in" / f"{i}.txt").write_text(str(i))
    out = root / "snap"
    snap.create(f"{root / 'pipe.py'}:preprocess", str(out), inputs=[str(root / "in" / "*.txt")],
                workers=0, shard_size=shard_size)  # fmt: skip
    return str(out)
