"""A function sent by value counts the globals it reads, not every name its code holds.

A probe found that ``co_names`` (the names a function's code holds) has its attribute names
too: the ``mean`` of ``arr.mean()``, the ``items`` of ``d.items()``. Each was looked up as a
global, so an unrelated global of that name (``items = load_list()`` in the same notebook)
became part of the function's identity: "different pipeline code", and a snapshot that
could never grow. A snapshot made while that was so stays up to date.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snapshot_cli.writers import codescan, shipping
from tests.writers.test_hash_seed import python

# Every way a function's code holds a name that is no global of it: an attribute loaded, a
# method called, an attribute stored, one deleted, a keyword's name, an imported module's
# attribute, in the function itself or in a lambda, a comprehension or a class nested in it.
SOURCE = """
import os
import numpy as np

SCALE = 2

def prep(d):
    arr = np.arange(3, dtype=np.float64)
    class Box:
        size = SCALE
        def area(self):
            return self.size * self.size
    out = {k: v for k, v in d.items()}
    key = lambda o: o.name
    arr.flags.writeable = False
    ns = type("NS", (), {})()
    ns.tmp = 1
    del ns.tmp
    yield {"m": arr.mean(), "p": os.path.sep, "l": float(np.log(2.0)), "n": len(out),
           "a": Box().area(), "k": key is not None, "s": SCALE}
"""
ATTRIBUTES = ["items", "mean", "log", "path", "sep", "flags", "writeable", "tmp", "name",
              "size", "area", "arange", "float64"]  # fmt: skip


def prep_of(extra: str = "") -> Any:
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(textwrap.dedent(SOURCE) + extra, "<cell>", "exec"), namespace)
    return namespace["prep"]


def test_the_global_names_are_those_the_code_reads_as_globals() -> None:
    names = codescan.global_names(prep_of().__code__)
    assert {"np", "os", "SCALE", "len", "float", "type"} <= names  # (SCALE: in a class body)
    assert not names & set(ATTRIBUTES)


@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from(ATTRIBUTES),
    value=st.one_of(st.integers(), st.text(max_size=4), st.lists(st.integers(), max_size=3)),
)
def test_a_global_named_as_an_attribute_the_code_uses_is_not_its_code(
    name: str, value: Any
) -> None:
    base = shipping.identity(prep_of())
    assert shipping.identity(prep_of(f"\n{name} = {value!r}\n")) == base
    assert shipping.identity(prep_of("\nSCALE = 3\n")) != base  # a global it reads still counts


def test_only_such_a_global_asks_for_the_identity_an_older_snap_gave() -> None:
    assert shipping.identities(prep_of())[1] == ""
    code, earlier, _, _ = shipping.identities(prep_of("\nitems = [1, 2]\n"))
    assert earlier == shipping.identity(prep_of("\nitems = [1, 2]\n"), before=True) != code
    assert earlier != shipping.identity(prep_of("\nitems = [1, 3]\n"), before=True)


RUN = """
import json, sys
import snapshot_cli as snap
from snapshot_cli.writers import commit, pipeline, shipping

def f(item):
    for k, v in item.items():
        yield {"k": k, "v": v}

data = [{"a": i, "b": 2 * i} for i in range(int(sys.argv[3]))]
items = data if sys.argv[4] == "items" else None  # the probe's notebook: named as a method
if sys.argv[2] == "before":  # snap before 2026-12-07: such a global counted
    pipeline.shipping.identities = lambda fn: (shipping.identity(fn, before=True), "", {}, {})
    commit.IDENTITY_SCHEME = 4
info = snap.create(f, sys.argv[1], inputs=data, workers=0)
json.dump({"reused": info.reused, "version": info.version, "added": info.inputs_added,
           "records": info.num_records}, sys.stdout)
"""


def run(tmp_path: Path, when: str, n: int, items: str = "items") -> dict[str, Any]:
    out = python(RUN, tmp_path, "1", str(tmp_path / "s"), when, str(n), items)
    return dict(json.loads(out))


def test_a_notebooks_list_named_as_a_method_lets_the_snapshot_grow(tmp_path: Path) -> None:
    """The probe's case: `items = data`, a function calling `.items()`; the second create
    said "different pipeline code" (every new item forced --overwrite)."""
    assert run(tmp_path, "now", 20) == {"reused": False, "version": 1, "added": 20,
                                        "records": 40}  # fmt: skip
    assert run(tmp_path, "now", 25) == {"reused": False, "version": 2, "added": 5,
                                        "records": 50}  # fmt: skip
    assert run(tmp_path, "now", 25, items="none")["reused"] is True


def test_a_snapshot_made_while_such_a_global_counted_stays_up_to_date(tmp_path: Path) -> None:
    """Its hash then is recognised while that global is as it was; once it changed, the
    hash then cannot be made again (the old value is gone): the refusal says so."""
    assert run(tmp_path, "before", 20)["version"] == 1
    assert run(tmp_path, "now", 20)["reused"] is True
    said = "a global of your script or notebook named as an attribute the code uses"
    with pytest.raises(AssertionError, match=said + ".* pass overwrite=True once"):
        run(tmp_path, "now", 25)
