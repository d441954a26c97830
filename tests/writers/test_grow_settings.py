"""What a grow keeps of the snapshot it grows (its codec, its grouping of inputs into tasks)
and what it says when asked for other settings or made under another Python."""

from __future__ import annotations

import platform
from pathlib import Path

import numpy as np
import pytest

import snapshot_cli as snap
from tests.commands.conftest import run


def test_a_grow_keeps_the_snapshots_compression(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A grow with --compression lz4 wrote the new shards in lz4 beside zstd ones, and the
    manifest (so `snap inspect`) said lz4 of them all."""

    def prep(i: int):  # type: ignore[no-untyped-def]
        yield {"i": np.int64(i), "v": np.arange(100, dtype=np.int64)}

    out = str(tmp_path / "s")
    snap.create(prep, out, inputs=[1, 2, 3, 4], workers=0, inputs_per_task=1)
    with caplog.at_level("WARNING", logger="snapshot_cli"):
        info = snap.create(prep, out, inputs=[1, 2, 3, 4, 5], workers=0, inputs_per_task=1,
                           compression="lz4")  # fmt: skip
    assert info.version == 2 and info.tasks_reused == 4
    assert "growing keeps the snapshot's compression, zstd level 1" in caplog.text
    s = snap.open(out)
    assert s.manifest.compression == {"codec": "zstd", "level": 1}
    for entry in s.shards:  # (each file's own buffers: zstd's frames, not lz4's)
        data = Path(out, entry.path).read_bytes()
        assert b"\x28\xb5\x2f\xfd" in data, entry.path
    assert sorted(int(i) for b in s.loader(5) for i in b["i"]) == [1, 2, 3, 4, 5]
    again = snap.create(prep, out, inputs=[1, 2, 3, 4, 5, 6], workers=0, inputs_per_task=1,
                        compression="lz4", overwrite=True)  # fmt: skip
    assert snap.open(out).manifest.compression == {"codec": "lz4", "level": None}
    assert again.tasks_reused == 0


def test_a_grow_or_rerun_not_asking_for_a_codec_keeps_the_snapshots_quietly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A nightly grow of an lz4 snapshot without --compression was told every night that
    "zstd level 1 applies to a snapshot made anew"; asking for one still says it."""

    def prep(i: int):  # type: ignore[no-untyped-def]
        yield {"i": np.int64(i)}

    out = str(tmp_path / "s")
    snap.create(prep, out, inputs=[1, 2], workers=0, inputs_per_task=1, compression="lz4")
    with caplog.at_level("WARNING", logger="snapshot_cli"):
        grown = snap.create(prep, out, inputs=[1, 2, 3], workers=0, inputs_per_task=1)
        again = snap.create(prep, out, inputs=[1, 2, 3], workers=0, inputs_per_task=1)
    assert grown.version == 2 and again.reused and "note:" not in caplog.text
    assert snap.open(out).manifest.compression == {"codec": "lz4", "level": None}
    for codec, level in (("zstd", 1), ("zstd", None), ("ZSTD", None), ("none", None)):
        caplog.clear()
        with caplog.at_level("WARNING", logger="snapshot_cli"):
            snap.create(prep, out, inputs=[1, 2, 3], workers=0, inputs_per_task=1,
                        compression=codec, level=level)  # fmt: skip
        said = "not zstd" if codec.lower() == "zstd" else "not none"
        assert "note: the existing snapshot is compressed with lz4" in caplog.text, codec
        assert said in caplog.text


def test_the_command_line_tells_compression_zstd_given_from_the_default(
    tmp_path: Path,
) -> None:
    """``--compression zstd`` on a grow of an lz4 snapshot kept lz4 without a word: the
    option's default was "zstd" too; left out, nothing is said."""
    raw = tmp_path / "raw"
    raw.mkdir()
    (tmp_path / "p.py").write_text("def f(path):\n    return [{'n': len(open(path).read())}]\n")
    out = str(tmp_path / "s")

    def create(n: int, *extra: str) -> str:
        (raw / f"{n}.txt").write_text("x" * n)
        args = ("create", str(tmp_path / "p.py") + ":f", out, "--input", f"{raw}/*.txt", *extra)
        code, _, stderr = run(*args)
        assert code == 0, stderr
        return stderr

    create(1, "--compression", "lz4")
    assert "note:" not in create(2)
    said = create(3, "--compression", "zstd")
    assert "growing keeps the snapshot's compression, lz4" in said, said
    assert "zstd level 1 applies to a snapshot made anew" in said, said
    assert snap.open(out).manifest.compression == {"codec": "lz4", "level": None}


def test_a_grow_given_another_task_size_keeps_the_snapshots_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``--inputs-per-task 16`` on a grow of one added input computed every task again
    without a word (0 of 63 reused); ``--overwrite`` regroups (and, not given one, chooses
    the task size afresh: a snapshot begun with 50 inputs kept 1 input a task for good)."""

    def prep(i: int):  # type: ignore[no-untyped-def]
        yield {"i": np.int64(i)}

    out = str(tmp_path / "s")
    first = snap.create(prep, out, inputs=list(range(8)), workers=0)  # (1 input a task: few)
    assert first.tasks == 8
    with caplog.at_level("WARNING", logger="snapshot_cli"):
        grown = snap.create(prep, out, inputs=list(range(9)), workers=0, inputs_per_task=4)
    assert grown.tasks_reused >= 7 and grown.tasks - grown.tasks_reused <= 2
    assert (
        "growing keeps the snapshot's grouping of inputs into tasks (content-defined, 1 input a "
        "task on average)" in caplog.text  # (it said "1 inputs")
    )
    assert "inputs_per_task=4 would compute every task again: pass overwrite=True" in caplog.text
    regrouped = snap.create(prep, out, inputs=list(range(9)), workers=0, inputs_per_task=4,
                            overwrite=True)  # fmt: skip
    assert regrouped.tasks == 3 and regrouped.tasks_reused == 0  # (4 + 4 + 1)
    many = list(range(2000))
    snap.create(prep, out, inputs=many, workers=0, inputs_per_task=1, overwrite=True)
    fresh = snap.create(prep, out, inputs=many, workers=0, overwrite=True)
    assert fresh.tasks < 300  # chosen afresh for 2,000 inputs, not 1 a task
    assert sorted(int(b["i"][0]) for b in snap.open(out).loader(1)) == many


def test_a_by_value_code_change_across_python_versions_says_so() -> None:
    """A lambda's fingerprint is its bytecode, which each Python version makes otherwise: a
    snapshot made under another version was "different pipeline code" blaming globals."""
    from snapshot_cli.writers.incremental import said_changed

    older = said_changed(["code"], True, {}, {}, "", "3.9.18")
    assert "made under Python 3.9.18, this is 3." in older and "a def keeps" in older
    same = said_changed(["code"], True, {}, {}, "", platform.python_version())
    assert "made under Python" not in same and "a global" in same
    assert "made under" not in said_changed(["code"], False, {}, {}, "", "3.9.18")  # (a file)
