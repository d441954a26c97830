"""A pipeline's files edited while ``snap create`` runs (a teammate's ``git pull``): its worker
processes imported the new file for the tasks after it, under the fingerprint computed at the
start, and the snapshot, "up to date" with the old code, mixed records of both. A worker now
checks the files it imported against those the create fingerprinted, and the create stops."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import snapshot_cli as snap

PIPE = """import numpy as np
SCALE = 1


def f(n):
    if n == 0:  # (the edit, made by the run itself: no sleep to wait for it)
        with open(__file__) as src:
            text = src.read()
        with open(__file__, "w") as dst:
            dst.write(text.replace("SCALE = 1\\n", "SCALE = 1000\\n"))
    return [{"n": np.int64(n), "v": np.int64(SCALE)}]
"""


@pytest.mark.parametrize("how", ["file", "helper module"])
def test_an_edit_while_the_create_runs_stops_it_and_mixes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    monkeypatch.chdir(tmp_path)
    if how == "file":
        Path("prep.py").write_text(PIPE)
        edited = Path("prep.py")
    else:  # (the function's file stays; a module of the user's it uses is edited)
        Path("helper.py").write_text(PIPE)
        Path("prep.py").write_text("import helper\n\n\ndef f(n):\n    return helper.f(n)\n")
        edited = Path("helper.py")
    original = edited.read_text()
    with pytest.raises(
        snap.PipelineLoadError, match=r"(prep|helper)\.py changed while this create ran"
    ):
        snap.create("prep.py:f", "out", inputs=list(range(20)), workers=2, inputs_per_task=1)
    assert not Path("out/manifest.json").exists()  # (nothing committed)
    edited.write_text(original.replace("if n == 0:", "if False:"))  # (as it was, no edit)
    with pytest.raises(snap.SnapError):  # (not the code the tasks done were made by)
        snap.open("out")
    snap.create("prep.py:f", "out", inputs=list(range(20)), workers=2, inputs_per_task=1)
    s = snap.open("out")
    values = np.concatenate([b["v"] for b in s.loader(20)])
    assert sorted(np.concatenate([b["n"] for b in s.loader(20)]).tolist()) == list(range(20))
    assert set(values.tolist()) == {1}
