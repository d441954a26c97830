"""What a function defined in a script or notebook uses counts in its snapshot's identity: a
decorator's own code, and the values a class of the script holds. A ``functools.wraps``
decorator's wrapper was counted by the source of the function it wraps (``inspect.getsource``
follows ``__wrapped__``), so an edit of the decorator reused the old records; a class by its
source text only, so ``class Cfg: scale = int(sys.argv[1])`` (or a notebook's class, which
has no source) reused them whatever the value. Each case runs as a script twice, in a fresh
process each time, as a user reruns it (workers 0 and 2)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

DECORATED = """
import functools, json, sys
import snapshot_cli as snap

def times(fn):
    @functools.wraps(fn)
    def wrapper(n):
        for r in fn(n):
            yield {"n": r["n"], "v": r["v"] * FACTOR}
    return wrapper

@times
def prep(n):
    yield {"n": n, "v": n}
"""

CLASS = """
import json, sys
import snapshot_cli as snap

class Cfg:
    scale = int(sys.argv[3])  # (a value the script computes: its source is the same)
    names = ["a", "b"]

def prep(n):
    yield {"n": n, "v": n * Cfg.scale}
"""

RUN = """
try:
    info = snap.create(prep, sys.argv[1], inputs=list(range(5)), workers=int(sys.argv[2]))
    out = {"reused": info.reused}
except snap.SnapshotExistsError as err:
    out = {"refused": str(err)}
print(json.dumps(out))
"""


def run(
    tmp_path: Path, code: str, factor: int, workers: int, stdin: bool = False
) -> dict[str, object]:
    """The script run in a fresh process; ``stdin``: piped to ``python -``, where its code
    has no source file (as a notebook's cells have none on disk)."""
    text = code.replace("FACTOR", str(factor)) + RUN
    script = tmp_path / "script.py"
    script.write_text(text)
    args = [str(tmp_path / "s"), str(workers), str(factor)]
    res = subprocess.run([sys.executable, "-" if stdin else str(script), *args],
                         input=text if stdin else None, capture_output=True, text=True,
                         timeout=120, check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize(
    ("code", "stdin"),
    [(DECORATED, False), (CLASS, False), (CLASS, True)],
    ids=["decorator", "class attribute", "class attribute, no source"],
)
def test_an_edit_of_what_the_function_uses_is_a_change(
    tmp_path: Path, code: str, workers: int, stdin: bool
) -> None:
    assert run(tmp_path, code, 2, workers, stdin) == {"reused": False}
    assert run(tmp_path, code, 2, workers, stdin) == {"reused": True}  # (unchanged: reused)
    said = run(tmp_path, code, 10, workers, stdin)["refused"]
    assert "made with different pipeline code" in str(said)
    assert "only what snap counts since 2026-12-06" not in str(said)  # (made by this snap)


def test_a_snapshot_of_an_older_identity_scheme_says_what_is_counted_now(tmp_path: Path) -> None:
    """A snapshot made before scheme 4 may differ by what is counted now alone: said so."""
    from snapshot_cli.writers.incremental import said_changed

    for made_by, hinted, named in (({"identity_scheme": 3}, True, True), ({}, True, True),
                                   ({"identity_scheme": 4}, False, True),
                                   ({"identity_scheme": 5}, False, False)):  # fmt: skip
        text = said_changed(["code"], True, {}, {}, "", made_by)
        assert ("a decorator's own code, and the values held by a class" in text) == hinted
        assert ("a global of your script or notebook named as an attribute" in text) == named
        assert ("pass overwrite=True once" in text) == named
    assert "decorator" not in said_changed(["code"], False, {}, {}, "", {})  # (a file's)
