"""Functions that worker processes cannot import by name: shipped by value, fingerprinted by
their code and the values they use, refused with a message naming what cannot be shipped."""

from __future__ import annotations

import io
import linecache
import os
import pickle
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli.writers import importing, shipping
from snapshot_cli.writers import pipeline as pipeline_mod
from tests.conftest import REPO


def closure_over(value: Any) -> Any:
    def preprocess(item: int) -> Any:
        yield {"x": item, "v": repr(value)}

    return preprocess


def as_main(source: str, **env: Any) -> dict[str, Any]:
    """Run ``source`` as a notebook cell or script would: functions of module ``__main__``."""
    namespace: dict[str, Any] = {"__name__": "__main__", **env}
    exec(compile(textwrap.dedent(source), "<cell>", "exec"), namespace)
    return namespace


def typed(v: Any) -> Any:
    """``v`` with every value's type, so that 1, 1.0 and True differ as they do for snap."""
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, [typed(x) for x in v])
    if isinstance(v, dict):
        return ("dict", [(typed(k), typed(x)) for k, x in v.items()])
    return (type(v).__name__, repr(v))


values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
    | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=12,
)  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(a=values, b=values)
def test_identity_is_the_code_and_the_values_it_closes_over(a: Any, b: Any) -> None:
    assert shipping.identity(closure_over(a)) == shipping.identity(closure_over(a))
    same = typed(a) == typed(b)
    assert (shipping.identity(closure_over(a)) == shipping.identity(closure_over(b))) == same


def test_identity_of_a_masked_array_is_its_data_and_its_mask() -> None:
    """A closure over a numpy masked array: hashed as a plain array's bytes it crashed on the
    masked constant, and two arrays differing in their mask alone had one identity."""
    a = np.ma.masked_array([1.0, 2.0, 3.0], mask=[False, True, False])
    ids = [
        shipping.identity(closure_over(v))
        for v in (a, a.copy(), np.ma.masked_array(a.data, mask=[True, False, False]), a.data,
                  np.ma.masked)
    ]  # fmt: skip
    assert ids[0] == ids[1]
    assert len({ids[0], ids[2], ids[3], ids[4]}) == 4


def test_identity_covers_the_globals_and_helpers_it_uses() -> None:
    source = """
    import numpy as np
    SCALE = {scale}
    TABLE = np.arange(4) * {table}
    def helper(x):
        return x * SCALE
    def preprocess(item):
        yield {{"x": helper(item) + TABLE[item % 4]}}
    UNUSED = {unused}
    """
    ids = {
        key: shipping.identity(as_main(source.format(**dict(key)))["preprocess"])
        for key in [
            (("scale", 2), ("table", 1), ("unused", 0)),
            (("scale", 3), ("table", 1), ("unused", 0)),  # a global the helper uses
            (("scale", 2), ("table", 2), ("unused", 0)),  # an array it uses
            (("scale", 2), ("table", 1), ("unused", 1)),  # a global nothing uses
        ]
    }
    first, scale, table, unused = ids.values()
    assert len({first, scale, table}) == 3
    assert unused == first
    edited = source.replace("x * SCALE", "x * SCALE + 0")
    assert shipping.identity(as_main(edited.format(scale=2, table=1, unused=0))["preprocess"]) != (
        first
    )


