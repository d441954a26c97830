"""docs/format.md §3.1: a manifest is UTF-8 JSON without a byte order mark, every string in it
(keys and values, at any depth, of any key: ``extra`` and unknown keys too) is Unicode without
NUL or a lone surrogate, and no top-level value nests more than 32 arrays or objects. snap's
readers refuse anything else with a ManifestError naming the key path."""

from __future__ import annotations

import codecs
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from snapshot_cli.errors import ManifestError
from snapshot_cli.manifest import Manifest
from snapshot_cli.manifest_text import MAX_DEPTH

from .test_manifest import make_manifest

BASE = json.loads(make_manifest().to_json())
BAD_TEXT = {"\x00": "NUL", "\ud800": "not valid Unicode"}


def load(doc: dict[str, Any]) -> Manifest:
    return Manifest.from_json(json.dumps(doc).encode())  # (ensure_ascii: "\\ud800" as JSON has it)


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("bad", sorted(BAD_TEXT))
@pytest.mark.parametrize(
    ("place", "named"),
    [
        (lambda v: {"extra": {"a": v}}, "'extra.a'"),
        (lambda v: {"extra": {"list": [1, {"deep": v}]}}, "'extra.list[1].deep'"),
        (lambda v: {"zz_unknown": v}, "'zz_unknown'"),
        (lambda v: {"extra": {f"k{v}": 1}}, "' in 'extra' holds"),
        (lambda v: {f"k{v}": 1}, "at the top level"),
        (lambda v: {"pipeline": {**BASE["pipeline"], "zz": [v]}}, "'pipeline.zz[0]'"),
    ],
    ids=["extra", "extra, deep", "unknown key", "a key of extra", "a top-level key", "pipeline"],
)
def test_every_string_is_checked_wherever_it_is(place: Any, named: str, bad: str) -> None:
    with pytest.raises(ManifestError, match=BAD_TEXT[bad]) as err:
        load({**BASE, **place(bad)})
    assert named in str(err.value)


def test_nesting_is_bounded_for_every_key() -> None:
    for key in ("extra", "zz_unknown"):
        load({**BASE, key: nested(MAX_DEPTH)})  # 32 arrays: the limit
        with pytest.raises(ManifestError, match=f"'{key}(\\[0\\])*' is nested more than 32"):
            load({**BASE, key: nested(MAX_DEPTH + 1)})
        with pytest.raises(ManifestError, match="nested more than 32"):
            load({**BASE, key: [nested(MAX_DEPTH - 1), [{"a": nested(MAX_DEPTH)}]]})


def strings(value: Any) -> list[str]:
    """Every string in a JSON value, keys too."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (k, *strings(v))]
    return [s for v in value for s in strings(v)] if isinstance(value, list) else []


@given(st.recursive(st.none() | st.integers() | st.text(), lambda c: st.lists(c, max_size=3)
                    | st.dictionaries(st.text(), c, max_size=3), max_leaves=12))  # fmt: skip
def test_extra_is_kept_or_its_text_refused(value: Any) -> None:
    bad = any("\x00" in s or any(0xD800 <= ord(c) <= 0xDFFF for c in s) for s in strings(value))
    try:
        m = load({**BASE, "extra": value})
    except ManifestError as err:
        assert bad, err
    else:
        assert not bad and m.extra == value


def test_a_byte_order_mark_is_refused() -> None:
    data = make_manifest().to_json()
    assert Manifest.from_json(data) == make_manifest()
    with pytest.raises(ManifestError, match="byte order mark .*remove those 3 bytes"):
        Manifest.from_json(codecs.BOM_UTF8 + data)


@pytest.mark.parametrize("codec", ["utf-16", "utf-32", "utf-16-le"])
def test_only_utf8_is_read(codec: str) -> None:
    data = make_manifest().to_json().decode().encode(codec)
    with pytest.raises(ManifestError, match="not valid JSON in UTF-8"):
        Manifest.from_json(data)


def test_text_snap_writes_reads_back() -> None:
    m = make_manifest(extra={"é": ["ü", {"ok": "\u2028 \U0001f600"}]})
    assert Manifest.from_json(m.to_json()).extra == m.extra
