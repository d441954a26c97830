"""Manifests edited by hand or written by a buggy or hostile writer: at every key, any JSON
value (wrong types, huge integers, NUL, lone surrogates, deep nesting, path tricks) gives
``inspect``, ``head`` and ``verify`` an answer — exit 0, or exit 1 with a ManifestError or
CorruptShardError message — and never a traceback."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli.cli import cli
from snapshot_cli.errors import ManifestError
from snapshot_cli.manifest import Manifest


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    @snap.ragged("t")
    def preprocess(i: int) -> Any:
        yield {"x": np.full(2, i, np.float32), "t": np.arange(i % 3 + 1, dtype=np.int32),
               "s": "a"}  # fmt: skip

    out = tmp_path_factory.mktemp("manifests") / "snap"
    snap.create(preprocess, str(out), inputs=[0, 1, 2], workers=0, inputs_per_task=1)
    return out, json.loads((out / "manifest.json").read_text())


def key_paths(d: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if prefix:
        yield prefix
    if isinstance(d, dict):
        for k, v in d.items():
            yield from key_paths(v, (*prefix, k))
    elif isinstance(d, list):
        for i, v in enumerate(d[:2]):
            yield from key_paths(v, (*prefix, i))


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


odd_values = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6)
    | st.sampled_from(["\x00", "\ud800", "../../etc/passwd", "/abs", "a/../../b", "x" * 5000,
                       10**60, -(10**60), 2**64, [], {}, [[]], {"": None}, nested(200)])
    | st.lists(st.integers(), max_size=3) | st.dictionaries(st.text(max_size=3), st.integers(),
                                                             max_size=2)
)  # fmt: skip


def test_every_key_is_checked(made: tuple[Path, dict[str, Any]]) -> None:
    """The top-level keys: missing, or of another JSON type, is a ManifestError naming it."""
    _, base = made
    for key in base:
        for value in (None, "x", 1, [], {}):
            if key in ("format", "format_version", "extra") or type(value) is type(base[key]):
                continue
            doc = {**base, key: value}
            with pytest.raises(ManifestError, match=repr(key).replace("'", ".")):
                Manifest.from_json(json.dumps(doc).encode())


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), value=odd_values)
def test_any_value_at_any_key_is_an_answer(
    made: tuple[Path, dict[str, Any]], tmp_path_factory: pytest.TempPathFactory, data: Any,
    value: Any,
) -> None:  # fmt: skip
    out, base = made
    where = data.draw(st.sampled_from(list(key_paths(base))))
    doc = json.loads(json.dumps(base))
    parent = doc
    for k in where[:-1]:
        parent = parent[k]
    parent[where[-1]] = value
    text = json.dumps(doc).encode("utf-8", "surrogatepass")
    try:
        Manifest.from_json(text)
    except ManifestError as err:  # the answer for a bad manifest, with what to do
        assert "put back the newest copy" in str(err) or "upgrade snap" in str(err), err
    (out / "manifest.json").write_bytes(text)
    try:
        for args in (["inspect", str(out)], ["head", str(out)], ["verify", str(out)]):
            res = CliRunner().invoke(cli, args)
            assert res.exit_code in (0, 1), (where, value, args, res.output)
            assert res.exception is None or isinstance(res.exception, SystemExit), (
                where, value, args, res.exception,
            )  # fmt: skip
    finally:
        (out / "manifest.json").write_text(json.dumps(base))
