"""``--param KEY=VALUE`` is read as the type the pipeline annotates KEY with (bool, int,
float, str, or one of them or None, as objects or as the text ``from __future__ import
annotations`` leaves): ``--param augment=False`` was the string "False", true in an ``if``.
Text that does not fit is refused, naming the parameter and its annotation."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Optional

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli.errors import OptionError
from snapshot_cli.writers.items import as_items
from snapshot_cli.writers.params import FALSE, TRUE, annotated, check_params, parse_params

KINDS = [bool, int, float, str]


def function_annotated(kind: type, optional: bool, form: str) -> Any:
    """A pipeline whose parameter ``k`` is annotated ``kind`` (or None): as the object, as
    the text future annotations leave, ``Optional[...]`` or ``X | None``."""
    name = kind.__name__
    text = {"plain": name, "or_none": f"{name} | None", "none_or": f"None | {name}",
            "optional": f"Optional[{name}]", "typing": f"typing.Optional[{name}]"}  # fmt: skip
    if form == "object":
        annotation: Any = Optional[kind] if optional else kind  # noqa: UP045 (the object form)
    elif form == "annotated":  # (Typer's and pydantic's: its text was taken as it was)
        inner = Annotated[kind, "doc"]
        annotation = Optional[inner] if optional else inner  # noqa: UP045
    elif form == "annotated_text":
        annotation = f"Annotated[{text['or_none' if optional else 'plain']}, 'doc']"
    else:
        annotation = text["or_none" if optional else "plain"] if form == "text" else text[form]

    def f(path: str, *, k: Any = None) -> Any:
        yield {"k": k}

    f.__annotations__ = {"k": annotation}
    return f


FORMS = st.sampled_from(["object", "text", "annotated", "annotated_text"])


@given(kind=st.sampled_from(KINDS), optional=st.booleans(), form=FORMS, raw=st.text(max_size=30))
@example(kind=int, optional=False, form="object", raw="0\x1f")
@example(kind=float, optional=False, form="text", raw="1.5\x1c")
@example(kind=float, optional=False, form="object", raw="2")
@example(kind=float, optional=True, form="text", raw=" -7 ")
@example(kind=float, optional=False, form="object", raw="1" * 400)
def test_any_text_is_the_annotated_type_or_a_clear_error(
    kind: type, optional: bool, form: str, raw: str
) -> None:
    f = function_annotated(kind, optional, form)
    assert annotated(f, "k") == (kind, optional)
    try:
        value = parse_params([f"k={raw}"], f)["k"]
    except OptionError as err:
        said = str(err)
        assert said.startswith(f"--param k={raw[:60]!r}: ")
        assert f"annotates k as {kind.__name__}" in said or "no NaN or infinity" in said
        assert kind is not str and not (optional and raw.strip() in ("None", "null"))
        return
    json.dumps(value, allow_nan=False)  # the manifest can keep it
    if optional and raw.strip() in ("None", "null"):
        assert value is None
    elif kind is str:
        assert value == raw  # the text as given, whatever JSON would make of it
    elif kind is bool:
        assert value is (raw.strip().lower() in TRUE) and raw.strip().lower() in TRUE | FALSE
    # (the text is read stripped as str.strip() does: its whitespace includes \x1c-\x1f,
    # which int() and float() do not take, so '0\x1f' is 0; found by Hypothesis in CI)
    elif kind is int:
        assert type(value) is int and value == int(raw.strip())
    else:  # (an integer too: 2 is 2.0, as the function's annotation says; it was the int 2)
        assert type(value) is float and math.isfinite(value) and value == float(raw.strip())


@given(
    value=st.one_of(
        st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), st.text()
    ),
    optional=st.booleans(),
    form=FORMS,
)
def test_a_value_written_as_text_is_read_back(value: Any, optional: bool, form: str) -> None:
    f = function_annotated(type(value), optional, form)
    raw = json.dumps(value) if isinstance(value, bool) else str(value)  # (true, 64, 0.5, abc)
    if optional and raw.strip() in ("None", "null"):  # the text that means None there
        assert parse_params([f"k={raw}"], f) == {"k": None}
    else:
        assert parse_params([f"k={raw}"], f) == {"k": value}


@pytest.mark.parametrize(
    "annotation", ["list[int]", "int | str", "dict", "Path", "np.ndarray", "'int'x", list, Any]
)
def test_other_annotations_are_read_as_json(annotation: Any) -> None:
    def f(path: str, *, k: Any = None) -> Any:
        yield {"k": k}

    f.__annotations__ = {"k": annotation}
    assert annotated(f, "k") is None
    assert parse_params(["k=[1, 2]", "j=False"], f) == {"k": [1, 2], "j": False}
    assert parse_params(["k=None", "j=abc"], f) == {"k": None, "j": "abc"}


def test_snap_create_reads_params_as_annotated(tmp_path: Path) -> None:
    (tmp_path / "pipe.py").write_text(
        "from __future__ import annotations\n"
        "def f(path: str, *, augment: bool = True, size: int = 1, name: str = 'x'):\n"
        "    yield {'v': repr((augment, size, name))}\n"
    )
    (tmp_path / "in.txt").write_text("x")
    out = tmp_path / "s"

    def create(*params: str) -> subprocess.CompletedProcess[str]:
        args = [
            "create",
            f"{tmp_path / 'pipe.py'}:f",
            str(out),
            "--input",
            str(tmp_path / "in.txt"),
        ]
        for p in params:
            args += ["--param", p]
        return subprocess.run(
            [sys.executable, "-m", "snapshot_cli", *args, "--overwrite", "--quiet"],
            capture_output=True, text=True, cwd=tmp_path,
        )  # fmt: skip

    done = create("augment=False", "size=64", "name=007")
    assert done.returncode == 0, done.stderr
    import snapshot_cli as snap

    assert snap.open(out).head(1)[0]["v"] == "(False, 64, '007')"
    refused = create("augment=maybe")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert refused.stderr.strip() == (
        "snap: error: --param augment='maybe': f() annotates augment as bool; give true or false"
    )


def test_an_integer_given_to_a_float_is_that_float(tmp_path: Path) -> None:
    """``--param scale=2`` to ``scale: float`` was the int 2: ``np.full(3, scale)`` stored an
    int64 column, and ``scale=2.0`` was "different params". A snapshot made with the int
    (``params=`` in Python is taken as given) says why its params differ now."""
    (tmp_path / "pipe.py").write_text(
        "import numpy as np\ndef f(*, scale: float = 1.0):\n    yield {'x': np.full(3, scale)}\n"
    )
    spec, out = f"{tmp_path / 'pipe.py'}:f", tmp_path / "s"

    def create(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "snapshot_cli", "create", spec, str(out), "--quiet", *args]
        return subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, check=False)

    snap.create(spec, str(out), params={"scale": 2}, workers=0, progress=False)
    assert snap.open(str(out)).head(1)[0]["x"].dtype == np.int64
    refused = create("--param", "scale=2")
    assert refused.returncode == 1, refused.stderr
    assert "params (scale: 2 then, 2.0 now) (--param" in refused.stderr, refused.stderr
    assert "a float-annotated KEY as a float since 2026-12-04: scale;" in refused.stderr
    for value in ("scale=2", "scale=2.0"):
        done = create("--param", value, "--overwrite")
        assert done.returncode == 0, done.stderr
        assert snap.open(str(out)).head(1)[0]["x"].dtype == np.float64
        assert snap.open(str(out)).manifest.pipeline["params"] == {"scale": 2.0}


class ConfigMapping(Mapping[str, Any]):
    """A configuration library's mapping (OmegaConf's DictConfig is one): not a dict."""

    def __init__(self, items: dict[str, Any]) -> None:
        self._items = items

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


class ConfigList(Sequence[Any]):
    """A configuration library's list (OmegaConf's ListConfig): not a list."""

    def __init__(self, items: list[Any]) -> None:
        self._items = items

    def __getitem__(self, index: Any) -> Any:
        return self._items[index]

    def __len__(self) -> int:
        return len(self._items)


TEXT = st.characters(codec="utf-8", exclude_characters="\x00")  # (what a manifest keeps)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(TEXT, max_size=8),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(TEXT, max_size=6), inner, max_size=4),
    max_leaves=12,
)  # fmt: skip


def wrapped(value: Any, data: st.DataObject) -> Any:
    """``value`` with its lists and dicts each, at random, a config library's container."""
    if isinstance(value, list):
        items = [wrapped(v, data) for v in value]
        return ConfigList(items) if data.draw(st.booleans()) else items
    if isinstance(value, dict):
        mapping = {k: wrapped(v, data) for k, v in value.items()}
        return ConfigMapping(mapping) if data.draw(st.booleans()) else mapping
    return value


