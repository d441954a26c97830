"""The pure functions behind the inspection commands: spread, histogram, bars, value summaries,
and the ``snap inspect --json`` document of a real manifest."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import snapshot_cli as snap
from snapshot_cli import render, report
from snapshot_cli.manifest import Manifest
from snapshot_cli.progress import human_bytes

# --- spread ---------------------------------------------------------------------------------


def test_spread_odd_count() -> None:
    values = [9, 1, 5, 3, 7]
    assert report.spread(values) == {
        "min": min(values),
        "median": sorted(values)[len(values) // 2],
        "max": max(values),
        "mean": round(sum(values) / len(values), 2),
    }


def test_spread_even_count_takes_the_mean_of_the_middle_two() -> None:
    values = [10, 1, 4, 7]
    out = report.spread(values)
    ordered = sorted(values)
    assert out["median"] == (ordered[1] + ordered[2]) / 2 == statistics.median(values)
    assert (out["min"], out["max"]) == (1, 10)
    assert out["mean"] == round(sum(values) / 4, 2)


def test_spread_of_nothing_is_zeros() -> None:
    assert report.spread([]) == {"min": 0, "median": 0, "max": 0, "mean": 0.0}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-(10**9), 10**9), min_size=1, max_size=60))
def test_spread_agrees_with_statistics(values: list[int]) -> None:
    out = report.spread(values)
    assert out["min"] == min(values) and out["max"] == max(values)
    assert out["median"] == statistics.median(values)
    assert out["min"] <= out["median"] <= out["max"]
    assert out["mean"] == pytest.approx(statistics.fmean(values), abs=0.006)


# --- histogram and bars ---------------------------------------------------------------------


def check_histogram(values: list[int], hist: list[dict[str, Any]], bins: int) -> None:
    """Every invariant the docstring promises, derived from ``values`` themselves."""
    assert 1 <= len(hist) <= bins
    assert hist[0]["low"] == min(values) and hist[-1]["high"] == max(values)
    for before, after in zip(hist, hist[1:], strict=False):
        assert after["low"] == before["high"] + 1  # contiguous, no gap, no overlap
    widths = [b["high"] - b["low"] + 1 for b in hist]
    assert all(w >= 1 for w in widths)
    assert len(set(widths[:-1])) <= 1 and widths[-1] <= widths[0]  # equal width, last clipped
    for b in hist:
        assert b["count"] == sum(b["low"] <= v <= b["high"] for v in values)
    assert sum(b["count"] for b in hist) == len(values)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(-5000, 5000), min_size=1, max_size=80)
    | st.lists(st.integers(0, 10**12), min_size=1, max_size=20),
    st.integers(1, 16),
)
def test_histogram_bins_cover_min_to_max_and_count_everything(values: list[int], bins: int) -> None:
    hist = report.histogram(values, bins=bins)
    check_histogram(values, hist, bins)
    if max(values) - min(values) + 1 <= bins:  # narrow: one bin per value
        assert [(b["low"], b["high"]) for b in hist] == [
            (v, v) for v in range(min(values), max(values) + 1)
        ]


def test_histogram_default_bins() -> None:
    values = list(range(0, 1000, 7))
    hist = report.histogram(values)
    check_histogram(values, hist, report.HISTOGRAM_BINS)
    assert len(hist) == report.HISTOGRAM_BINS  # a wide range uses them all


def test_histogram_narrow_range_has_one_bin_per_value() -> None:
    values = [3, 5, 5, 4, 3, 3]
    hist = report.histogram(values)
    assert hist == [{"low": v, "high": v, "count": values.count(v)} for v in range(min(values), 6)]


def test_histogram_single_value_and_empty() -> None:
    assert report.histogram([42]) == [{"low": 42, "high": 42, "count": 1}]
    assert report.histogram([7, 7, 7]) == [{"low": 7, "high": 7, "count": 3}]
    assert report.histogram([]) == []


def test_bars_scale_the_fullest_bin_to_the_width() -> None:
    values = [1] * 10 + [2] * 5 + [4]
    hist = report.histogram(values)
    drawn = report.bars(hist, width=20)
    assert [b for b, _ in drawn] == hist
    lengths = {b["low"]: len(bar) for b, bar in drawn}
    assert lengths[1] == 20 and lengths[2] == round(20 * 5 / 10) and lengths[3] == 0
    assert lengths[4] == round(20 * 1 / 10)
    assert all(set(bar) <= {"#"} for _, bar in drawn)
    assert report.bars([]) == []
    assert report.bars([{"low": 0, "high": 0, "count": 0}]) == [
        ({"low": 0, "high": 0, "count": 0}, "")
    ]


# --- summarise_value ------------------------------------------------------------------------


def test_summarise_uint8_image() -> None:
    img = np.random.default_rng(0).integers(0, 256, (3, 8, 8)).astype(np.uint8)
    out = report.summarise_value(img)
    assert out["dtype"] == "uint8" and out["shape"] == [3, 8, 8]
    assert out["min"] == int(img.min()) and out["max"] == int(img.max())
    assert type(out["min"]) is int and type(out["max"]) is int  # plain Python, JSON-ready
    assert out["mean"] == pytest.approx(float(img.mean()), rel=1e-9)
    assert out["first"] == img.reshape(-1)[: report.FIRST_VALUES].tolist()
    assert len(out["first"]) == report.FIRST_VALUES
    json.dumps(out, allow_nan=False)


def test_summarise_float_array_with_nan_has_a_finite_mean() -> None:
    x = np.array([1.5, np.nan, 2.5, 4.0], np.float32)
    out = report.summarise_value(x)
    assert out["dtype"] == "float32" and out["shape"] == [4]
    assert math.isfinite(out["mean"])
    assert out["mean"] == pytest.approx(float(np.nanmean(x)))
    assert out["first"][0] == 1.5  # NaN not as JSON's string, which text "nan" is too
    assert out["first"][1] == {"type": "float", "value": "nan"}
    json.dumps(out, allow_nan=False)  # valid JSON: no NaN literal anywhere


@settings(max_examples=300, deadline=None)
@given(
    hnp.arrays(
        st.sampled_from([np.float16, np.float32, np.float64, np.int64, np.uint8]),
        st.integers(1, 40),
        elements={"allow_nan": False, "allow_infinity": False},
    )
)
@example(np.array([-288230376271720672, 4, 4, 4, 288230376151711968, *[4] * 31]))  # (CI)
def test_a_mean_is_within_min_and_max_and_to_ten_digits(values: np.ndarray) -> None:
    """The mean was rounded to 6 decimals: three 1e-09s had a mean of 0, below their min.
    Within the min and max as shown: a float16's or float32's in its own shortest digits
    (1.906 for a float16 1.90625), so to that type's precision at worst."""
    out = report.summarise_value(values)
    assert float(out["min"]) <= out["mean"] <= float(out["max"]), out  # (as floats: int64s)
    exact = float(sum(Fraction(float(v)) for v in values) / len(values))
    if values.dtype.kind == "f" and values.dtype.itemsize < 8:  # (one step of the type)
        with np.errstate(over="ignore"):  # (the type's largest value: its step is inf)
            step = float(np.spacing(values.dtype.type(abs(exact))))
        assert abs(out["mean"] - exact) <= step, (out, exact)
    else:
        assert out["mean"] == pytest.approx(exact, rel=1e-6, abs=1e-300), (out, exact)


