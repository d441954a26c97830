"""A malformed ``--ray-address`` is a usage error (exit 2) said before any work: it was exit
1, found only after planning (leaving a run and a lease in OUTPUT, an "unfinished
snapshot"), with advice about tokens, and ``:6390`` printed Ray's own traceback (a probe)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import snapshot_cli as snap
from snapshot_cli.cli import cli
from snapshot_cli.writers.options import address_problem

GOOD = ["auto", "127.0.0.1:6379", "head.example:6379", "[::1]:6379", "ray://h", "ray://h:10001"]
BAD = {
    "localhost": "(no port)",
    "192.0.2.2:notaport": "(port 'notaport')",
    ":6390": "(no host)",
    "http://192.0.2.2:6390": "(not a host)",
    "h:0": "(port '0')",
    "h:70000": "(port '70000')",
    "ray://": "(no host)",
    " ": "is no Ray cluster's address:",
}


@pytest.mark.parametrize("address", GOOD)
def test_a_cluster_address_is_taken(address: str) -> None:
    assert address_problem(address) is None


@pytest.mark.parametrize("address", sorted(BAD))
def test_a_malformed_address_is_a_usage_error_before_any_work(tmp_path: Path, address: str) -> None:
    (tmp_path / "p.py").write_text("def f(path):\n    yield {'x': 1}\n")
    (tmp_path / "a.txt").write_text("1")
    out = tmp_path / "out"
    args = ["create", f"{tmp_path / 'p.py'}:f", str(out), "--input", str(tmp_path / "a.txt"),
            "--executor", "ray", "--ray-address", address]  # fmt: skip
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert f"--ray-address {address!r} is no Ray cluster's address" in result.stderr
    assert BAD[address] in result.stderr and "token" not in result.stderr
    assert "Traceback" not in result.stderr and not out.exists()
    with pytest.raises(snap.OptionError, match="is no Ray cluster's address"):
        snap.create(lambda: iter([{"x": 1}]), str(out), executor="ray", ray_address=address)
    assert not out.exists()


def test_a_malformed_ray_address_in_the_environment_is_refused_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``RAY_ADDRESS=garbage``: found only after planning, "cannot connect to Ray at
    garbage: Invalid address format", with advice about tokens, and nothing saying where
    the address came from (a probe)."""
    (tmp_path / "p.py").write_text("def f(path):\n    yield {'x': 1}\n")
    (tmp_path / "a.txt").write_text("1")
    monkeypatch.setenv("RAY_ADDRESS", "garbage")
    out = tmp_path / "out"
    args = ["create", f"{tmp_path / 'p.py'}:f", str(out), "--input", str(tmp_path / "a.txt"),
            "--executor", "ray"]  # fmt: skip
    done = CliRunner().invoke(cli, args)
    assert done.exit_code == 1, done.output
    assert done.stderr.strip() == (
        "snap: error: RAY_ADDRESS (in this environment) 'garbage' is no Ray cluster's address "
        "(no port): give host:port (the head's GCS port, 6379 by default), ray://host:10001 "
        "or auto; or unset it for a local Ray"
    )
    assert not out.exists()