@given(params=st.dictionaries(st.from_regex(r"[a-z_]{1,8}", fullmatch=True), JSON, max_size=4),
       data=st.data())  # fmt: skip
def test_params_of_a_config_library_are_their_json(params: dict[str, Any], data: Any) -> None:
    """``params=cfg.data`` from Hydra (OmegaConf's DictConfig, with ListConfig values) was
    refused: "Object of type ListConfig is not JSON serializable". Any Mapping and Sequence
    is taken as the dict or list it holds."""
    inner = wrapped(params, data)
    given_params = (
        ConfigMapping(inner) if isinstance(inner, dict) and data.draw(st.booleans()) else inner
    )
    assert check_params(given_params) == params


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("a\x00b", "'params.x' holds text with a NUL character"),
        ({"y": json.loads("[" * 31 + "1" + "]" * 31)}, "nested more than 32"),  # (1: at 34)
    ],
)
def test_params_no_manifest_could_keep_are_refused_before_any_work(
    tmp_path: Path, value: object, said: str
) -> None:
    """A NUL in a param (a ``find -print0`` separator) or params nested past the manifest's
    limit were committed, and then no reader would open the snapshot (the repair advice,
    ``--overwrite``, wrote them again)."""
    out = tmp_path / "s"
    with pytest.raises(snap.OptionError, match="cannot be kept in the snapshot's manifest") as e:
        snap.create(lambda i, x=None: [{"i": i}], str(out), inputs=[1], workers=0,
                    params={"x": value}, progress=False)  # fmt: skip
    assert said in str(e.value) and not out.exists(), str(e.value)
    deepest_read_before = json.loads("[" * 31 + "]" * 31)  # (pipeline.params.x: level 2)
    snap.create(lambda i, x=None: [{"i": i}], str(out), inputs=[1], workers=0,
                params={"x": deepest_read_before}, progress=False)  # fmt: skip
    assert snap.open(str(out)).num_records == 1  # (an empty list 32 levels in: as before)


