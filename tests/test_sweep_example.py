"""examples/sweep/: the hyperparameter sweep runs as a user runs it, on a tiny configuration.

The speedup is a benchmark (see the example's docstring), so it is only required to be a
positive number here; what is checked is that both modes ran every trial, that every trial
saw its own shuffle and every record once per epoch, and that the inputs and the snapshot
are reused by a second run.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import snapshot_cli as snap
from tests.conftest import REPO

pytest.importorskip("torch")
pytest.importorskip("PIL")

SWEEP = REPO / "examples" / "sweep"
IMAGES, TRIALS = 200, 3


def run_sweep(out: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    result = out.parent / f"{out.name}-{len(args)}.json"
    res = subprocess.run(
        [sys.executable, str(SWEEP / "sweep.py"), "--out", str(out), "--images", str(IMAGES),
         "--epochs", "1", "--json", str(result), *args],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    return res, json.loads(result.read_text())


@pytest.mark.slow
def test_sweep_runs_both_modes(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    res, report = run_sweep(out, "--trials", str(TRIALS))

    s = snap.open(out / "snapshot")
    assert s.num_records == IMAGES
    assert {c.name for c in s.schema} >= {"image", "label", "index"}
    assert len(list((out / "inputs").glob("class-*/img-*.jpg"))) == IMAGES

    lrs: dict[str, list[float]] = {}
    for mode in ("snap", "recompute"):
        m = report["modes"][mode]
        trials = m["trials"]
        assert [t["trial"] for t in trials] == list(range(TRIALS))
        assert len({t["seed"] for t in trials}) == len({t["lr"] for t in trials}) == TRIALS
        for t in trials:
            assert isinstance(t["accuracy"], float)
            assert 0.0 <= t["accuracy"] <= 1.0
            assert t["records_per_epoch"] == IMAGES
            assert t["complete_epochs"]  # each image exactly once per epoch
            assert len(t["first_labels"]) == 128
        assert len({t["order_hash"] for t in trials}) == TRIALS, f"{mode}: equal shuffles"
        assert m["distinct_shuffles"] == TRIALS
        assert m["seconds"] > 0
        lrs[mode] = [t["lr"] for t in trials]
    assert lrs["snap"] == lrs["recompute"]  # the same sweep in both modes
    made = report["modes"]["snap"]["snapshot"]
    assert made["num_records"] == IMAGES
    assert not made["reused"]

    assert f"distinct shuffles: {TRIALS} of {TRIALS}" in res.stdout
    speedup = re.search(r"^speedup: ([0-9.]+)x", res.stdout, re.MULTILINE)
    assert speedup is not None, res.stdout
    assert float(speedup.group(1)) > 0
    assert report["speedup"] > 0
    for t in report["modes"]["snap"]["trials"]:  # one table row per trial
        assert re.search(rf"^\s+{t['trial']}\s+{t['lr']:g}\s+{t['seed']}\s", res.stdout, re.M)

    # a second run keeps the input files (their mtimes are in the fingerprint) and, with
    # --reuse, the snapshot: nothing is recomputed before the trials
    mtimes = {p: p.stat().st_mtime_ns for p in (out / "inputs").rglob("*.jpg")}
    res2, report2 = run_sweep(out, "--trials", "1", "--reuse")  # one trial a mode: ~2 s each
    assert {p: p.stat().st_mtime_ns for p in (out / "inputs").rglob("*.jpg")} == mtimes
    assert report2["modes"]["snap"]["snapshot"]["reused"]
    assert len(report2["modes"]["recompute"]["trials"]) == 1
    assert "distinct shuffles: 1 of 1" in res2.stdout


def load(name: str) -> ModuleType:
    """examples/sweep/NAME.py under a name of its own (``pipeline`` is a common name)."""
    spec = importlib.util.spec_from_file_location(f"_sweep_example_{name}", SWEEP / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_inputs_are_deterministic(tmp_path: Path) -> None:
    inputs, pipeline = load("make_inputs"), load("pipeline")
    render, parse_path = inputs.render, pipeline.parse_path

    assert render(7) == render(7) != render(17)
    paths = inputs.make_inputs(str(tmp_path), 12)
    assert [parse_path(p) for p in paths[:2]] == [(0, 0), (0, 10)]  # class by class
    for p in paths:
        label, index = parse_path(p)
        assert label == index % inputs.CLASSES
        assert Path(p).read_bytes() == render(index)
        (record,) = pipeline.preprocess(p)
        assert record["image"].shape == (3, 64, 64)
        assert record["image"].dtype.name == "uint8"
        assert (record["label"], record["index"]) == (label, index)
