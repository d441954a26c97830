"""A damaged shard gets the same advice wherever it is met: the loader, ``head`` and a
remote ``cache_dir`` fill used to say "recreate with snap create --overwrite" (recompute
everything) where ``snap verify`` says to delete the damaged shards and run the same
create (recompute only their tasks)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli.cli import cli
from snapshot_cli.errors import DAMAGED

from .conftest import damaged_snapshot


def test_loader_head_and_verify_give_one_advice(tmp_path: Path) -> None:
    out, victim = damaged_snapshot(tmp_path)
    with pytest.raises(snap.CorruptShardError) as met:
        for _ in snap.open(out).loader(16, shuffle=False):
            pass
    assert victim in str(met.value) and DAMAGED in str(met.value)
    assert "snap verify" in DAMAGED and "run the same snap create again" in DAMAGED
    head = CliRunner().invoke(cli, ["head", out, "-n", "200"])
    assert head.exit_code == 1 and "run the same snap create again" in head.output, head.output
    verify = CliRunner().invoke(cli, ["verify", out])
    assert verify.exit_code == 1 and "run the same snap create again" in verify.output


@pytest.fixture(scope="module")
def intact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One shard of two record batches (zstd), whose bytes the test below damages."""
    import numpy as np

    def preprocess(i: int) -> Any:
        for k in range(40):
            yield {"label": i * 40 + k, "x": np.full(16, k, np.uint8), "t": f"text {k}"}

    out = tmp_path_factory.mktemp("intact") / "s"
    snap.create(preprocess, str(out), inputs=[0], workers=0, batch_rows=20)
    return out


@pytest.mark.parametrize("where", ["local", "memory"])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_damage_anywhere_in_a_shard_is_named_with_the_advice(
    intact: Path, where: str, data: Any
) -> None:
    """Bytes changed anywhere in a shard, its footer too (which said "record batch 0 cannot
    be decoded: Verification of flatbuffer-encoded Footer failed", without advice; a
    probe): the loader and ``head`` give the records as written or a CorruptShardError
    naming the shard, with the advice; ``verify`` finds it damaged."""
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "s"
        shutil.copytree(intact, out)
        entry = snap.open(out).shards[0]
        shard = out / entry.path
        raw = bytearray(shard.read_bytes())
        at = data.draw(st.integers(0, len(raw) - 1), label="at")
        width = data.draw(st.integers(1, 4), label="width")
        new = data.draw(st.binary(min_size=width, max_size=width), label="bytes")
        if raw[at : at + width] == new[: len(raw) - at]:
            return  # (nothing changed)
        raw[at : at + width] = new
        shard.write_bytes(bytes(raw[: len(shard.read_bytes())]))
        url = str(out)
        if where == "memory":  # (remote: fetched whole or by range, each checked)
            import fsspec

            url = f"memory://damaged/{Path(tmp).name}"
            fsspec.filesystem("memory").put(str(out), url, recursive=True)
        for read in (
            lambda: [b["label"] for b in snap.open(url).loader(8, shuffle=False)],
            lambda: snap.open(url).head(40),
        ):
            try:
                read()
            except snap.CorruptShardError as err:
                assert entry.path in str(err) and DAMAGED in str(err), str(err)
        verify = CliRunner().invoke(cli, ["verify", url])
        assert verify.exit_code == 1 and "DAMAGED" in verify.output, verify.output
        if where == "memory":
            fsspec.filesystem("memory").rm(url, recursive=True)
