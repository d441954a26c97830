"""An unknown keyword of a public call is a TypeError, as Python's, that names the keyword
meant: a typo of one, another library's name for it, or the call that takes it."""

from __future__ import annotations

import inspect
import re
import sys
import traceback
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli import keywords

keywords.unknown_message("open", "x", frozenset())  # imports every checked call's module
CALLS = dict(keywords._TAKES)  # every checked call -> the keywords it takes


def test_every_public_call_with_options_is_checked() -> None:
    assert set(CALLS) == {
        "create", "open", "mix", "Snapshot.loader", "Snapshot.sample", "Snapshot.head",
        "Mixture.loader", "Loader.to_torch", "Loader.to_jax", "Loader.to_tf",
    }  # fmt: skip
    # signatures stay visible to help() and editors
    assert "shuffle" in inspect.signature(snap.Snapshot.loader).parameters
    assert list(inspect.signature(snap.open).parameters) == ["url", "storage_options", "version"]


def typos(word: str) -> st.SearchStrategy[str]:
    """``word`` with two neighbouring letters swapped, or one letter dropped or doubled."""
    i = st.integers(0, len(word) - 2)
    swap = i.map(lambda k: word[:k] + word[k + 1] + word[k] + word[k + 2 :])
    drop = i.map(lambda k: word[:k] + word[k + 1 :])
    double = i.map(lambda k: word[: k + 1] + word[k] + word[k + 1 :])
    return st.one_of(swap, drop, double).filter(lambda w: w != word)


@given(data=st.data(), call=st.sampled_from(sorted(CALLS)))
def test_a_typo_of_a_keyword_is_answered_with_it(data: st.DataObject, call: str) -> None:
    takes = CALLS[call]
    long = sorted(k for k in takes if len(k) >= 5)
    if not long:
        return
    word = data.draw(st.sampled_from(long))
    typo = data.draw(typos(word))
    if typo in takes:
        return
    message = keywords.unknown_message(call, typo, takes)
    assert message.startswith(f"{call}() got an unexpected keyword argument {typo!r}; ")
    meant = re.findall(r"'(\w+)'", message.split("did you mean ", 1)[-1].split("?")[0])
    assert word in meant, message


@pytest.mark.parametrize(("name", "wanted"), sorted(keywords.ELSEWHERE.items()))
def test_another_librarys_name_is_answered_with_snaps(name: str, wanted: tuple[str, ...]) -> None:
    calls = [c for c, takes in CALLS.items() if set(wanted) & takes and name not in takes]
    assert calls, f"no checked call takes {wanted}: the entry for {name!r} is dead"
    for call in calls:
        message = keywords.unknown_message(call, name, CALLS[call])
        assert [w for w in wanted if f"'{w}'" in message] == [w for w in wanted if w in CALLS[call]]


def test_the_calls_raise_it(tmp_path: Path) -> None:
    snap.create(lambda: iter([{"x": 1}]), str(tmp_path / "s"), workers=0)
    s = snap.open(tmp_path / "s")
    cases = [
        (lambda: s.loader(shufle=False), "Snapshot.loader() got an unexpected keyword "
         "argument 'shufle'; did you mean 'shuffle'?"),
        (lambda: s.loader(num_workers=2), "did you mean 'num_parallel_reads' or 'processes'?"),
        (lambda: snap.open(tmp_path / "s", batch_size=8),
         "open() got an unexpected keyword argument 'batch_size'; it is an option of "
         "Snapshot.loader()"),
        (lambda: snap.create(lambda: iter([]), str(tmp_path / "t"), num_proc=4),
         "did you mean 'workers'?"),
        (lambda: snap.snapshot(lambda: iter([]), str(tmp_path / "u"), shard_sise="1MiB"),
         "did you mean 'shard_size'?"),
        (lambda: s.loader().to_torch(devcie="cpu"), "Loader.to_torch() got an unexpected "
         "keyword argument 'devcie'; did you mean 'device'?"),
        (lambda: s.head(m=2), "Snapshot.head() got an unexpected keyword argument 'm'; "
         "it takes columns, n"),
    ]  # fmt: skip
    for call, words in cases:
        with pytest.raises(TypeError) as caught:
            call()
        assert words in str(caught.value)
    assert not (tmp_path / "t").exists() and not (tmp_path / "u").exists()
    assert [b["x"].tolist() for b in s.loader(batch_size=1, shuffle=False)] == [[1]]


# --- another library's methods and attributes -------------------------------------------

TABLES = [
    (snap.Snapshot, "s", keywords.DATASET_INSTEAD),
    (snap.Loader, "loader", keywords.LOADER_INSTEAD),
]
LOADER_KEYWORDS = CALLS["Snapshot.loader"]


@pytest.mark.parametrize(("cls", "var", "table"), TABLES, ids=["Snapshot", "Loader"])
def test_every_other_librarys_attribute_is_answered_with_what_snap_has(
    cls: type, var: str, table: dict[str, str]
) -> None:
    for name, advice in table.items():
        assert not hasattr(cls, name), f"{cls.__name__} has {name!r}: its entry is never shown"
        # each method, attribute and keyword the advice names is one snap has
        for obj, attr in re.findall(r"\b(s|loader|snap)\.(\w+)", advice):
            owner = {"s": snap.Snapshot, "loader": snap.Loader, "snap": snap}[obj]
            assert hasattr(owner, attr), f"{name!r}: {obj}.{attr} does not exist"
        for keyword in re.findall(r"(\w+)=", advice):
            assert keyword in LOADER_KEYWORDS, f"{name!r}: loader() takes no {keyword}="


