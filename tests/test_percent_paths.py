"""A path given with a URL's %XX escapes (``file:///data/my%20runs/s``, as a browser or an
editor copies it) is not decoded: snap reads paths as given (a directory may be named
``100%25``). It said only "does not exist: check the path" (a probe); where the decoded path
exists, the error now names it. A name that holds ``%`` itself is still read as given.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import numpy as np
import pytest

import snapshot_cli as snap
from tests.conftest import snap_subprocess


def _made(where: Path) -> Path:
    snap.create(lambda: iter([snap.Batch(id=np.arange(4))]), str(where), workers=0)
    return where


@pytest.mark.parametrize("name", ["my runs", "données", "a#b", "50% off", "tab\tname"])
@pytest.mark.parametrize("form", ["path", "file URL"])
def test_an_escaped_path_names_the_path_meant(tmp_path: Path, name: str, form: str) -> None:
    real = _made(tmp_path / name / "s")
    escaped = quote(str(real))
    given = escaped if form == "path" else f"file://{escaped}"
    with pytest.raises(snap.ManifestError) as caught:
        snap.open(given)
    said = str(caught.value)
    assert f"did you mean {real}? (a URL's %XX escapes are not decoded" in said, said
    assert snap.open(real).num_records == 4  # (the path meant, as given there)


def test_a_name_holding_a_percent_is_read_as_given(tmp_path: Path) -> None:
    literal = _made(tmp_path / "100%25" / "s")  # (decoded, it would be "100%": not there)
    assert snap.open(literal).num_records == 4
    res = snap_subprocess("inspect", str(tmp_path / "100%" / "s"))
    assert res.returncode == 1 and "did you mean" not in res.stderr, res.stderr
    res = snap_subprocess("inspect", quote(str(tmp_path / "my runs" / "s")))
    assert res.returncode == 1 and "did you mean" not in res.stderr  # (nothing there either)
