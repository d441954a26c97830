"""A URL with a slash missing (``gs:/bucket/x``, ``s3:bucket/x``) is a local path to fsspec:
``snap create`` wrote the snapshot to a local directory named ``gs:``, exit 0, and only the
path in its "created:" line told (a probe). Every remote scheme, in every form of the typo:
a create refuses it before writing anything, naming the URL meant; a reader's "does not
exist" and an input's "matched no files" name it too. A local directory of that name made
on purpose is still written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli import literal
from snapshot_cli.writers import inputs as inputs_mod

SCHEMES = ["gs", "gcs", "s3", "s3a", "az", "abfs", "abfss", "hdfs", "webhdfs", "memory"]


def records() -> Any:
    yield {"x": np.int64(1)}


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("form", ["{s}:/bkt/snap", "{s}:bkt/snap", "./{s}:/bkt/snap"])
def test_a_create_to_a_mistyped_url_writes_nothing_and_names_the_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scheme: str, form: str
) -> None:
    monkeypatch.chdir(tmp_path)
    output = form.format(s=scheme)
    with pytest.raises(snap.OptionError, match=rf"did you mean {scheme}://bkt/snap\?"):
        snap.create(records, output, workers=0)
    assert list(tmp_path.iterdir()) == []  # nothing made
    with pytest.raises(snap.SnapError, match=rf"did you mean {scheme}://bkt/snap\?"):
        snap.open(output)
    with pytest.raises(snap.OptionError, match=rf"did you mean {scheme}://bkt/\*\.bin\?"):
        inputs_mod.resolve(form.format(s=scheme).replace("snap", "*.bin"), None, None)


def test_a_local_directory_of_that_name_made_first_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gs:" / "bkt" / "snap").mkdir(parents=True)  # ("make it first")
    snap.create(records, "gs:/bkt/snap", workers=0)
    assert snap.open("gs:/bkt/snap").num_records == 1


PARTS = ["gs:", "s3:bkt", "data", "a:b", "memory:", "", ".", "hdfs:nn", "c:", "x"]


@given(st.lists(st.sampled_from(PARTS), min_size=1, max_size=5))
def test_a_url_is_meant_where_a_part_is_a_remote_scheme_and_a_colon(parts: list[str]) -> None:
    path = "/".join(parts)
    first = next((p for p in parts if p.partition(":")[0] in SCHEMES and ":" in p), None)
    meant = literal.meant_url(path)
    if first is None:
        assert meant is None
        return
    at = parts.index(first)
    rest = [p for p in [first.partition(":")[2], *parts[at + 1 :]] if p]
    assert meant == (f"{first.partition(':')[0]}://{'/'.join(rest)}" if rest else None)
