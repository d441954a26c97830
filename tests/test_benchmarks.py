"""The benchmarks stay runnable: each script answers ``--help`` (its imports of snap's
modules hold: ``validation.py`` imported a function that had moved, and nothing ran it),
each helper module imports, and every option README and docs/ give a benchmark is one it
takes. Running them is ``make bench``'s business, not the suite's."""

from __future__ import annotations

import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from tests.conftest import REPO

BENCH = REPO / "benchmarks"
SCRIPTS = sorted(p.name for p in BENCH.glob("*.py") if '__name__ == "__main__"' in p.read_text())
HELPERS = sorted(p.stem for p in BENCH.glob("*.py") if p.name not in SCRIPTS)


@cache
def help_text(script: str) -> str:
    res = subprocess.run([sys.executable, str(BENCH / script), "--help"], cwd=REPO,
                         capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


def options_of(script: str) -> set[str]:
    """The options ``script`` defines, read from its source and _common's shared parser
    (what its ``--help`` lists, without starting it: a test ran each twice, 12 s)."""
    source = (BENCH / script).read_text() + (BENCH / "_common.py").read_text()
    return set(re.findall(r"add_argument\(\s*\"(--[\w-]+)\"", source))


def test_options_of_reads_what_help_lists() -> None:
    listed = set(re.findall(r"--[\w-]+", help_text("replay.py"))) - {"--help"}
    assert options_of("replay.py") >= listed and len(listed) > 5


def test_there_are_scripts_and_helpers() -> None:
    assert {"replay.py", "device.py", "peers.py", "validation.py"} <= set(SCRIPTS)
    assert {"_common", "cpu_pipeline"} <= set(HELPERS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_each_benchmark_answers_help(script: str) -> None:
    assert "usage" in help_text(script).lower()


def test_each_helper_imports() -> None:
    code = f"import sys; sys.path.insert(0, {str(BENCH)!r}); " + "; ".join(
        f"import {name}" for name in HELPERS
    )
    res = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, timeout=120, check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]


def test_every_option_the_docs_give_a_benchmark_is_one_it_takes() -> None:
    docs = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    given = {
        (script, option)
        for doc in docs
        for script, rest in re.findall(
            r"benchmarks/(\w+\.py)((?: +--?[\w-]+(?: +[\w.=/-]+)?)*)", doc.read_text()
        )  # fmt: skip
        for option in re.findall(r"--[\w-]+", rest)
    }
    assert len(given) > 10  # (the pattern still finds them)
    for script, option in sorted(given):
        assert script in SCRIPTS, f"{script} is not a benchmark script"
        assert option in options_of(script), f"benchmarks/{script} takes no {option}"


def test_a_file_just_written_in_small_pieces_is_not_mapped_in_large_folios(tmp_path: Path) -> None:
    """``_common.large_folio_share``, which replay.py prints: what it reads off the kernel is
    what README says of a shard just written (its pages mapped one by one)."""
    sys.path.insert(0, str(BENCH))
    try:
        import _common
    finally:
        sys.path.remove(str(BENCH))
    path = tmp_path / "written"
    with open(path, "wb", buffering=0) as f:
        for i in range(1024):  # 4 MiB in 4 KiB writes
            f.write(bytes([i % 256]) * 4096)
    if sys.platform != "linux":
        assert _common.large_folio_share(str(path)) is None
        return
    assert _common.large_folio_share(str(path)) == 0.0
    (tmp_path / "empty").write_bytes(b"")
    assert _common.large_folio_share(str(tmp_path / "empty")) is None


def test_peers_refuses_an_unknown_system_before_any_work(tmp_path: Path) -> None:
    """A misspelt system ran every other one and then divided by its 0 records/s."""
    res = subprocess.run([sys.executable, str(BENCH / "peers.py"), "--systems", "snap,tfdata",
                          "--data-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert res.returncode == 2 and "unknown 'tfdata'" in res.stderr and "'tf.data'" in res.stderr
    assert list(tmp_path.iterdir()) == []


def test_peers_import_every_library_an_epoch_uses_before_its_clock() -> None:
    """Each peer's epoch imports its framework; the child imports those first (as it does
    snapshot_cli), or TensorFlow's 3.7 s import was counted as tf.data's reading."""
    sys.path.insert(0, str(BENCH))
    try:
        import peers
    finally:
        sys.path.remove(str(BENCH))
    checked = 0
    for source in (BENCH / "peers.py", BENCH / "peers_tokens.py"):
        body = source.read_text().split("\ndef epoch(", 1)[1].split("\ndef ", 1)[0]
        for branch in re.split(r"\n    (?:el)?if ", body)[1:]:
            system = re.match(r"(?:TOKENS and )?system == \"([^\"]+)\"", branch)
            imported = set(re.findall(r"^\s+import (\w+)", branch, re.M))
            if system and imported:
                assert imported <= set(peers.FRAMEWORKS[system.group(1)]), (source, system)
                checked += 1
    assert checked == 8  # tf.data, hf datasets, litdata, npy + DataLoader in each variant