@given(
    st.floats(width=32, allow_nan=False, allow_infinity=False).map(np.float32)
    | st.floats(width=16, allow_nan=False, allow_infinity=False).map(np.float16)
)
def test_a_float32_or_float16_is_shown_in_its_own_shortest_digits(value: np.floating) -> None:
    """A float32 0.1 was 0.10000000149011612 in `snap head`, alone and in an array's
    statistics; its own digits give back the same value in its type."""
    alone = report.summarise_value(value)
    assert value.dtype.type(alone) == value and alone == float(str(value))
    shown = report.summarise_value(np.array([value, value]))
    assert shown["min"] == shown["max"] == shown["mean"] == shown["first"][0] == alone


def test_summarise_all_nan_array_has_no_mean() -> None:
    out = report.summarise_value(np.full(3, np.nan))
    assert out["mean"] is None
    json.dumps(out, allow_nan=False)


def test_summarise_bool_array() -> None:
    x = np.array([True, False, True, True])
    out = report.summarise_value(x)
    assert out["dtype"] == "bool" and out["shape"] == [4]
    assert (out["min"], out["max"]) == (False, True)
    assert out["mean"] == x.mean()
    assert out["first"] == x.tolist() and all(type(v) is bool for v in out["first"])


def test_summarise_string_array_has_no_statistics() -> None:
    x = np.array(["alpha", "be", "c"])
    out = report.summarise_value(x)
    assert out["dtype"] == str(x.dtype) and out["shape"] == [3]
    assert "min" not in out and "max" not in out and "mean" not in out
    assert out["first"] == ["alpha", "be", "c"] and all(type(v) is str for v in out["first"])