def test_the_objects_answer_with_it(tmp_path: Path) -> None:
    import copy
    import pickle

    snap.create(lambda: iter([{"x": 1}]), str(tmp_path / "s"), workers=0)
    s = snap.open(tmp_path / "s")
    loader = s.loader(1)
    for obj, table in ((s, keywords.DATASET_INSTEAD), (loader, keywords.LOADER_INSTEAD)):
        for name, advice in table.items():
            with pytest.raises(AttributeError) as caught:
                getattr(obj, name)
            said = f"'{type(obj).__name__}' object has no attribute '{name}'; {advice}"
            assert str(caught.value) == said
        # a typo of snap's own name: Python's "Did you mean" needs name and obj
        with pytest.raises(AttributeError) as caught:
            obj.laoder  # noqa: B018
        assert caught.value.name == "laoder" and caught.value.obj is obj
        assert not hasattr(obj, "_private") and not hasattr(obj, "anything_else")
    for index in (lambda: s[0], lambda: list(s), lambda: next(iter(s))):
        with pytest.raises(TypeError, match=r"not indexed or iterated itself: s\.loader"):
            index()
    assert copy.copy(s).url == pickle.loads(pickle.dumps(s)).url == s.url
    assert [b["x"].tolist() for b in loader] == [[1]]


# --- another library's top-level names, tried on the package ---------------------------


def test_every_package_name_is_answered_with_what_snap_has() -> None:
    import importlib

    from snapshot_cli.cli import cli

    takes = set().union(*CALLS.values())
    for name, advice in keywords.PACKAGE_INSTEAD.items():
        assert name not in dir(snap), f"snap has {name!r}: its entry is never shown"
        for attr in re.findall(r"\bsnap\.(\w+)", advice):
            assert hasattr(snap, attr), f"{name!r}: snap.{attr} does not exist"
        for dotted in re.findall(r"\bsnapshot_cli(?:\.\w+)+", advice):
            module, _, attr = dotted.rpartition(".")
            try:
                assert hasattr(importlib.import_module(module), attr), f"{name!r}: {dotted}"
            except ImportError as err:  # (make test-oldest has no torch: it says what to install)
                assert "needs torch: pip install torch" in str(err), f"{name!r}: {dotted}: {err}"
        for command in re.findall(r"\bsnap ([a-z]+) URL", advice):
            assert command in cli.commands, f"{name!r}: snap {command} is not a command"
        for keyword in re.findall(r"(\w+)=", advice):
            assert keyword in takes, f"{name!r}: no call takes {keyword}="


@given(name=st.sampled_from(sorted(keywords.PACKAGE_INSTEAD)))
def test_the_package_answers_with_it(name: str) -> None:
    with pytest.raises(AttributeError) as caught:
        getattr(snap, name)
    said = f"module 'snapshot_cli' has no attribute '{name}'; {keywords.PACKAGE_INSTEAD[name]}"
    assert str(caught.value) == said


@given(data=st.data(), public=st.sampled_from(sorted(n for n in snap.__all__ if n[0] != "_")))
def test_a_typo_of_a_package_name_is_answered_with_it(data: st.DataObject, public: str) -> None:
    typo = data.draw(typos(public))
    if hasattr(snap, typo) or typo in keywords.PACKAGE_INSTEAD or len(public) < 4:
        return  # another real name, or too short to tell apart
    with pytest.raises(AttributeError) as caught:
        getattr(snap, typo)
    assert str(caught.value).startswith(f"module 'snapshot_cli' has no attribute '{typo}'")
    meant = re.search(r"; did you mean '(\w+)'\?$", str(caught.value))
    assert meant and meant[1].lower() == public.lower()  # (Snapshot's typos may be snapshot's)


def test_an_unknown_package_name_is_pythons_error() -> None:
    with pytest.raises(AttributeError) as caught:
        snap.zzz_nothing_like_it  # noqa: B018
    assert str(caught.value) == "module 'snapshot_cli' has no attribute 'zzz_nothing_like_it'"
    assert caught.value.name == "zzz_nothing_like_it" and caught.value.obj is snap
    assert not hasattr(snap, "_private")


@pytest.mark.parametrize("typo", ["batch", "snapshots", "opne", "craete"])
def test_a_typo_of_a_package_name_is_answered_once_however_python_prints_it(
    typo: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``snap.batch`` printed "did you mean 'Batch'?. Did you mean: 'Batch'?": the lookup set
    the error's ``name`` and ``obj``, from which Python's printers add their own."""
    with pytest.raises(AttributeError) as caught:
        getattr(snap, typo)
    err = caught.value
    sys.__excepthook__(type(err), err, err.__traceback__)  # (the interpreter's, in C)
    for text in (capsys.readouterr().err, "".join(traceback.format_exception(err))):
        assert text.lower().count("did you mean") == 1, text
    assert err.name == typo
