"""A function sent by value (a notebook's, a script's) whose code or a value it uses changed:
"different pipeline code" named the kinds of thing that could have, "(for a function sent by
value: its source or a value it uses from outside, a global, a closure variable, a default,
...)", whichever it was (a probe: a global, a closure variable, a helper, a model's weights,
a DataFrame...). The manifest keeps the digest of each part of the function
(``pipeline.parts``), and the refusal names the parts that differ."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from snapshot_cli.writers.value_identity import parts_changed

SCRIPT = """
import sys
import numpy as np
import snapshot_cli as snap

SCALE = {scale}
TABLE = np.arange(1000) * {table}
OFFSET = {offset}


def helper(n):
    return n + OFFSET


def make(k):
    def f(n, *, step={step}):
        return {{"v": helper(n) * SCALE * k * step + int(TABLE[n]){edit}}}
    return f


try:
    snap.create(make({closure}), "out", inputs=range(3), workers=0, progress=False)
except snap.SnapshotExistsError as err:
    print(err)
"""
BASE = {"scale": 3, "table": 1, "offset": 1, "step": 2, "closure": 5, "edit": ""}
CHANGES = {
    "scale": (7, "the global 'SCALE' changed"),
    "table": (2, "the global 'TABLE' changed"),
    "offset": (4, "the global 'helper' changed"),  # (what helper uses counts as helper)
    "step": (3, "its code changed; its defaults changed"),  # (a default is in its source)
    "closure": (6, "the closure variable 'k' changed"),
    "edit": (" + 1", "its code changed"),
}


def run(tmp_path: Path, **changed: object) -> str:
    (tmp_path / "run.py").write_text(SCRIPT.format(**{**BASE, **changed}))
    done = subprocess.run([sys.executable, "run.py"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, check=True)  # fmt: skip
    return done.stdout.strip()


@pytest.mark.parametrize("what", sorted(CHANGES))
def test_the_part_that_changed_is_named(tmp_path: Path, what: str) -> None:
    assert run(tmp_path) == ""
    assert run(tmp_path) == ""  # (up to date: nothing said)
    value, named = CHANGES[what]
    said = run(tmp_path, **{what: value})
    assert f"made with different pipeline code ({named}); pass overwrite=True" in said, said
    assert said.count(" changed") == named.count(" changed"), said  # (those alone)


def test_parts_that_differ_are_said_whatever_the_record() -> None:
    then = {"its code": "a", "the global 'A'": "b", "the global 'B'": "c"}
    now = {"its code": "a", "the global 'A'": "x", "the global 'C'": "d"}
    assert parts_changed(then, now) == (
        "the global 'A' changed; the global 'C' now used; the global 'B' no longer used"
    )
    for old in (None, {}, {"its code": 3}, ["its code"]):  # (older snaps, or not ours)
        assert parts_changed(old, now) == ""
    assert parts_changed(then, dict(then)) == ""  # (only their sharing differed: not said)