def with_a_key_that_is_not_text(value: Any, data: st.DataObject) -> tuple[Any, str]:
    """``value`` (JSON) with one dict somewhere in it given a key of another type, and the
    path to that dict (as errors spell it, from ``x``)."""
    dicts: list[tuple[dict[str, Any], str]] = []

    def walk(v: Any, at: str) -> None:
        if isinstance(v, dict):
            dicts.append((v, at))
            for k, inner in v.items():
                walk(inner, f"{at}[{k!r}]")
        elif isinstance(v, list):
            for i, inner in enumerate(v):
                walk(inner, f"{at}[{i}]")

    walk(value, "x")
    target, at = data.draw(st.sampled_from(dicts))
    finite = st.floats(allow_nan=False, allow_infinity=False)  # (inf: no JSON, refused so)
    key = data.draw(st.integers() | st.booleans() | st.none() | finite)
    target[key] = data.draw(JSON)
    return value, f"{at} has the key {key!r} (type {type(key).__name__})"


@given(value=st.dictionaries(st.text(TEXT, max_size=6), JSON, max_size=3), data=st.data())
def test_a_key_that_is_not_text_is_refused_at_any_depth(value: Any, data: Any) -> None:
    """JSON keys are text: ``params={"names": {0: "cat"}}`` reached the function as
    ``{"0": "cat"}`` (a KeyError: 0 in it) and ``{1: "a", "1": "b"}`` kept one value,
    silently; so did an item's. Refused in params, in inputs and in inputs_from's items,
    naming where; with text keys only, each is taken as given."""
    assert check_params({"x": value}) == {"x": value}
    assert as_items([value]) == [value]
    value, said = with_a_key_that_is_not_text(value, data)
    with pytest.raises(OptionError) as caught:
        check_params({"x": value})
    assert str(caught.value).startswith(said.replace("x", "params['x']", 1)), caught.value
    with pytest.raises(OptionError) as caught:
        as_items([0, value])
    assert str(caught.value).startswith(said.replace("x", "inputs[1]", 1)), caught.value
    with pytest.raises(OptionError) as caught:
        as_items([value], source="items.py:items")
    assert str(caught.value).startswith(said.replace("x", "it", 1)), caught.value
    assert str(caught.value).endswith("(item 0 of what inputs_from='items.py:items' returned)")


