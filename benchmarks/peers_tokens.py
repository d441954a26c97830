"""The token-sequence variant of ``benchmarks/peers.py`` (``--variant tokens``).

Records are ragged ``tokens`` (int32, 16-256 Zipf-distributed ids each, ~550 bytes) and an
int64 ``label``: the shape of a language-model corpus after tokenisation. Each system stores
and batches them its own documented way: snap's ragged columns, tf.data ``ragged_batch``,
HF datasets ``Sequence``, LitData with a list-collating loader, and one ``.npy`` file per
record behind a torch ``DataLoader`` that collates lists. Called by ``peers.py``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from typing import Any

import _common
import numpy as np

import snapshot_cli as snap

TOKEN_BYTES = 4 * 136 + 8  # mean bytes of one record (mean length 136 ids)
BATCH = 256


@snap.ragged("tokens")
def token_records(item: list[int], seed: int) -> Iterator[snap.Batch]:
    """Input ``[index, rows]`` → one batch of token records (snap's pipeline function)."""
    tokens, labels = _chunk(item, seed)
    yield snap.Batch(tokens=tokens, label=labels)


def _chunk(item: list[int], seed: int) -> tuple[list[np.ndarray], np.ndarray]:
    index, rows = item
    rng = np.random.default_rng([seed, index, 7])
    lengths = rng.integers(16, 257, size=rows)
    ids = np.minimum(rng.zipf(1.3, size=int(lengths.sum())), 32000).astype(np.int32)
    return np.split(ids, np.cumsum(lengths)[:-1]), rng.integers(0, 1000, rows, dtype=np.int64)


def records_of(n: int) -> Iterator[dict[str, Any]]:
    for item in _common.chunk_items(n):
        tokens, labels = _chunk(item, _common.SEED)
        for t, label in zip(tokens, labels, strict=True):
            yield {"tokens": t, "label": int(label)}


def litdata_chunk(item: list[int]) -> Iterator[dict[str, Any]]:
    tokens, labels = _chunk(item, _common.SEED)
    for t, label in zip(tokens, labels, strict=True):
        yield {"tokens": t, "label": int(label)}


def list_collate(batch: list[Any]) -> list[Any]:
    """Keep a batch of ragged records as a list (the default collate cannot stack them)."""
    return batch


def materialise(system: str, path: str, n: int) -> None:
    if system == "snap":
        snap.create(token_records, path, inputs_from=functools.partial(_common.chunk_items, n),
                    params={"seed": _common.SEED}, workers=2, shard_size="128MiB")  # fmt: skip
    elif system == "tf.data":
        import tensorflow as tf

        spec = {"tokens": tf.TensorSpec((None,), tf.int32), "label": tf.TensorSpec((), tf.int64)}
        tf.data.Dataset.from_generator(lambda: records_of(n), output_signature=spec).save(path)
    elif system == "hf datasets":
        import datasets

        features = datasets.Features(
            {"tokens": datasets.Sequence(datasets.Value("int32")), "label": datasets.Value("int64")}
        )
        ds = datasets.Dataset.from_generator(
            records_of, gen_kwargs={"n": n}, features=features, cache_dir=path + "-cache"
        )
        ds.save_to_disk(path)
    elif system == "litdata":
        import litdata

        litdata.optimize(fn=litdata_chunk, inputs=_common.chunk_items(n), output_dir=path,
                         chunk_bytes="64MB", num_workers=2)  # fmt: skip
    elif system == "npy + DataLoader":
        os.makedirs(path)
        for i, r in enumerate(records_of(n)):
            np.save(os.path.join(path, f"{i:07d}-{r['label']}.npy"), r["tokens"])


class NpyPerRecord:
    """A torch map-style dataset over one ``.npy`` file per record (label in the name); the
    do-it-yourself baseline of both variants."""

    def __init__(self, path: str) -> None:
        self.files = sorted(os.path.join(path, f) for f in os.listdir(path))

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> tuple[np.ndarray, int]:
        name = self.files[i]
        return np.load(name), int(name.rsplit("-", 1)[1].split(".")[0])


def epoch(system: str, path: str) -> int:
    """One shuffled epoch; returns the records delivered."""
    records = 0
    if system == "snap":
        for b in snap.open(path).loader(BATCH, shuffle=True, seed=0):
            records += len(b["label"])
    elif system == "tf.data":
        import tensorflow as tf

        ds = tf.data.Dataset.load(path).shuffle(10_000, seed=0).ragged_batch(BATCH)
        for b in ds.prefetch(tf.data.AUTOTUNE):
            records += int(b["label"].shape[0])
    elif system == "hf datasets":
        import datasets

        ds = datasets.load_from_disk(path).with_format("numpy").shuffle(seed=0)
        for b in ds.iter(batch_size=BATCH):
            records += len(b["label"])
    elif system == "litdata":
        import litdata

        ds = litdata.StreamingDataset(path, shuffle=True, seed=0)
        loader = litdata.StreamingDataLoader(ds, batch_size=BATCH, num_workers=2,
                                             collate_fn=list_collate)  # fmt: skip
        for b in loader:
            records += len(b)
    elif system == "npy + DataLoader":
        import torch

        dl = torch.utils.data.DataLoader(NpyPerRecord(path), batch_size=BATCH, shuffle=True,
                                         num_workers=2, collate_fn=list_collate)  # fmt: skip
        for b in dl:
            records += len(b)
    return records