def test_identity_is_the_same_in_every_process(tmp_path: Path) -> None:
    """No id(), no hash randomisation: another interpreter computes the same identity."""
    (tmp_path / "mod.py").write_text(
        textwrap.dedent(
            """
            from snapshot_cli.writers import shipping
            class Config:
                def __init__(self):
                    self.vocab = {"tok", "en", "izer", "s"}  # pickled, a set's order varies
            def make():
                words = {"b", "a", "c", "dd"}
                lookup = {"k": [1, 2.5, None], "z": (True, b"x")}
                config = Config()
                def preprocess(item):
                    yield {"x": len(words) + len(lookup) + len(config.vocab) + item}
                return preprocess
            print(shipping.identity(make()))
            """
        )
    )
    got = {
        subprocess.run(
            [sys.executable, str(tmp_path / "mod.py")],
            capture_output=True,
            text=True,
            check=True,
            cwd=REPO,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout  # fmt: skip
        for seed in ("1", "2", "3")
    }
    assert len(got) == 1 and len(got.pop().strip()) == 64


def test_a_main_function_runs_in_worker_processes(tmp_path: Path) -> None:
    ns = as_main(
        """
        import numpy as np
        OFFSET = 100
        class Scaler:
            def __init__(self, k):
                self.k = k
            def __call__(self, x):
                return x * self.k
        scale = Scaler(3)
        def preprocess(item, *, extra=0):
            yield {"x": np.full(2, scale(item) + OFFSET + extra)}
        """
    )
    fn = ns["preprocess"]
    assert shipping.importable_spec(fn) is None
    info = snap.create(fn, str(tmp_path / "s"), inputs=[0, 1, 2, 3], params={"extra": 1},
                       workers=2, inputs_per_task=1)  # fmt: skip
    got = sorted(int(b["x"][i, 0]) for b in snap.open(str(tmp_path / "s")).loader(2)
                 for i in range(len(b["x"])))  # fmt: skip
    assert got == [101, 104, 107, 110]
    manifest = snap.open(str(tmp_path / "s")).manifest
    assert manifest.pipeline["shipped"] == "by value" and manifest.pipeline["spec"] is None
    again = snap.create(fn, str(tmp_path / "s"), inputs=[0, 1, 2, 3], params={"extra": 1},
                        workers=2)  # fmt: skip
    assert again.reused and again.fingerprint == info.fingerprint


@pytest.mark.parametrize(
    "cache",
    ["functools.cache", "functools.lru_cache(maxsize=2)", "functools.lru_cache(typed=True)"],
)
def test_a_cached_helper_of_main_runs_in_worker_processes(tmp_path: Path, cache: str) -> None:
    """README advises functools.cache for what a worker should build once, but a cached
    helper defined in a notebook failed in every worker ("Can't get attribute 'table' on
    <module '__main__'>"): pickle names a cache by reference. It goes by value, cached again
    in the worker with the same parameters."""
    ns = as_main(
        f"""
        import functools
        import numpy as np
        @{cache}
        def table():
            return np.arange(8) * 3
        @{cache}
        def scaled(k):
            return table() * k
        def preprocess(item):
            yield {{"x": int(scaled(2)[item]), "y": int(table()[item])}}
        """
    )
    loaded = pickle.loads(shipping.dumps(ns["scaled"]))
    assert loaded.cache_parameters() == ns["scaled"].cache_parameters()
    assert loaded(2).tolist() == ns["scaled"](2).tolist()
    out = str(tmp_path / "s")
    snap.create(ns["preprocess"], out, inputs=list(range(8)), workers=2, inputs_per_task=1)
    rows = sorted((int(b["y"][i]), int(b["x"][i])) for b in snap.open(out).loader(8)
                  for i in range(len(b["x"])))  # fmt: skip
    assert rows == [(3 * i, 6 * i) for i in range(8)]


def test_a_notebook_functions_error_in_a_worker_shows_its_cells_line(tmp_path: Path) -> None:
    """With workers, an error in a function of a notebook cell showed 'File
    "<dynamic-code>", line 4, in bad' and no line (cloudpickle renames the code's file, and
    a worker has not the cell's text, which IPython keeps in linecache): the cell's file and
    line are shown, as with workers=0."""
    cell = "/tmp/ipykernel_0/1396654774.py"  # (IPython's name for a cell: no file on disk)
    source = textwrap.dedent(
        """
        import numpy as np
        def bad(item):
            raw = np.zeros(4)
            return [{"v": raw[100 + item]}]  # the line that fails
        """
    )
    linecache.cache[cell] = (len(source), None, source.splitlines(True), cell)
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(source, cell, "exec"), namespace)
    with pytest.raises(snap.PipelineError) as err:
        snap.create(namespace["bad"], str(tmp_path / "s"), inputs=[0, 1], workers=2)
    said = str(err.value)
    assert f'File "{cell}", line 5, in bad' in said, said
    assert 'return [{"v": raw[100 + item]}]  # the line that fails' in said, said


