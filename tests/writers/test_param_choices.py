"""``--param KEY=VALUE`` for a KEY annotated ``Literal[...]`` is the allowed value VALUE spells,
or refused with the values allowed: read as JSON, ``split=1`` to ``split: Literal["1", "2"]``
was the int 1, and ``mode=trian`` to ``mode: Literal["train", "eval"]`` ran the whole create."""

from __future__ import annotations

import subprocess
import sys
import typing
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

from hypothesis import assume, example, given
from hypothesis import strategies as st

from snapshot_cli.errors import OptionError
from snapshot_cli.writers.param_choices import FALSE, TRUE, allowed
from snapshot_cli.writers.params import parse_params

VALUE = st.one_of(
    st.text(st.characters(exclude_categories=["Cs"]), max_size=12),
    st.integers(-(10**6), 10**6),
    st.booleans(),
)
VALUES = st.lists(VALUE, min_size=1, max_size=5, unique_by=lambda v: (type(v), v))
FORMS = st.sampled_from(["object", "text", "annotated", "quoted", "typing"])
OPTIONAL = st.sampled_from([None, "optional", "or_none", "none_or"])


def literal_function(values: list[Any], form: str, optional: str | None) -> Any:
    """A pipeline whose ``k`` is annotated ``Literal[*values]`` (or None), as the object or
    as the text ``from __future__ import annotations`` leaves."""
    if form == "object":
        annotation: Any = Literal[tuple(values)]  # type: ignore[valid-type]
        if optional:
            annotation = Optional[annotation]  # noqa: UP045 (the object form)
    else:
        text = f"{'typing.' * (form == 'typing')}Literal[{', '.join(map(repr, values))}]"
        text = {None: text, "optional": f"Optional[{text}]", "or_none": f"{text} | None",
                "none_or": f"None | {text}"}[optional]  # fmt: skip
        annotation = {"annotated": f"Annotated[{text}, Field(doc='a, b')]",
                      "quoted": repr(text)}.get(form, text)  # fmt: skip

    def f(path: str, *, k: Any = None) -> Any:
        yield {"k": k}

    f.__annotations__ = {"k": annotation}
    return f


def spelled(value: Any) -> str:
    return "None" if value is None else str(value)


@given(values=VALUES, form=FORMS, optional=OPTIONAL, raw=st.text(max_size=14))
@example(values=["train", "eval"], form="text", optional=None, raw="trian")
@example(values=["1", "2"], form="object", optional=None, raw="1")
@example(values=[64, 128], form="text", optional="or_none", raw=" null ")
@example(values=[True, "auto"], form="annotated", optional=None, raw="yes")
def test_a_literal_param_is_an_allowed_value_or_a_clear_error(
    values: list[Any], form: str, optional: str | None, raw: str
) -> None:
    f = literal_function(values, form, optional)
    allowed_values = [*values, None] if optional else values
    got = allowed(f, "k")
    assert got is not None  # (in any order: typing caches Optional[Literal[...]] as one of
    # those equal to it, and Literal[False, True] == Literal[True, False])
    assert {(type(v), v) for v in got} == {(type(v), v) for v in allowed_values}
    try:
        value = parse_params([f"k={raw}"], f)["k"]
    except OptionError as err:
        said = str(err)
        assert said.startswith(f"--param k={raw[:60]!r}: f() annotates k as Literal[")
        assert "give one of " in said
        assert raw not in allowed_values and raw.strip() not in allowed_values
        return
    assert any(type(v) is type(value) and v == value for v in allowed_values), value
    if isinstance(value, str):
        assert value in (raw, raw.strip())  # the text as given, whatever JSON makes of it
    elif isinstance(value, bool):
        assert raw.strip().lower() in (TRUE if value else FALSE)
    elif isinstance(value, int):
        assert int(raw.strip()) == value
    else:
        assert raw.strip() in ("None", "null")


