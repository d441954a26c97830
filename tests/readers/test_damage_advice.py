"""A damaged shard gets the same advice wherever it is met: the loader, ``head`` and a
remote ``cache_dir`` fill used to say "recreate with snap create --overwrite" (recompute
everything) where ``snap verify`` says to delete the damaged shards and run the same
create (recompute only their tasks)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

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
