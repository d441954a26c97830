from __future__ import annotations

import base64
import json

import pyarrow as pa
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from snapshot_cli.errors import ManifestError
from snapshot_cli.history import History
from snapshot_cli.manifest import (
    FORMAT_VERSION,
    Manifest,
    ShardEntry,
    changed_parts,
    check_relative_path,
    encode_runs,
    fingerprint,
)
from snapshot_cli.schema import decode_schema, encode_schema


def make_manifest(**over: object) -> Manifest:
    fields = {
        "fingerprint": "f" * 64,
        "fingerprint_parts": {"code": "c", "params": "p", "inputs": "i", "format": 1},
        "pipeline": {"spec": "p.py:f", "function": "f", "params": {}, "inputs": {"count": 0}},
        "schema": pa.schema(
            [("x", pa.int64()), ("img", pa.fixed_shape_tensor(pa.uint8(), [2, 3]))]
        ),
        "compression": {"codec": "zstd", "level": 1},
        "shards": (
            ShardEntry("shards/a-00000-0000.arrow", 10, 2, 1000, 800, "0000abcd", ((5, 2),)),
            ShardEntry("shards/a-00001-0000.arrow", 5, 1, 500, 400, "12345678", ((5, 1),)),
        ),
        "created": "2026-01-01T00:00:00+00:00",
        "created_by": {"snap": "0"},
        "run": "a",
        "history": History(
            3, 2, {"inputs": 4, "bytes": 67108864, "fixed": False},
            {"tasks_reused": 1, "tasks_computed": 1, "inputs_added": 2, "inputs_removed": 0,
             "inputs_changed": 1, "overwrite": False},
            "_versions/v00000003.tasks.json", "0badf00d",
        ),
    }  # fmt: skip
    fields.update(over)
    return Manifest(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("versions", [True, False], ids=["format 3", "format 2"])
def test_round_trip_keeps_everything(versions: bool) -> None:
    m = make_manifest() if versions else make_manifest(history=None)
    back = Manifest.from_json(m.to_json())
    assert back == m
    assert back.schema.field("img").type.shape == [2, 3]
    assert (back.num_records, back.bytes, back.uncompressed_bytes) == (15, 1500, 1200)
    doc = json.loads(m.to_json())
    assert doc["format_version"] == (FORMAT_VERSION if versions else 2)
    assert back.version == (3 if versions else 1)
    assert doc["totals"]["records"] == 15
    assert doc["schema"]["columns"][1] == {
        "name": "img",
        "kind": "tensor",
        "dtype": "uint8",
        "shape": [2, 3],
    }


def _edit(m: Manifest, fn) -> bytes:  # type: ignore[no-untyped-def]
    doc = json.loads(m.to_json())
    fn(doc)
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    "path",
    [
        "/etc/passwd",
        "../x.arrow",
        "shards/../../x",
        "gs://b/x",
        "./shards/../x",
        "shards//x",
        "",
        "a\\b",
    ],
)
def test_shard_paths_must_stay_inside(path: str) -> None:
    data = _edit(make_manifest(), lambda d: d["shards"][0].__setitem__("path", path))
    with pytest.raises(ManifestError, match="relative and stay inside"):
        Manifest.from_json(data)


def test_accepts_plain_relative_paths() -> None:
    check_relative_path("shards/a-00000-0000.arrow", "m")


def test_newer_version_says_upgrade() -> None:
    data = _edit(make_manifest(), lambda d: d.__setitem__("format_version", FORMAT_VERSION + 1))
    with pytest.raises(ManifestError, match="newer snap; upgrade"):
        Manifest.from_json(data)


@pytest.mark.parametrize("version", [3.0, True, "3", None, 0])
def test_a_format_version_that_is_not_one_of_the_integers_is_refused(version: object) -> None:
    """3.0 was read as version 3 (3.0 in (1, 2, 3))."""
    data = _edit(make_manifest(), lambda d: d.__setitem__("format_version", version))
    with pytest.raises(ManifestError, match=r"has format_version .*damaged or not from snap"):
        Manifest.from_json(data)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["totals"].__setitem__("records", 99), "disagree"),
        (lambda d: d["shards"][0].__setitem__("records", -1), "invalid records"),
        (lambda d: d["shards"][0].__setitem__("crc32c", "zz"), "invalid crc32c"),
        (lambda d: d["shards"].append(d["shards"][0]), r"lists the shard 'shards/.*' twice"),
        (lambda d: d["shards"][0].pop("crc32c"), r"shard entry \('shards/.*'\) lacks 'crc32c'"),
        (lambda d: d.pop("run"), "lacks the field 'run'"),
        (lambda d: d["schema"].__setitem__("arrow_ipc_base64", "!!"), "schema cannot be decoded"),
        (lambda d: d.__setitem__("format", "other"), "not a snap manifest"),
    ],
)
def test_invalid_manifests_are_named(edit, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ManifestError, match=message):
        Manifest.from_json(_edit(make_manifest(), edit), where="x/manifest.json")