@given(values=VALUES, form=FORMS, optional=OPTIONAL)
def test_each_allowed_value_written_as_text_is_read_back(
    values: list[Any], form: str, optional: str | None
) -> None:
    allowed_values = [*values, None] if optional else values
    texts = [spelled(v) for v in allowed_values]
    assume(len(set(texts)) == len(texts))  # (a str "1" beside the int 1: the str is read)
    assume(all(not isinstance(v, str) or v.strip() == v for v in values))
    assume(not {t.lower() for t in texts if isinstance(t, str)} & (TRUE | FALSE) - {"1", "0"})
    f = literal_function(values, form, optional)
    for value in allowed_values:
        got = parse_params([f"k={spelled(value)}"], f)["k"]
        assert type(got) is type(value) and got == value, (value, got)


def test_other_literals_are_left_to_json() -> None:
    """Enum members and bytes have no text a command line gives: such a KEY is read as JSON,
    as before."""

    def f(path: str, *, k: Any = None, j: Any = None) -> None: ...

    f.__annotations__ = {"k": "Literal[Mode.TRAIN, 'x']", "j": Literal[b"x", "y"]}
    assert allowed(f, "k") is None and allowed(f, "j") is None
    assert parse_params(["k=[1]", "j=2"], f) == {"k": [1], "j": 2}
    f.__annotations__ = {"k": typing.Union[Literal["a"], int]}  # noqa: UP007 (the object)
    assert allowed(f, "k") is None


def test_snap_create_refuses_a_value_no_literal_allows(tmp_path: Path) -> None:
    (tmp_path / "pipe.py").write_text(
        "from __future__ import annotations\n"
        "from typing import Literal\n"
        "def f(path: str, *, mode: Literal['train', 'eval'] = 'train',\n"
        "      split: Literal['1', '2'] = '1'):\n"
        "    yield {'v': repr((mode, split))}\n"
    )
    (tmp_path / "in.txt").write_text("x")

    def create(*params: str) -> subprocess.CompletedProcess[str]:
        args = ["create", "pipe.py:f", "s", "--input", "in.txt", "--overwrite", "--quiet"]
        for p in params:
            args += ["--param", p]
        return subprocess.run(
            [sys.executable, "-m", "snapshot_cli", *args], capture_output=True, text=True,
            cwd=tmp_path,
        )  # fmt: skip

    done = create("mode=eval", "split=2")
    assert done.returncode == 0, done.stderr
    import snapshot_cli as snap

    assert snap.open(tmp_path / "s").head(1)[0]["v"] == "('eval', '2')"
    refused = create("mode=trian")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert refused.stderr.strip() == (
        "snap: error: --param mode='trian': f() annotates mode as Literal['train', 'eval']; "
        "give one of train, eval (did you mean train?)"
    )
    assert snap.open(tmp_path / "s").head(1)[0]["v"] == "('eval', '2')"  # (left as it was)


def test_annotated_object_form() -> None:
    def f(path: str, *, k: Annotated[Literal["a", "b c"], "doc"] = "a") -> None: ...

    assert allowed(f, "k") == ("a", "b c")
    try:
        parse_params(["k=b"], f)
    except OptionError as err:
        assert str(err).endswith("give one of a, 'b c'")
    else:
        raise AssertionError("k=b was taken")


def test_a_snapshot_made_with_the_json_value_says_why_its_params_differ(tmp_path: Path) -> None:
    """``--param split=1`` to ``split: Literal["1", "2"]`` was the int 1 before 2026-12-07:
    a snapshot made so (``params=`` in Python is taken as given) says why the str "1" is
    other params now."""
    (tmp_path / "pipe.py").write_text(
        "from typing import Literal\n"
        "def f(*, split: Literal['1', '2'] = '1'):\n    yield {'x': repr(split)}\n"
    )
    spec, out = f"{tmp_path / 'pipe.py'}:f", tmp_path / "s"
    import snapshot_cli as snap

    snap.create(spec, str(out), params={"split": 1}, workers=0, progress=False)
    argv = [sys.executable, "-m", "snapshot_cli", "create", spec, str(out), "--quiet"]
    refused = subprocess.run(
        [*argv, "--param", "split=1"], capture_output=True, text=True, cwd=tmp_path
    )
    assert refused.returncode == 1, refused.stderr
    assert "params (split: 1 then, '1' now)" in refused.stderr, refused.stderr
    assert "Literal-annotated KEY as the value it spells since 2026-12-07, not as JSON: split;" in (
        refused.stderr
    )
