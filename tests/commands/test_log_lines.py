"""snap's own warnings in every command read ``snap: warning: ...`` on that command's stderr,
as create's do; they read ``snap: snapshot_cli: ...`` in the other commands (through the
handler of other libraries' logs), and after a ``create`` run in the same process
(CliRunner, a notebook) went to that command's stderr, closed since."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from click.testing import CliRunner

import snapshot_cli as snap
from snapshot_cli.cli import cli


def preprocess(i: int) -> Any:
    for k in range(4):
        yield {"x": np.full(2_000, i * 4 + k, np.uint8)}


def test_a_warning_of_another_command_is_snaps_own_line(
    tmp_path: Path, memfs: Any, write_pipeline: Any
) -> None:
    remote = "memory://lines/snap"
    snap.create(preprocess, remote, inputs=range(8), workers=0, inputs_per_task=1)
    pipeline = write_pipeline(
        """
        def preprocess(path):
            yield {"n": len(path)}
        """
    )
    (tmp_path / "in.txt").write_text("1")
    args = ["create", pipeline, str(tmp_path / "local"), "--input", str(tmp_path / "in.txt")]
    made = CliRunner().invoke(cli, args)
    assert made.exit_code == 0, made.output
    cache = tmp_path / "cache"
    args = ["bench", remote, "--epochs", "1", "--cache-dir", str(cache), "--cache-limit", "1KiB"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    over = [line for line in result.stderr.splitlines() if "over its --cache-limit" in line]
    assert len(over) == 1, result.stderr
    assert over[0].startswith(f"snap: warning: --cache-dir {cache} holds "), over
    assert "snapshot_cli" not in result.stderr, result.stderr
