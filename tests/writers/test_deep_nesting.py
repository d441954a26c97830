"""A column nested past what Arrow's IPC files hold is refused, naming it, before any shard
is written: a struct or list nested 64 deep failed mid-shard with "Max recursion depth
reached" said as a storage fault ("check the URL and the storage, then run the same command
again", which fails the same way), and nested Python lists 64 deep as "a bug in snap" (numpy's
64 dimensions). A scale probe's finding."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli import arrays
from snapshot_cli.cli import cli
from snapshot_cli.errors import RecordError

WRAPS: dict[str, Callable[[pa.DataType], pa.DataType]] = {
    "list": pa.list_,
    "large_list": pa.large_list,
    "fixed_size_list": lambda t: pa.list_(t, 2),
    "list_view": pa.list_view,
    "struct": lambda t: pa.struct([("a", pa.int8()), ("b", t)]),
    "map": lambda t: pa.map_(pa.int32(), t),
    "union": lambda t: pa.dense_union([pa.field("a", pa.int8()), pa.field("b", t)]),
}
LEAVES = [pa.int64(), pa.string(), pa.dictionary(pa.int32(), pa.string()), pa.float32()]


def _writes(t: pa.DataType) -> bool:
    """Whether Arrow's IPC file writer takes a column of type ``t``."""
    batch = pa.record_batch([pa.nulls(0, t)], names=["c"])
    with pa.ipc.new_file(io.BytesIO(), batch.schema) as writer:
        try:
            writer.write_batch(batch)
        except pa.ArrowInvalid as err:
            assert "recursion" in str(err).lower()
            return False
    return True


@settings(max_examples=60)
@given(
    wraps=st.lists(st.sampled_from(sorted(WRAPS)), min_size=25, max_size=70),
    leaf=st.sampled_from(LEAVES),
)
def test_too_deep_says_what_arrow_refuses(wraps: list[str], leaf: pa.DataType) -> None:
    t = leaf
    for name in wraps:
        t = WRAPS[name](t)
    problem = arrays.too_deep(pa.schema([("c", t)]))
    assert (problem is None) == _writes(t), (wraps, problem)
    if problem:
        assert "'c'" in problem and "flatter" in problem


def _nested_table(kind: str, depth: int) -> Callable[[], Any]:
    def pipeline() -> Any:
        arr: pa.Array = pa.array(range(4), pa.int64())
        for i in range(depth):
            if kind == "struct":
                arr = pa.StructArray.from_arrays([arr], names=[f"l{i}"])
            else:
                arr = pa.ListArray.from_arrays(pa.array(range(5), pa.int32()), arr)
        yield pa.table({"deep": arr})

    return pipeline


@pytest.mark.parametrize("kind", ["struct", "list"])
def test_a_table_nested_too_deep_is_refused_and_leaves_nothing(tmp_path: Path, kind: str) -> None:
    out = tmp_path / "s"
    with pytest.raises(RecordError, match=r"column 'deep' holds 64 levels .* more than the 63"):
        snap.create(_nested_table(kind, 64), str(out), workers=0)
    assert not (out / "manifest.json").exists()  # (an unfinished run, which no reader reads)
    info = snap.create(_nested_table(kind, 63), str(out), workers=0, overwrite=True)
    assert info.num_records == 4
    batch = next(iter(snap.open(str(out)).loader(batch_size=4, epochs=1)))
    assert list(batch) == ["deep"] and len(batch["deep"]) == 4


def test_records_of_lists_nested_too_deep_are_refused_in_the_cli(tmp_path: Path) -> None:
    (tmp_path / "p.py").write_text(
        "def f(path, depth: int):\n"
        "    v = 1\n"
        "    for _ in range(depth):\n"
        "        v = [v]\n"
        "    return [{'deep': v}]\n"
    )
    (tmp_path / "in.bin").write_bytes(b"x")
    args = [str(tmp_path / "p.py:f"), str(tmp_path / "s"), "--input", str(tmp_path / "in.bin")]
    res = CliRunner().invoke(cli, ["create", *args, "--param", "depth=64", "--quiet"])
    assert res.exit_code == 1, res.output
    assert "column 'deep' has an array of 64 dimensions" in res.output
    assert "bug" not in res.output and "Traceback" not in res.output
    assert not (tmp_path / "s" / "manifest.json").exists()
    res = CliRunner().invoke(
        cli, ["create", *args, "--param", "depth=63", "--quiet", "--overwrite"]
    )
    assert res.exit_code == 0, res.output


@pytest.mark.parametrize("depth", [100, 400, 2000])
@pytest.mark.parametrize("kind", ["struct", "list"])
@pytest.mark.parametrize("yielded", ["table", "Batch"])
def test_any_depth_past_the_limit_is_the_same_refusal(
    tmp_path: Path, kind: str, depth: int, yielded: str
) -> None:
    """From 400 levels, checking the depth (and the steps before it) passed Python's
    recursion limit: a RecursionError, "a bug in snap", where this refusal was meant."""
    table = _nested_table(kind, depth)

    def pipeline() -> Any:
        for t in table():
            yield t if yielded == "table" else snap.Batch(deep=t.column("deep").chunk(0))

    out = tmp_path / "s"
    with pytest.raises(RecordError, match=rf"column 'deep' holds {depth} levels .* than the 63"):
        snap.create(pipeline, str(out), workers=0)
    assert not (out / "manifest.json").exists()


def test_a_worker_process_refuses_any_depth_too(tmp_path: Path) -> None:
    (tmp_path / "p.py").write_text(
        "import pyarrow as pa\n"
        "def f(path, depth: int):\n"
        "    v = {'x': 1}\n"
        "    for _ in range(depth):\n"
        "        v = {'s': v}\n"
        "    yield pa.table({'deep': pa.array([v])})\n"
    )
    (tmp_path / "in.bin").write_bytes(b"x")
    args = [str(tmp_path / "p.py:f"), str(tmp_path / "s"), "--input", str(tmp_path / "in.bin")]
    res = CliRunner().invoke(cli, ["create", *args, "--param", "depth=500", "--workers", "1"])
    assert res.exit_code == 1, res.output
    assert "column 'deep' holds 501 levels of lists, structs or maps" in res.output
    assert "bug" not in res.output and "Traceback" not in res.output