def test_a_module_function_goes_by_name(tmp_path: Path, write_pipeline: Any) -> None:
    spec = write_pipeline("def preprocess(item):\n    yield {'x': item}\n")
    fn = importing.load_function(spec)
    assert shipping.importable_spec(fn) == spec  # a file snap loaded: by its path again
    assert shipping.importable_spec(np.mean) == "numpy:mean"
    ref = pipeline_mod.resolve(closure_over(1))
    assert ref.by_value and ref.spec == ""


@pytest.mark.parametrize(
    ("setup", "named"),
    [
        ("lock = threading.Lock()", "the global 'lock' (a _thread.lock)"),
        ("lock = open(os.devnull, 'w')", "the global 'lock' (a _io.TextIOWrapper)"),
        (
            "class Model:\n    def __init__(self):\n        self._mutex = threading.RLock()\n"
            "lock = Model()",
            "the global 'lock' (its attribute '_mutex') (a _thread.RLock)",
        ),
    ],
)
def test_what_cannot_be_shipped_is_named(tmp_path: Path, setup: str, named: str) -> None:
    ns = as_main(
        setup + "\ndef preprocess(item):\n    str(lock)\n    yield {'x': item}\n",
        threading=threading, os=os,
    )  # fmt: skip
    fn = ns["preprocess"]
    with pytest.raises(snap.PipelineLoadError) as caught:
        snap.create(fn, str(tmp_path / "s"), inputs=[1, 2], workers=2)
    message = str(caught.value)
    assert named in message, message
    assert "workers=0" in message and "functools.cache" in message
    assert not (tmp_path / "s").exists()  # refused before anything was written
    # In this process nothing needs shipping: it runs.
    assert snap.create(fn, str(tmp_path / "s"), inputs=[1, 2], workers=0).num_records == 2
    if isinstance(ns["lock"], io.IOBase):
        ns["lock"].close()


def test_a_closure_over_an_open_file_is_named(tmp_path: Path) -> None:
    with open(os.devnull, "rb") as handle:

        def preprocess(item: int) -> Any:
            handle.read(0)
            yield {"x": item}

        with pytest.raises(snap.PipelineLoadError, match="the closure variable 'handle'"):
            snap.create(preprocess, str(tmp_path / "s"), inputs=[1], workers=2)


def test_a_function_that_fails_to_load_in_the_worker_says_so(tmp_path: Path) -> None:
    """A module importable here but not in the worker: the error says where it broke."""
    mod = tmp_path / "only_here.py"
    mod.write_text("def f(x):\n    return x\n")
    sys.path.insert(0, str(tmp_path))
    try:
        import only_here  # type: ignore[import-not-found]

        def preprocess(item: int) -> Any:
            yield {"x": only_here.f(item)}

        mod.unlink()  # gone before the workers start
        with pytest.raises(snap.PipelineLoadError, match="cannot be loaded in a worker process"):
            snap.create(preprocess, str(tmp_path / "s"), inputs=[1], workers=1)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("only_here", None)


def test_a_big_payload_is_worth_a_warning(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shipping, "BIG_PAYLOAD", 1000)
    blob = np.zeros(10_000, np.uint8)

    def preprocess(item: int) -> Any:
        yield {"x": int(blob[item])}

    with caplog.at_level("WARNING", "snapshot_cli"):
        shipping.ship(preprocess, "preprocess")
    assert "every worker process receives a copy" in caplog.text


def test_a_functools_cache_does_not_count_but_a_list_it_appends_to_does() -> None:
    ns = as_main(
        """
        import functools
        seen = []
        @functools.cache
        def table(n):
            return list(range(n))
        def cached(x):
            return table(x)
        def appends(x):
            seen.append(x)
            return x
        """
    )
    before = shipping.identity(ns["cached"]), shipping.identity(ns["appends"])
    ns["cached"](5)
    ns["appends"](5)
    after = shipping.identity(ns["cached"]), shipping.identity(ns["appends"])
    assert before[0] == after[0] and before[1] != after[1]