def test_not_json() -> None:
    with pytest.raises(ManifestError, match="not valid JSON"):
        Manifest.from_json(b"{nope")


def test_fingerprint_changes_with_each_part() -> None:
    base, parts = fingerprint("code", {"a": 1}, [["x", 1, "mtime=1"]])
    assert base == fingerprint("code", {"a": 1}, [["x", 1, "mtime=1"]])[0]
    for args, what in [
        (("code2", {"a": 1}, [["x", 1, "mtime=1"]]), ["pipeline code"]),
        (("code", {"a": 2}, [["x", 1, "mtime=1"]]), ["params"]),
        (("code", {"a": 1}, [["x", 1, "mtime=2"]]), ["inputs"]),
    ]:
        other, other_parts = fingerprint(*args)  # type: ignore[arg-type]
        assert other != base
        assert changed_parts(parts, other_parts) == what


def test_params_order_does_not_matter() -> None:
    assert fingerprint("c", {"a": 1, "b": 2}, [])[0] == fingerprint("c", {"b": 2, "a": 1}, [])[0]


def test_batch_rows_are_run_length_encoded_and_checked() -> None:
    assert encode_runs([5, 5, 5, 2]) == ((5, 3), (2, 1))
    assert encode_runs([]) == ()
    entry = make_manifest().shards[0]
    assert entry.batch_sizes() == [5, 5]
    data = _edit(make_manifest(), lambda d: d["shards"][0].__setitem__("batch_rows", [[4, 2]]))
    with pytest.raises(ManifestError, match="describe 2 record batches of 8 records, not 2 of 10"):
        Manifest.from_json(data)
    data = _edit(make_manifest(), lambda d: d["shards"][0].__setitem__("batch_rows", [[0, 1]]))
    with pytest.raises(ManifestError, match="pairs > 0"):
        Manifest.from_json(data)


_SCHEMA_BYTES = base64.b64decode(encode_schema(make_manifest().schema))


@settings(max_examples=300, deadline=None)
@given(
    data=st.one_of(
        st.binary(max_size=64),
        st.tuples(st.integers(0, len(_SCHEMA_BYTES) - 1), st.binary(min_size=1, max_size=8)).map(
            lambda e: _SCHEMA_BYTES[: e[0]] + e[1] + _SCHEMA_BYTES[e[0] + len(e[1]) :]
        ),
        st.integers(0, len(_SCHEMA_BYTES)).map(lambda n: _SCHEMA_BYTES[:n]),
    )
)
@example(data=b"\xff\xff\xff\xfe\x00\x00\x00\x00")  # OSError: negative continuation token
@example(data=b"\xff\xff\xff\xff\x08\x00\x00\x00abcdefgh")  # OSError: invalid flatbuffers
@example(data=b"")
def test_any_bytes_are_a_schema_or_value_error(data: bytes) -> None:
    """Whatever bytes the manifest's schema field holds, decoding gives a schema or a
    ValueError (which the manifest reports as ManifestError), never OSError or EOFError."""
    text = base64.b64encode(data).decode("ascii")
    try:
        schema = decode_schema(text)
    except ValueError:
        return
    assert isinstance(schema, pa.Schema)


@pytest.mark.parametrize("text", ["not base64!", "////", "/////v////8=", "AAAA"])
def test_a_bad_schema_field_is_a_manifest_error(text: str) -> None:
    doc = json.loads(make_manifest().to_json())
    doc["schema"]["arrow_ipc_base64"] = text
    with pytest.raises(ManifestError, match="Arrow schema cannot be decoded"):
        Manifest.from_json(json.dumps(doc).encode())


@pytest.mark.parametrize("value", [True, None, [3], {"n": 3}])
def test_created_by_value_of_another_type_is_named_with_what_is_accepted(value: object) -> None:
    def put(doc: dict) -> None:  # type: ignore[type-arg]
        doc["created_by"]["identity_scheme"] = value

    with pytest.raises(ManifestError, match="must be a string or a number, not ") as err:
        Manifest.from_json(_edit(make_manifest(), put))
    assert "'created_by.identity_scheme'" in str(err.value)
    assert type(value).__name__ in str(err.value)


@pytest.mark.parametrize("value", ["x", 3, 2.5])
def test_created_by_strings_and_numbers_are_accepted(value: object) -> None:
    def put(doc: dict) -> None:  # type: ignore[type-arg]
        doc["created_by"]["anything"] = value

    assert Manifest.from_json(_edit(make_manifest(), put)).created_by["anything"] == value