def test_a_class_map_with_int_keys_is_refused_before_any_work(tmp_path: Path) -> None:
    def label(i: int, *, names: dict[Any, str]) -> Iterator[dict[str, Any]]:
        yield {"label": i, "name": names[i]}

    with pytest.raises(OptionError, match=r"params\['names'\] has the key 0 \(type int\)"):
        snap.create(label, str(tmp_path / "s"), inputs=[0, 1], params={"names": {0: "cat"}},
                    workers=0, progress=False)  # fmt: skip
    assert not (tmp_path / "s").exists()


def test_a_params_value_holding_itself_is_refused_not_walked_for_ever() -> None:
    looped: list[Any] = [1]
    looped.append(looped)
    with pytest.raises(OptionError, match=r"params\['x'\] must be JSON .*Circular reference"):
        check_params({"x": looped})


def test_params_that_differ_are_named_and_cut_short(tmp_path: Path) -> None:
    """Both whole dicts were said: a vocabulary of 10**6 ids made a 15 MB message (a scale
    probe). Now the keys that differ, each value cut short, and the default note only where
    a key was given on one side."""
    out = str(tmp_path / "s")

    def f(*, vocab: list[int], lr: float = 0.1, **other: int) -> Any:
        yield {"n": len(vocab)}

    snap.create(f, out, params={"vocab": list(range(100_000)), "lr": 0.1}, workers=0)
    with pytest.raises(snap.SnapshotExistsError) as err:
        snap.create(f, out, params={"vocab": list(range(100_001)), "lr": 0.1}, workers=0)
    text = str(err.value)
    assert len(text) < 2_000, len(text)
    head = "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 1..."
    then, now = len(repr(list(range(100_000)))), len(repr(list(range(100_001))))
    assert (
        f"params (vocab: {head} ({then:,} characters) then, {head} ({now:,} characters) now)"
        in text
    )
    assert "lr:" not in text and "a default given counts" not in text
    many = {f"k{i}": i for i in range(8)}
    with pytest.raises(
        snap.SnapshotExistsError,
        match=r"k0: not given then, 0 now; k1: .*; and 3 more\)",
    ):  # (**other has no defaults: no "a default given counts")
        snap.create(f, out, params={"vocab": list(range(100_000)), "lr": 0.1, **many}, workers=0)
    snap.create(f, out, params={"vocab": list(range(100_000))}, overwrite=True, workers=0)
    with pytest.raises(snap.SnapshotExistsError, match=r"\(lr: not given then, 0.1 now: a defau"):
        snap.create(f, out, params={"vocab": list(range(100_000)), "lr": 0.1}, workers=0)
    with pytest.raises(snap.SnapshotExistsError, match=r"\(lr: not given then, 0.2 now\);"):
        snap.create(f, out, params={"vocab": list(range(100_000)), "lr": 0.2}, workers=0)


@pytest.mark.parametrize(
    ("value", "hint"),
    [
        (Path("/data/vocab.txt"), "(pass its text, str(path): the function receives JSON values)"),
        (np.arange(3), "(pass a list, arr.tolist(): the function receives JSON values)"),
    ],
)
def test_a_param_that_is_not_json_says_what_to_pass(
    tmp_path: Path, value: object, hint: str
) -> None:
    """A Path, as ``inputs=`` takes one, was refused as "not JSON serializable" alone (an
    array said what to pass; found by a probe)."""
    with pytest.raises(snap.OptionError) as err:
        snap.create(lambda i, vocab=None: [{"i": i}], str(tmp_path / "s"), inputs=[1],
                    workers=0, params={"vocab": value}, progress=False)  # fmt: skip
    assert str(err.value).startswith("params['vocab'] must be JSON") and hint in str(err.value)
