"""What a pipeline's exception shows: all that Python would print of it, less snap's frames.

A new user's probe: ``raise RuntimeError("could not decode item 1") from e`` showed only the
RuntimeError, never the ValueError that was the real failure (not even with ``--debug``), an
ExceptionGroup only its count, and an exception whose ``__str__`` failed was "a bug in snap"
with snap's traceback. Each way an exception carries more is tried, in this process and in
a worker process (whose error crosses as text)."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

import snapshot_cli as snap

PIPELINE = """
import numpy as np


def decode(item):
    return np.frombuffer(b"abc", np.int32)  # the real failure: 3 bytes are no int32


def caused(item):
    try:
        decode(item)
    except ValueError as e:
        raise RuntimeError(f"could not decode item {item}") from e
    yield {}


def while_handling(item):
    try:
        decode(item)
    except ValueError:
        raise KeyError("a lookup while handling it")
    yield {}


def from_none(item):
    try:
        decode(item)
    except ValueError:
        raise RuntimeError("said alone") from None
    yield {}


def noted(item):
    err = RuntimeError("with a note")
    err.add_note("input was the third of the batch")
    raise err
    yield {}


def grouped(item):
    errors = []
    for k in range(2):
        try:
            decode(k)
        except ValueError as e:
            errors.append(e)
    raise ExceptionGroup("2 files failed", errors)
    yield {}


class DecodeError(Exception):
    def __init__(self, path):
        self.path = path

    def __str__(self):
        return f"cannot decode {self.path} ({self.reason})"  # (no reason: fails)


def str_fails(item):
    raise DecodeError(item)
    yield {}
"""

CAUSE = "ValueError: buffer size must be a multiple of element size"
CASES = {
    "caused": [CAUSE, "in decode", "direct cause of the following", "could not decode item 1"],
    "while_handling": [CAUSE, "During handling of the above", "a lookup while handling it"],
    "from_none": ["RuntimeError: said alone"],
    "noted": ["RuntimeError: with a note\ninput was the third of the batch"],
    "str_fails": ["raise DecodeError(item)", "DecodeError: <exception str() failed>"],
}
if sys.version_info >= (3, 11):  # (ExceptionGroup and notes are 3.11's)
    CASES["grouped"] = ["ExceptionGroup: 2 files failed", "+---------------- 2", CAUSE]
else:
    del CASES["noted"]


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tb") / "chained_errors.py"
    path.write_text(textwrap.dedent(PIPELINE))
    return path


@pytest.mark.parametrize("workers", [0, 1])
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_error_shows_what_python_would(
    pipeline: Path, tmp_path: Path, name: str, workers: int
) -> None:
    with pytest.raises(snap.PipelineError) as caught:
        snap.create(f"{pipeline}:{name}", str(tmp_path / "s"), inputs=[1], workers=workers)
    said = str(caught.value)
    assert said.startswith(f"the pipeline raised {'ExceptionGroup' if name == 'grouped' else ''}")
    assert "on input 1 (task 0)" in said, said
    for part in CASES[name]:
        assert part in said, (part, said)
    assert "snapshot_cli" not in said and "a bug in snap" not in said, said
    if name == "from_none":
        assert "ValueError" not in said and "During handling" not in said, said
    assert not (tmp_path / "s" / "manifest.json").exists()