def test_summarise_empty_array() -> None:
    out = report.summarise_value(np.zeros((0, 4), np.float64))
    assert out == {"dtype": "float64", "shape": [0, 4], "min": None, "max": None, "mean": None,
                   "non_finite": 0, "first": []}  # fmt: skip


def test_summarise_long_str_is_truncated_with_type_and_length() -> None:
    text = "".join(chr(ord("a") + i % 26) for i in range(report.TEXT_LIMIT * 3))
    out = report.summarise_value(text)
    assert out["type"] == "str" and out["length"] == len(text)
    assert len(out["start"]) == report.TEXT_LIMIT
    assert out["start"].endswith("…") and text.startswith(out["start"][:-1])


def test_summarise_short_str_stays_itself() -> None:
    text = "x" * report.TEXT_LIMIT  # the limit itself is still short
    assert report.summarise_value(text) == text
    assert report.summarise_value("") == ""


def test_summarise_bytes_is_shown_as_hex_with_length() -> None:
    data = bytes(range(200))
    out = report.summarise_value(data)
    assert out["type"] == "bytes" and out["length"] == len(data)
    assert bytes.fromhex(out["start"]) == data[: len(out["start"]) // 2]
    assert len(out["start"]) // 2 < len(data)  # truncated
    small = report.summarise_value(b"\x00\xff")
    assert small == {"type": "bytes", "length": 2, "start": "00ff"}


@pytest.mark.parametrize(
    ("value", "expected", "kind"),
    [
        (np.int64(7), 7, int),
        (np.uint8(255), 255, int),
        (np.float32(1.5), 1.5, float),
        (np.bool_(True), True, bool),
        (3, 3, int),
        (2.25, 2.25, float),
    ],
)
def test_summarise_scalar_becomes_a_python_value(value: Any, expected: Any, kind: type) -> None:
    out = report.summarise_value(value)
    assert out == expected and type(out) is kind


def test_summarise_non_finite_scalars_become_float_objects() -> None:
    assert report.summarise_value(np.float64("nan")) == {"type": "float", "value": "nan"}
    assert report.summarise_value(np.float32("-inf")) == {"type": "float", "value": "-inf"}


# --- format_summary -------------------------------------------------------------------------

SHAPES: dict[str, Any] = {
    "uint8 image": np.arange(48, dtype=np.uint8).reshape(3, 4, 4),
    "short int array": np.array([4, 5, 6], np.int32),
    "float array with nan": np.array([0.5, np.nan, 2.0], np.float32),
    "float array with inf": np.array([1.0, np.inf, -np.inf], np.float64),
    "bool array": np.array([True, False]),
    "string array": np.array(["a", "bcd"]),
    "empty array": np.zeros(0, np.int16),
    "long str": "long text " * 20,
    "short str": "short",
    "bytes": b"\x01\x02" * 40,
    "short bytes": b"ab",
    "int": np.int64(12),
    "float": np.float32(0.25),
    "nan scalar": np.float64("nan"),
}


@pytest.mark.parametrize("name", list(SHAPES))
def test_format_summary_is_one_line(name: str) -> None:
    value = SHAPES[name]
    summary = report.summarise_value(value)
    line = report.format_summary(summary)
    assert isinstance(line, str) and line and "\n" not in line
    if isinstance(value, np.ndarray):
        shape = ",".join(str(s) for s in value.shape)
        assert line.startswith(f"{value.dtype}[{shape}]")
        assert line.endswith(", …]") == (value.size > report.FIRST_VALUES)
    elif isinstance(value, bytes):
        assert line.startswith(f"bytes[{len(value)}] {value[:24].hex()}")
        assert line.endswith("…") == (len(value) > 24)
    elif isinstance(value, str) and len(value) > report.TEXT_LIMIT:
        assert line.startswith(f"str[{len(value)}] '")
    elif isinstance(value, np.floating) and not np.isfinite(value):
        assert line == str(float(value))  # nan, not 'nan' (text is quoted)
    else:
        assert line == repr(summary)


def test_format_summary_shows_statistics_of_numbers() -> None:
    x = np.array([2, 8, 5, 1, 9, 3, 7], np.int32)
    line = report.format_summary(report.summarise_value(x))
    assert f"min {x.min()} max {x.max()} mean {x.mean():.4g}" in line
    assert "[2, 8, 5, 1, 9, 3, …]" in line
    ids = np.array([573, 49_540, 2**40 + 1], np.int64)  # token ids, hashes: every digit
    assert f"min 573 max {2**40 + 1} mean" in report.format_summary(report.summarise_value(ids))
    floats = report.format_summary(report.summarise_value(np.array([0.5, 1234.5678])))
    assert "min 0.5 max 1235 mean" in floats
    strings = report.format_summary(report.summarise_value(np.array(["p", "q"])))
    assert "min" not in strings and "['p', 'q']" in strings  # (text quoted)


def test_format_summary_of_all_nan_says_na() -> None:
    line = report.format_summary(report.summarise_value(np.full(2, np.nan, np.float32)))
    assert line.startswith("float32[2]") and "mean n/a" in line and "[nan, nan]" in line


# --- inspect_doc ----------------------------------------------------------------------------

TASKS = 6  # input k yields k + 1 records: shards of 1..6 records, a real spread


@snap.ragged("tokens")
def make_records(k: int, *, scale: int = 1) -> Iterator[dict[str, Any]]:
    start = k * (k + 1) // 2
    for j in range(k + 1):
        i = start + j
        yield {
            "img": np.full((3, 4, 4), i * scale % 256, np.uint8),
            "label": i,
            "tokens": np.arange(i % 4 + 1, dtype=np.int32),
            "text": f"record {i}",
        }


@pytest.fixture(scope="module")
def manifest_and_url(tmp_path_factory: pytest.TempPathFactory) -> tuple[Manifest, str]:
    path = tmp_path_factory.mktemp("report") / "snap"
    snap.create(make_records, path, workers=0, inputs_from=lambda: list(range(TASKS)),
                inputs_per_task=1, params={"scale": 3})  # fmt: skip
    s = snap.open(path)
    return s.manifest, s.url


def test_inspect_doc_has_the_documented_keys(manifest_and_url: tuple[Manifest, str]) -> None:
    m, url = manifest_and_url
    doc = report.inspect_doc(url, m)
    for key in (
        "path", "finished", "fingerprint", "fingerprint_parts", "pipeline", "params",
        "num_inputs", "created", "created_by", "run", "num_records", "num_shards",
        "num_record_batches", "bytes", "uncompressed_bytes", "compression_ratio",
        "compression", "schema", "balance",
    ):  # fmt: skip
        assert key in doc, key
    assert {"records", "bytes", "records_histogram"} <= doc["balance"].keys()
    assert "shards" not in doc
    json.dumps(doc, allow_nan=False)  # the --json document is plain JSON


def test_inspect_doc_agrees_with_the_manifest(manifest_and_url: tuple[Manifest, str]) -> None:
    m, url = manifest_and_url
    doc = report.inspect_doc(url, m)
    records = [s.records for s in m.shards]
    sizes = [s.bytes for s in m.shards]
    assert doc["path"] == url and doc["finished"] is True
    assert doc["fingerprint"] == m.fingerprint and doc["run"] == m.run
    assert doc["num_records"] == sum(records) == sum(k + 1 for k in range(TASKS))
    assert doc["num_shards"] == len(m.shards) == TASKS
    assert doc["num_record_batches"] == sum(s.record_batches for s in m.shards)
    assert doc["bytes"] == sum(sizes) and doc["uncompressed_bytes"] == sum(
        s.uncompressed_bytes for s in m.shards
    )
    assert doc["compression_ratio"] == pytest.approx(
        doc["uncompressed_bytes"] / doc["bytes"], abs=1e-4
    )
    assert doc["compression"] == m.compression == {"codec": "zstd", "level": 1}
    assert doc["params"] == {"scale": 3} and doc["num_inputs"] == TASKS
    assert doc["schema"] == [
        {"name": "img", "kind": "tensor", "dtype": "uint8", "shape": [3, 4, 4]},
        {"name": "label", "kind": "scalar", "dtype": "int64", "shape": []},
        {"name": "tokens", "kind": "ragged", "dtype": "int32", "shape": [None]},
        {"name": "text", "kind": "string", "dtype": "string", "shape": []},
    ]
    assert [c["name"] for c in doc["schema"]] == m.schema.names
    bal = doc["balance"]
    assert bal["records"] == {
        "min": min(records),
        "median": statistics.median(records),
        "max": max(records),
        "mean": round(statistics.fmean(records), 2),
    }
    assert bal["bytes"]["min"] == min(sizes) and bal["bytes"]["max"] == max(sizes)
    assert bal["bytes"]["median"] == statistics.median(sizes)
    hist = bal["records_histogram"]
    check_histogram(records, hist, report.HISTOGRAM_BINS)
    assert sum(b["count"] for b in hist) == doc["num_shards"]


def test_inspect_doc_lists_shards_on_request(manifest_and_url: tuple[Manifest, str]) -> None:
    m, url = manifest_and_url
    doc = report.inspect_doc(url, m, shards=True)
    assert doc["shards"] == [s.to_json() for s in m.shards]
    assert [s["path"] for s in doc["shards"]] == [s.path for s in m.shards]
    assert all(Path(url, s["path"]).is_file() for s in doc["shards"])
    assert sum(s["records"] for s in doc["shards"]) == doc["num_records"]


@given(
    keys=st.lists(st.text(st.characters(codec="ascii", categories=["L"]), min_size=1,
                          max_size=90), min_size=1, max_size=8)
)  # fmt: skip
def test_a_table_aligns_its_values_and_a_long_key_does_not_push_the_others(
    keys: list[str],
) -> None:
    """One 300-character column name pushed every type in `snap inspect` 300 columns right."""
    from snapshot_cli.render import ALIGN_AT_MOST, table

    lines = table([(k, "v") for k in keys])
    short = [k for k in keys if len(k) <= ALIGN_AT_MOST]
    width = max(map(len, short), default=0)
    for key, line in zip(keys, lines, strict=True):
        assert line == key + " " * (max(width, len(key)) - len(key)) + "  v"


# --- create's summary -----------------------------------------------------------------------


def _created(num_shards: int, on_disk: int, values: int) -> list[str]:
    info = {"dry_run": False, "reused": False, "tasks_resumed": 0, "tasks_reused": 0,
            "tasks": num_shards, "path": "/s", "version": 1, "num_records": 8,
            "num_shards": num_shards, "bytes": on_disk, "uncompressed_bytes": values,
            "seconds": 0.5}  # fmt: skip
    return render.created_lines(info)


@given(st.integers(1, 10_000), st.integers(1, 1 << 40), st.integers(0, 1 << 40))
def test_a_snapshot_larger_than_its_values_says_why(shards: int, disk: int, values: int) -> None:
    # a first try on 8 tiny inputs read "7.9 KiB on disk (256 B uncompressed, 0.03x)": a
    # snapshot 31 times its data, and nothing said why
    lines = _created(shards, disk, values)
    assert lines[0].startswith("created: /s (version 1): 8 records in ")
    said = shards > 1 and disk - values > values
    assert len(lines) == 1 + said
    if said:
        per = human_bytes((disk - values) // shards)
        assert f"each shard's schema and footer take ~{per}" in lines[1]
        assert "--inputs-per-task" in lines[1]


texts = st.lists(st.text(max_size=200), min_size=1, max_size=10)


@settings(max_examples=200, deadline=None)
@given(texts)
def test_a_list_of_texts_is_one_line_of_its_items_quoted_and_cut(items: list[str]) -> None:
    """A record's tags were printed raw: a tag holding "\nrecord 99:" printed a record that
    is not there, an escape coloured the terminal, "a, b" read as two tags, "" as nothing,
    and a 5,000-character tag in full."""
    value = np.empty(len(items), object)
    value[:] = items
    line = report.format_summary(report.summarise_value(value))
    assert line.isprintable()  # (no line break, NUL or escape reaches the terminal)
    for item in items[: report.FIRST_VALUES]:
        if len(item) <= report.TEXT_LIMIT:
            assert repr(item) in line
        else:
            assert f"str[{len(item)}] " + repr(item[: report.TEXT_LIMIT - 1] + "…") in line
    assert len(line) < 120 * report.FIRST_VALUES


def test_a_list_of_bytes_is_summarised_item_by_item() -> None:
    value = np.empty(2, object)
    value[:] = [b"ab", b"\x00" * 100]
    line = report.format_summary(report.summarise_value(value))
    assert line == "object[2]  [bytes[2] 6162, bytes[100] " + "00" * 24 + "…]"


def test_a_large_value_is_summarised_without_a_copy_of_it() -> None:
    """``snap head`` of a 1.5 GB value needed 4.9 GB: the summary made a float64 copy (and
    a mask and a copy of the finite values). Now integers need none, floats a chunk's."""
    import tracemalloc

    ints = np.ones(50_000_000, np.uint8)
    floats = np.ones(12_500_000, np.float32)
    floats[::1000] = np.nan
    for value in (ints, floats):
        tracemalloc.start()
        try:
            summary = report.summarise_value(value)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 16 << 20, (value.dtype, peak)  # against 400 and 100 MB of copies
        assert summary["min"] == summary["max"] == 1 and summary["mean"] == 1.0
    assert report.summarise_value(floats)["non_finite"] == 12_500


@settings(max_examples=60, deadline=None)
@given(
    values=hnp.arrays(
        st.sampled_from([np.float16, np.float32, np.float64]),
        st.integers(1, 40),
        elements=st.floats(allow_nan=True, allow_infinity=True, width=16),
    )
)
def test_chunked_statistics_are_those_of_the_finite_values(values: np.ndarray) -> None:
    finite = values[np.isfinite(values)].astype(np.float64)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(report, "STATISTICS_CHUNK", 7)
        got = report.summarise_value(values)
    if finite.size:  # (in the values' type: a float16's or float32's in its own digits)
        kind = values.dtype.type
        assert kind(got["min"]) == finite.min() and kind(got["max"]) == finite.max()
        mean = float(finite.mean())
        step = float(np.spacing(kind(abs(mean)))) if values.dtype.itemsize < 8 else 0.0
        assert got["mean"] == pytest.approx(round(mean, 6), rel=1e-6, abs=max(1e-6, step))
    else:
        assert got["min"] is None and got["max"] is None and got["mean"] is None
    assert got.get("non_finite", 0) == values.size - finite.size


_PIECES = ["a", "é", "e\u0301", "👩\u200d💻", "👍🏽", "❤\ufe0f", "字", " ", "\u0301", "กิ", "कि",
           "1\ufe0f\u20e3", "🇺🇸", "🏴\U000e0067\U000e0062\U000e007f"]  # fmt: skip


@given(st.lists(st.sampled_from(_PIECES), min_size=0, max_size=80))
def test_long_text_is_cut_between_characters_not_inside_one(pieces: list[str]) -> None:
    """`snap head` cut text at 59 code points, between a letter and its accent (`"e\\u0301"`
    showed as a bare `e`) or inside an emoji sequence."""
    from snapshot_cli.report import TEXT_LIMIT, _joins, _truncate_text

    text = "".join(pieces)
    shown = _truncate_text(text)
    if len(text) <= TEXT_LIMIT:
        assert shown == text
        return
    kept = shown.removesuffix("…")
    assert shown.endswith("…") and text.startswith(kept) and len(shown) <= TEXT_LIMIT
    rest = text[len(kept) :]
    whole = not kept.strip("\u0301")  # (nothing but marks: cut where it must)
    assert whole or not (_joins(rest[0]) or kept.endswith("\u200d")), (kept[-3:], rest[:3])
    flags = len(kept) - len(kept.rstrip("".join(map(chr, range(0x1F1E6, 0x1F200)))))
    assert flags % 2 == 0 or not "\U0001f1e6" <= rest[0] <= "\U0001f1ff", kept[-3:]