def test_a_mistyped_pipeline_file_is_told_the_file_meant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "pipeline.py").write_text("def pre():\n    yield {'x': 1}\n")
    (tmp_path / "other.py").write_text("")
    monkeypatch.chdir(tmp_path)
    for typed, meant in (("pipline.py", "'pipeline.py'"), ("./pipelines.py", "'./pipeline.py'"),
                         (f"{tmp_path}/pipelin.py", f"'{tmp_path}/pipeline.py'")):  # fmt: skip
        with pytest.raises(snap.PipelineLoadError) as caught:
            snap.create(f"{typed}:pre", str(tmp_path / "s"), workers=0)
        assert str(caught.value).endswith(f"not found (from '{typed}:pre'); did you mean {meant}?")
    with pytest.raises(snap.PipelineLoadError) as caught:  # nothing like it: nothing guessed
        snap.create("zzz.py:pre", str(tmp_path / "s"), workers=0)
    assert str(caught.value).endswith("not found (from 'zzz.py:pre')")
    assert snap.create("pipeline.py:pre", str(tmp_path / "s"), workers=0).num_records == 1


@pytest.mark.parametrize(
    ("name", "told"),
    [("prep.txt", "name it ./prep.py"), ("./prep", "name it ./prep.py"),
     ("analysis.ipynb", "jupyter nbconvert --to script")],
)  # fmt: skip
def test_a_pipeline_file_python_cannot_import_is_told_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, told: str
) -> None:
    """A file not named *.py (a notebook, a script without its suffix) was "cannot be
    imported", with no reason; a notebook's name was looked for as a module."""
    (tmp_path / name).write_text("def pre():\n    yield {'x': 1}\n")
    monkeypatch.chdir(tmp_path)
    typed = name if "/" in name or name.endswith(".ipynb") else f"./{name}"
    with pytest.raises(snap.PipelineLoadError) as caught:
        snap.create(f"{typed}:pre", str(tmp_path / "s"), workers=0)
    assert "cannot be imported: Python imports source files named *.py" in str(caught.value)
    assert told in str(caught.value)


def test_a_worker_hashes_a_payload_once_not_for_every_task(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker is handed the job's one payload string for every task; ``load`` hashed all
    of it each time to find it cached (a function closing over 400 MiB, 100 tasks on 2
    workers: 130 s of CPU, the create 91 s; 21 s with the hash taken once)."""
    blob = np.arange(1000)

    def preprocess(item: int) -> Any:
        yield {"x": int(blob[item])}

    payload = shipping.ship(preprocess, "preprocess")
    assert payload is not None
    hashed = []
    real = shipping.hashlib.sha256

    def counting(data: bytes) -> Any:
        hashed.append(len(data))
        return real(data)

    monkeypatch.setattr(shipping.hashlib, "sha256", counting)
    monkeypatch.setattr(shipping, "_last", [])
    first = shipping.load(payload)
    assert [shipping.load(payload) for _ in range(5)] == [first] * 5
    assert len(hashed) == 1
    again = shipping.load("".join(payload))  # an equal string from elsewhere (Ray): hashed,
    assert again is first and len(hashed) == 2  # and found cached


@pytest.mark.parametrize("name", ["noext_pipe", "noext_pipe.txt", "noext_pipe.PY.bak"])
def test_a_pipeline_file_not_ending_in_py_is_told_to_end_in_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """`snap create prep:f` beside a file named prep (no .py) was told "pipeline module
    'prep' not found ...; run from the directory that contains it", which it was."""
    (tmp_path / name).write_text("def pre():\n    yield {'x': 1}\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(snap.PipelineLoadError) as caught:
        snap.create(f"{name}:pre", str(tmp_path / "s"), workers=0)
    assert (
        f"{name!r} is a file here, but a pipeline file is read as Python only when its name "
        "ends in .py" in str(caught.value)
    )
    assert "run from the directory" not in str(caught.value)
    renamed = os.path.splitext(name)[0] + ".py"
    assert str(caught.value).endswith(f"rename it {renamed}")
    (tmp_path / name).rename(tmp_path / renamed)  # as it says: then it runs
    assert snap.create(f"{renamed}:pre", str(tmp_path / "s"), workers=0).num_records == 1
