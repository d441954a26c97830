"""A record batch a window uses many times (a mixture repeating a small snapshot, a
sample repeating one) is decoded once for all its uses (``decode._repeated``): the batches are
exactly those of decoding it once per use, for every kind of column, codec and order; and
a damaged one is still refused before any of its records reach the loop."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import snapshot_cli as snap
from snapshot_cli.errors import CorruptShardError
from snapshot_cli.readers import decode


def rows(tag: int, n: int) -> Iterator[dict[str, Any]]:
    for i in range(n):
        k = tag * 10_000 + i
        yield {
            "id": np.int64(k),
            "x": np.full((3, 2), k, np.float32),
            "text": f"record {k}",
            "tokens": np.arange(k % 7, dtype=np.int32),
            "flag": bool(k % 2),
        }


@pytest.fixture(scope="module", params=["zstd", "lz4", "none"])
def pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp(f"rep-{request.param}")
    big, tiny = str(root / "big"), str(root / "tiny")
    snap.create(lambda: rows(1, 3000), big, workers=0, batch_rows=100, compression=request.param)
    snap.create(lambda: rows(2, 5), tiny, workers=0, compression=request.param)
    return snap.open(big), snap.open(tiny)


def batches(source: Any, **options: Any) -> list[dict[str, Any]]:
    with source.loader(64, seed=3, **options) as loader:
        return [{k: (list(v) if v.dtype == object else v.copy()) for k, v in b.items()}
                for b in loader]  # fmt: skip


def same(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for k in x:
            if isinstance(x[k], list):
                assert len(x[k]) == len(y[k])
                for u, v in zip(x[k], y[k], strict=True):
                    np.testing.assert_array_equal(u, v)
            else:
                assert x[k].dtype == y[k].dtype
                np.testing.assert_array_equal(x[k], y[k])


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("columns", [None, ["id", "x"]], ids=["every-kind", "fixed-width"])
@pytest.mark.parametrize("kind", ["mixture", "sample"])
def test_the_same_batches_as_decoding_every_use(
    pair: Any, monkeypatch: pytest.MonkeyPatch, kind: str, columns: Any, shuffle: bool
) -> None:
    big, tiny = pair
    if kind == "mixture":
        source = snap.mix([big, tiny], weights=[0.7, 0.3], epoch_records=3200)
    else:
        source = tiny.sample(records=960)
    options = {"columns": columns, "shuffle": shuffle, "epochs": 2}
    calls = Counter[str]()
    real = decode._repeated

    def counted(*args: Any) -> list[str]:
        hows = real(*args)
        calls.update(hows)
        return hows

    monkeypatch.setattr(decode, "_repeated", counted)
    once = batches(source, **options)
    assert calls["repeated"] > 0  # the path under test ran
    monkeypatch.setattr(decode, "REPEATED", 1 << 30)  # every use decoded on its own
    same(once, batches(source, **options))
    ids = np.concatenate([b["id"] for b in once])
    if kind == "mixture":
        per_tiny = Counter(i for i in ids.tolist() if i >= 20_000)
        assert set(per_tiny) == {20_000 + i for i in range(5)}
        # 960 of 3,200 an epoch (50 batches of 64): each of the 5 records 192 times an epoch
        assert set(per_tiny.values()) == {2 * 192}


def test_a_damaged_repeated_record_batch_is_refused(tmp_path: Path) -> None:
    big, tiny = str(tmp_path / "big"), str(tmp_path / "tiny")
    snap.create(lambda: rows(1, 400), big, workers=0, batch_rows=100)
    snap.create(lambda: rows(2, 5), tiny, workers=0, compression="none")
    t = snap.open(tiny)
    path = Path(tiny) / t.shards[0].path
    data = bytearray(path.read_bytes())
    at = data.find(b"record 20003")
    assert at > 0
    data[at + 7] ^= 1  # one bit of a text value: the size stays, the checksum does not
    path.write_bytes(bytes(data))
    mixed = snap.mix([snap.open(big), t], weights=[0.5, 0.5], epoch_records=1000)
    seen: list[int] = []
    with pytest.raises(CorruptShardError, match=t.shards[0].path):
        for b in mixed.loader(50, seed=0):
            seen.extend(b["id"].tolist())
    assert not [i for i in seen if i >= 20_000]  # none of the damaged batch's records
