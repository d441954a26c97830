"""snap.create end to end: reuse, overwrite, resume, executors, inputs, errors."""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import snapshot_cli as snap
from snapshot_cli import storage
from snapshot_cli.writers import lease as lease_mod

PIPE = """
import os
import numpy as np
import snapshot_cli as snap

@snap.ragged("tokens")
def preprocess(path, *, calls=None, scale=1, fail_on=None):
    if calls:
        with open(calls, "a") as f:
            f.write(os.path.basename(path) + "\\n")
    if fail_on and path.endswith(fail_on):
        raise ValueError("cannot decode " + os.path.basename(path))
    with open(path) as f:
        i = int(f.read())
    for j in range(3):
        yield {
            "x": np.full((2, 3), i * scale + j, np.float32),
            "tokens": np.arange(i % 5 + j, dtype=np.int32),
            "id": f"{i}-{j}",
        }
"""


def make_inputs(d: Path, n: int) -> str:
    d.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (d / f"in-{i:03d}.txt").write_text(str(i))
    return str(d / "*.txt")


def records(path: str) -> list[tuple[Any, ...]]:
    return [
        (b["id"][i], b["x"][i].tolist(), b["tokens"][i].tolist())
        for b in snap.open(path).iter_batches()
        for i in range(len(b["id"]))
    ]


def calls(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


@pytest.fixture
def pipe(write_pipeline) -> str:  # type: ignore[no-untyped-def]
    return write_pipeline(PIPE)


def test_create_then_reuse_then_refuse_then_overwrite(tmp_path: Path, pipe: str) -> None:
    glob = make_inputs(tmp_path / "in", 10)
    out, log = str(tmp_path / "snap"), tmp_path / "calls"
    info = snap.create(pipe, out, inputs=glob, params={"calls": str(log)}, workers=0)
    assert (info.num_records, info.reused) == (30, False)
    assert len(calls(log)) == 10
    assert sorted(r[0] for r in records(out)) == sorted(
        f"{i}-{j}" for i in range(10) for j in range(3)
    )
    first = records(out)

    again = snap.create(pipe, out, inputs=glob, params={"calls": str(log)}, workers=0)
    assert again.reused and again.fingerprint == info.fingerprint
    assert len(calls(log)) == 10  # no work

    with pytest.raises(snap.SnapshotExistsError, match="different params.*overwrite") as err:
        snap.create(pipe, out, inputs=glob, params={"calls": str(log), "scale": 2}, workers=0)
    said = "params (scale: not given then, 2 now)"  # (what differs; 2 is no default)
    assert said in str(err.value), str(err.value)
    with pytest.raises(snap.SnapshotExistsError) as err:  # scale=1: its default given
        snap.create(pipe, out, inputs=glob, params={"calls": str(log), "scale": 1}, workers=0)
    said = "params (scale: not given then, 1 now: a default given counts)"
    assert said in str(err.value), str(err.value)

    (tmp_path / "in" / "in-003.txt").write_text("3 ")  # same name, new contents
    grown = snap.create(pipe, out, inputs=glob, params={"calls": str(log)}, workers=0)
    assert not grown.reused and grown.version == 2 and grown.inputs_changed == 1
    assert calls(log)[10:] == ["in-003.txt"]  # only the changed input's task ran (one each)
    assert grown.tasks_reused == grown.tasks - 1

    new = snap.create(pipe, out, inputs=glob, params={"calls": str(log)}, workers=0, overwrite=True)
    assert not new.reused and new.fingerprint != info.fingerprint and new.version == 3
    assert new.tasks_reused == 0 and len(calls(log)) == 21  # overwrite: everything again
    assert records(out) == first  # int(" 3") == 3: same records, new snapshot
    shards = sorted(p.name for p in (tmp_path / "snap" / "shards").iterdir())
    current = sorted(Path(s.path).name for s in snap.open(out).shards)
    older = {Path(s.path).name for v in (1, 2) for s in snap.open(out, version=v).shards}
    assert shards == sorted(set(current) | older)  # the replaced versions' stay, for readers
    assert not any(n.startswith("run") for n in os.listdir(tmp_path / "snap" / "_runs"))


def test_code_change_changes_fingerprint(tmp_path: Path, write_pipeline) -> None:  # type: ignore[no-untyped-def]
    glob = make_inputs(tmp_path / "in", 2)
    spec = write_pipeline(PIPE)
    snap.create(spec, str(tmp_path / "s"), inputs=glob, workers=0)
    write_pipeline(PIPE + "\n# an edit\n")
    with pytest.raises(snap.SnapshotExistsError, match="different pipeline code"):
        snap.create(spec, str(tmp_path / "s"), inputs=glob, workers=0)


def test_local_processes_match_in_process(tmp_path: Path, pipe: str) -> None:
    glob = make_inputs(tmp_path / "in", 12)
    a = snap.create(pipe, str(tmp_path / "a"), inputs=glob, workers=0, inputs_per_task=2)
    b = snap.create(pipe, str(tmp_path / "b"), inputs=glob, workers=2, inputs_per_task=2)
    assert records(str(tmp_path / "a")) == records(str(tmp_path / "b"))
    assert (a.num_shards, a.tasks) == (b.num_shards, b.tasks) == (6, 6)
    ma, mb = snap.open(str(tmp_path / "a")).manifest, snap.open(str(tmp_path / "b")).manifest
    assert [s.records for s in ma.shards] == [s.records for s in mb.shards]
    assert [s.crc32c for s in ma.shards] == [s.crc32c for s in mb.shards]  # byte-identical


def test_shards_roll_and_batches_are_bounded(tmp_path: Path, pipe: str) -> None:
    glob = make_inputs(tmp_path / "in", 40)
    out = str(tmp_path / "s")
    snap.create(
        pipe, out, inputs=glob, workers=0, inputs_per_task=40, batch_rows=7, shard_size=2000
    )
    s = snap.open(out)
    assert len(s.shards) > 2
    assert sum(sh.records for sh in s.shards) == 120
    for i, shard in enumerate(s.shards[:-1]):
        assert shard.bytes >= 2000  # rolled only once past the size
        table = s.read_shard(i)
        assert max(b.num_rows for b in table.to_batches()) <= 7


def test_memory_backend(memfs: object, pipe: str, tmp_path: Path) -> None:
    glob = make_inputs(tmp_path / "in", 5)
    info = snap.create(pipe, "memory://snaps/t", inputs=glob, workers=0)
    assert info.path == "memory:///snaps/t"
    assert len(records("memory://snaps/t")) == 15
    assert snap.create(pipe, "memory://snaps/t", inputs=glob, workers=0).reused


def test_inputs_from_and_no_inputs(tmp_path: Path, write_pipeline) -> None:  # type: ignore[no-untyped-def]
    spec = write_pipeline(
        """
        def items():
            return [{"n": 2}, {"n": 3}]

        def preprocess(item=None, *, k=1):
            if item is None:
                yield {"v": k}
                return
            for i in range(item["n"]):
                yield {"v": i * k}
        """
    )
    items_spec = spec.replace(":preprocess", ":items")
    info = snap.create(
        spec, str(tmp_path / "a"), inputs_from=items_spec, params={"k": 10}, workers=0
    )
    assert info.num_records == 5
    got = [int(v) for b in snap.open(str(tmp_path / "a")).iter_batches() for v in b["v"]]
    assert got == [0, 10, 0, 10, 20]
    once = snap.create(spec, str(tmp_path / "b"), params={"k": 7}, workers=0)
    assert once.num_records == 1
    assert next(snap.open(str(tmp_path / "b")).iter_batches())["v"].tolist() == [7]
    with pytest.raises(snap.OptionError, match="either --input or --inputs-from"):
        snap.create(spec, str(tmp_path / "c"), inputs="x", inputs_from=items_spec)


def test_resume_redoes_only_unfinished_tasks(tmp_path: Path, write_pipeline) -> None:  # type: ignore[no-untyped-def]
    glob = make_inputs(tmp_path / "in", 8)
    flag = tmp_path / "broken"
    flag.write_text("x")
    spec = write_pipeline(
        PIPE.replace(
            "    with open(path) as f:",
            f"    if path.endswith('in-005.txt') and os.path.exists({str(flag)!r}):\n"
            "        raise RuntimeError('transient failure')\n"
            "    with open(path) as f:",
        )
    )
    out, log = str(tmp_path / "s"), tmp_path / "calls"
    with pytest.raises(snap.PipelineError, match="transient failure"):
        snap.create(
            spec, out, inputs=glob, params={"calls": str(log)}, workers=0, inputs_per_task=1
        )
    assert len(calls(log)) == 6  # tasks 0..5 ran; task 5 failed
    with pytest.raises(snap.ManifestError, match="unfinished snapshot.*snap inspect says which"):
        snap.open(out)
    flag.unlink()
    info = snap.create(
        spec, out, inputs=glob, params={"calls": str(log)}, workers=0, inputs_per_task=1
    )
    assert info.tasks_resumed == 5 and info.tasks == 8
    assert calls(log)[6:] == ["in-005.txt", "in-006.txt", "in-007.txt"]
    baseline = str(tmp_path / "clean")
    snap.create(spec, baseline, inputs=glob, workers=0, inputs_per_task=1)
    assert records(out) == records(baseline)


def test_live_writer_blocks_and_dead_writer_is_taken_over(tmp_path: Path, pipe: str) -> None:
    glob = make_inputs(tmp_path / "in", 2)
    out = tmp_path / "s"
    (out / "_runs").mkdir(parents=True)
    holder = {"host": "another-host", "pid": 1, "ttl": 30, "heartbeat": 0.0, "run": None}
    lease_file = out / "_runs" / "lease-00000000.json"

    holder["heartbeat"] = time.time()
    lease_file.write_text(json.dumps(holder))
    with pytest.raises(snap.LeaseError, match="another snap create is writing.*another-host"):
        snap.create(pipe, str(out), inputs=glob, workers=0, wait=False)

    holder["heartbeat"] = time.time() - 31  # silent for longer than the ttl: dead
    lease_file.write_text(json.dumps(holder))
    info = snap.create(pipe, str(out), inputs=glob, workers=0, wait=False)
    assert info.num_records == 6
    newest = lease_mod.current(*storage.resolve(str(out)))
    assert newest is not None and newest.epoch == 1 and newest.holder["released"]


def test_holder_that_lost_the_lease_cannot_commit(tmp_path: Path) -> None:
    fs, root = storage.resolve(str(tmp_path / "s"))
    mine = lease_mod.try_acquire(fs, root, ttl=30)
    assert isinstance(mine, lease_mod.Lease)
    mine.check()
    # A taker that judged us dead writes the next epoch.
    assert storage.create_exclusive(fs, root + "/_runs/lease-00000001.json", b"{}")
    with pytest.raises(snap.LeaseError, match="lost the lease"):
        mine.check()
    mine.release()


# --- bad input ---------------------------------------------------------------------------


def test_function_error_names_input_and_shows_user_traceback(tmp_path: Path, pipe: str) -> None:
    glob = make_inputs(tmp_path / "in", 4)
    out = tmp_path / "s"
    for workers in (0, 2):
        with pytest.raises(snap.PipelineError) as exc:
            snap.create(
                pipe, str(out), inputs=glob, params={"fail_on": "in-002.txt"}, workers=workers
            )
        msg = str(exc.value)
        assert "ValueError on input" in msg and "in-002.txt" in msg
        assert "cannot decode in-002.txt" in msg
        assert 'pipe.py", line' in msg and "in preprocess" in msg
        assert "snapshot_cli" not in msg  # only the user's frames
        assert not (out / "manifest.json").exists()


@pytest.mark.parametrize(
    ("body", "error", "message"),
    [
        ("yield 5", snap.RecordError, "yielded a value of type int"),
        ("return 5", snap.RecordError, "returned a value of type int"),
        (  # (a torch Dataset's habit: the message said "yielded a value of type float")
            "return (1.5, 2)",
            snap.RecordError,
            r"returned a tuple \(float, int\).*return \{'x': x, 'label': label\}",
        ),
        (
            "async def g(): yield 1\n    return g()",
            snap.RecordError,
            r"the pipeline is async \(it returned an async generator\)",
        ),
        (
            "async def g(): return [{'a': 1}]\n    return g()",
            snap.RecordError,
            r"the pipeline is async \(it returned a coroutine\)",
        ),
        ("yield {'a': None}", snap.RecordError, "column 'a' is None"),
        ("yield {'a': {1: 2}}", snap.RecordError, "column 'a' has a value of type dict"),
        (
            "yield {'a': 1}\n    yield {'a': 'x'}",
            snap.SchemaMismatchError,
            "input .*in-000.txt.*column 'a' changed type",
        ),
    ],
)
def test_bad_yields_name_input_and_column(
    tmp_path: Path,
    write_pipeline,
    body: str,
    error: type,
    message: str,  # type: ignore[no-untyped-def]
) -> None:
    glob = make_inputs(tmp_path / "in", 1)
    spec = write_pipeline(f"def preprocess(path):\n    {body}\n")
    with pytest.raises(error, match=message):
        snap.create(spec, str(tmp_path / "s"), inputs=glob, workers=0)
    assert not (tmp_path / "s" / "manifest.json").exists()


def test_a_tuple_of_records_is_its_records(tmp_path: Path) -> None:
    def two(i: int) -> Any:
        return {"x": i}, {"x": -i}

    snap.create(two, str(tmp_path / "s"), inputs=[1, 2], workers=0)
    assert sorted(int(x) for b in snap.open(tmp_path / "s").loader(4) for x in b["x"]) == [
        -2, -1, 1, 2
    ]  # fmt: skip


def test_a_pipeline_that_makes_no_records_at_all_is_noted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A function missing its yield returns None, taken as "no records" for that input: an
    empty snapshot made that way was committed without a word."""

    def forgot_to_yield(i: int) -> None:
        {"x": i}  # noqa: B018

    def filters(i: int) -> Any:
        return [{"x": i}] if i == 2 else None

    with caplog.at_level(logging.WARNING, logger="snapshot_cli"):
        info = snap.create(forgot_to_yield, str(tmp_path / "a"), inputs=[1, 2, 3], workers=0)
    assert info.num_records == 0
    assert "made no records from 3 inputs; every call returned no records (an empty list, " \
        "table or batch, or None: a function that neither yields nor returns its records " \
        "returns None)" in caplog.text  # fmt: skip
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="snapshot_cli"):
        assert snap.create(filters, str(tmp_path / "b"), inputs=[1, 2, 3], workers=0).num_records
    assert "made no records" not in caplog.text
    with caplog.at_level(logging.WARNING, logger="snapshot_cli"):  # no inputs: one call
        assert not snap.create(lambda: None, str(tmp_path / "c"), workers=0).num_records
    assert "made no records from its one call (no inputs); every call returned" in caplog.text

    def yields_none(i: int) -> Any:  # a generator whose filter left nothing: no None to blame
        yield from ({"x": i} for _ in range(i - i))

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="snapshot_cli"):
        assert not snap.create(
            yields_none, str(tmp_path / "d"), inputs=[1, 2], workers=0
        ).num_records
    assert "made no records from 2 inputs (no call of its generator yielded a record)" in (
        caplog.text
    )
    assert "returns None" not in caplog.text


def test_type_change_across_tasks_is_refused_with_hint(tmp_path: Path, write_pipeline) -> None:  # type: ignore[no-untyped-def]
    glob = make_inputs(tmp_path / "in", 2)
    spec = write_pipeline(
        """
        import numpy as np
        def preprocess(path):
            with open(path) as f:
                n = int(f.read()) + 2
            yield {"img": np.zeros((n, n), np.uint8)}
        """
    )
    with pytest.raises(
        snap.SchemaMismatchError, match=r"uint8\[2,2\] before, uint8\[3,3\].*ragged"
    ) as exc:
        snap.create(spec, str(tmp_path / "s"), inputs=glob, workers=0, inputs_per_task=1)
    # each task is named with the input that wrote it, so the user can look at that input
    assert re.search(r"first from task 0 \(input '[^']*in-000\.txt'\), then task 1 "
                     r"\(input '[^']*in-001\.txt'\)", str(exc.value))  # fmt: skip
    assert not (tmp_path / "s" / "manifest.json").exists()


def test_a_dtype_change_across_tasks_says_how_to_give_one_dtype(
    tmp_path: Path,
    write_pipeline,  # type: ignore[no-untyped-def]
) -> None:
    """One task's values were ints and another's floats (``x / 2`` of even and odd inputs):
    the message names both tasks, then says what to convert to."""
    glob = make_inputs(tmp_path / "in", 2)
    spec = write_pipeline(
        """
        def preprocess(path):
            with open(path) as f:
                n = int(f.read())
            yield {"x": n // 2 if n % 2 == 0 else n / 2}
        """
    )
    with pytest.raises(snap.SchemaMismatchError) as exc:
        snap.create(spec, str(tmp_path / "s"), inputs=glob, workers=0, inputs_per_task=1)
    message = str(exc.value)
    assert "column 'x' changed type: int64 before, float64 now (first from task 0" in message
    assert "; give every record's value one dtype: float(value) or np.float64(value)" in message
    assert message.endswith("(of a yielded DataFrame: df['x'] = df['x'].astype(np.float64))")


def test_tasks_with_other_keys_are_refused_naming_their_inputs(
    tmp_path: Path,
    write_pipeline,  # type: ignore[no-untyped-def]
) -> None:
    glob = make_inputs(tmp_path / "in", 4)
    spec = write_pipeline(
        """
        def preprocess(path):
            with open(path) as f:
                n = int(f.read())
            yield {"a": 1} if n < 2 else {"b": 1}
        """
    )
    with pytest.raises(snap.SchemaMismatchError, match="wrote different columns") as exc:
        snap.create(spec, str(tmp_path / "s"), inputs=glob, workers=0, inputs_per_task=2)
    msg = str(exc.value)
    assert re.search(r"task 0 \(inputs '[^']*in-000\.txt' to '[^']*in-001\.txt', 2 in all\)",
                     msg), msg  # fmt: skip
    assert re.search(r"task 1 \(inputs '[^']*in-002\.txt' to '[^']*in-003\.txt', 2 in all\)",
                     msg), msg  # fmt: skip
    assert "['a'] vs ['b']" in msg
    assert not (tmp_path / "s" / "manifest.json").exists()


def test_missing_pipeline_pieces(tmp_path: Path, write_pipeline) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(snap.PipelineLoadError, match="file 'nope.py' not found"):
        snap.create("nope.py:f", str(tmp_path / "s"))
    spec = write_pipeline("def other(x):\n    pass\n")
    with pytest.raises(snap.PipelineLoadError, match="no function 'preprocess'; it defines: other"):
        snap.create(spec, str(tmp_path / "s"))
    # what it imported is not listed (it said "it defines: Any, Iterator, preprocess")
    spec = write_pipeline("from typing import Any\nfrom os.path import join\nimport numpy\n"
                          "class Prep:\n    pass\ndef preprocess(x):\n    pass\n")  # fmt: skip
    with pytest.raises(snap.PipelineLoadError, match=r"no function 'preproces' \(did you mean "
                       r"'preprocess'\?\); it defines: Prep, preprocess$"):  # fmt: skip
        snap.create(spec.replace(":preprocess", ":preproces"), str(tmp_path / "s"))
    with pytest.raises(snap.PipelineLoadError, match="module 'no_such_mod' not found"):
        snap.create("no_such_mod:f", str(tmp_path / "s"))
    bad = write_pipeline("import no_such_dependency\n", name="bad")
    with pytest.raises(snap.PipelineLoadError, match="No module named 'no_such_dependency'"):
        snap.create(bad, str(tmp_path / "s"))
    with pytest.raises(snap.PipelineLoadError, match="must look like"):
        snap.create("justaname", str(tmp_path / "s"))


def test_a_package_file_that_imports_relatively_is_told_its_module_spec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``snap create proj/pkg/sub/pipe.py:f`` where pipe.py does ``from .helpers import g``
    fails as ``python pipe.py`` does; the error gives the spec that works and where from."""
    sub = tmp_path / "proj" / "relpkg" / "sub"
    sub.mkdir(parents=True)
    for init in (sub.parent / "__init__.py", sub / "__init__.py"):
        init.write_text("")
    (sub / "helpers.py").write_text("def g():\n    return 3\n")
    (sub / "pipe.py").write_text("from .helpers import g\n\ndef f():\n    yield {'x': g()}\n")
    with pytest.raises(snap.PipelineLoadError) as exc:
        snap.create(str(sub / "pipe.py") + ":f", str(tmp_path / "s"), workers=0)
    proj = tmp_path / "proj"
    assert str(exc.value).endswith(
        f"pipe.py is a module of the package relpkg.sub: give it as relpkg.sub.pipe:f, run "
        f"from {proj}"
    )
    monkeypatch.chdir(proj)  # the advice works
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(sys, "modules", dict(sys.modules))
    assert snap.create("relpkg.sub.pipe:f", str(tmp_path / "s"), workers=0).num_records == 1


def test_output_that_is_not_a_snapshot(tmp_path: Path, pipe: str) -> None:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("x")
    with pytest.raises(snap.SnapshotExistsError, match="not a snapshot.*todo.txt"):
        snap.create(pipe, str(tmp_path / "notes"), workers=0)
    (tmp_path / "file").write_text("x")
    with pytest.raises(snap.SnapshotExistsError, match="is a file"):
        snap.create(pipe, str(tmp_path / "file"), workers=0)


def test_unwritable_output(tmp_path: Path, pipe: str) -> None:
    glob = make_inputs(tmp_path / "in", 2)
    with pytest.raises(snap.StorageError, match="permission denied.*snap-test"):
        snap.create(pipe, "/sys/snap-test/out", inputs=glob, workers=0)


def test_a_call_the_function_cannot_take_is_refused_before_any_work(
    tmp_path: Path, pipe: str
) -> None:
    # it used to fail in the first task, after every input was read to identify it
    glob, out = make_inputs(tmp_path / "in", 2), str(tmp_path / "s")
    cases = [
        ({"inputs": glob, "params": {"scal": 2}}, r"preprocess\(path, \*, calls=None, scale=1, "
         r"fail_on=None\) cannot be called as preprocess\(<input>, scal=...\): got an "
         r"unexpected keyword argument 'scal' \(did you mean scale= for scal=\?\); it is"),
        ({}, r"cannot be called as preprocess\(\): missing a required argument: 'path'; it "
         r"is called once with no argument, as no inputs were given"),
    ]  # fmt: skip
    for kwargs, message in cases:
        with pytest.raises(snap.OptionError, match=message):
            snap.create(pipe, out, workers=2, **kwargs)
        assert not os.path.exists(out)  # nothing written: no lease, no run
    anything = snap.create(lambda *a, **k: iter([{"n": len(a) + len(k)}]), out, inputs=glob,
                           params={"whatever": 1}, workers=0)  # fmt: skip
    assert anything.num_records == 2  # *args, **kwargs take any call


def test_lambda_runs_in_worker_processes_and_in_process_alike(tmp_path: Path) -> None:
    a = snap.create(lambda: iter([{"a": 1}]), str(tmp_path / "s"), workers=2)
    b = snap.create(lambda: iter([{"a": 1}]), str(tmp_path / "s"), workers=0)
    assert a.num_records == 1 and not a.reused
    assert b.reused and b.fingerprint == a.fingerprint  # same code: same snapshot


def test_params_must_be_json(tmp_path: Path, pipe: str) -> None:
    with pytest.raises(snap.OptionError, match=r"params\['a'\] must be JSON .*arr.tolist\(\)"):
        snap.create(pipe, str(tmp_path / "s"), params={"a": np.zeros(2)})
    with pytest.raises(snap.OptionError, match=r"params\['b'\] .*NaN and infinities have none"):
        snap.create(pipe, str(tmp_path / "s"), params={"a": 1, "b": [1.0, float("-inf")]})
    for bad, message in (
        ([("scale", 2)], r"params must be a dict of keyword arguments .* got a list"),
        ({1: 2}, r"params keys must be Python names \(keyword arguments\), got \[1\]"),
        ({"a-b": 2}, r"got \['a-b'\]"),  # a TypeError from the call, or unhashable, before
    ):
        with pytest.raises(snap.OptionError, match=message):
            snap.create(pipe, str(tmp_path / "s"), params=bad)
    glob = make_inputs(tmp_path / "in", 2)
    a = snap.create(pipe, str(tmp_path / "a"), inputs=glob, params={"scale": np.int64(2)},
                    workers=0)  # fmt: skip
    b = snap.create(pipe, str(tmp_path / "b"), inputs=glob, params={"scale": 2}, workers=0)
    assert a.fingerprint == b.fingerprint  # numpy's 2 is the number 2 (was refused)
    with pytest.raises(snap.OptionError, match="zstd only"):
        snap.create(pipe, str(tmp_path / "s"), compression="lz4", level=3)
    with pytest.raises(snap.OptionError, match="shard_size must look like"):
        snap.create(pipe, str(tmp_path / "s"), shard_size="big")


def test_manifest_records_every_record_batch(tmp_path: Path, pipe: str) -> None:
    glob = make_inputs(tmp_path / "in", 10)
    snap.create(pipe, str(tmp_path / "s"), inputs=glob, workers=0, inputs_per_task=10, batch_rows=4)
    s = snap.open(str(tmp_path / "s"))
    (shard,) = s.shards
    assert shard.batch_sizes() == [b.num_rows for b in s.read_shard(0).to_batches()]
    assert shard.batch_sizes() == [4] * 7 + [2]


def test_workers_end_with_the_pipelines_exit_hooks_and_output(
    tmp_path: Path,
    write_pipeline,  # type: ignore[no-untyped-def]
    capfd: pytest.CaptureFixture[str],
) -> None:
    # A worker skips the interpreter's teardown when its input ends (0.1-0.2 s of every
    # create), but not what a pipeline may rely on: its atexit hooks and its buffered prints.
    spec = write_pipeline(
        f"""
        import atexit, os, sys

        def _done():
            with open(os.path.join({str(tmp_path)!r}, f"exited-{{os.getpid()}}"), "w") as f:
                f.write("ok")

        if os.getpid() != {os.getpid()}:  # a worker (this process imports it too)
            atexit.register(_done)

        def preprocess(i):
            print(f"unflushed line {{i}}", end="")  # no newline: still in the buffer at exit
            yield {{"i": i}}
        """
    )
    snap.create(spec, tmp_path / "out", inputs=[1, 2, 3], workers=2, inputs_per_task=1)
    assert len(list(tmp_path.glob("exited-*"))) == 2  # one per worker
    err = capfd.readouterr().err
    assert all(f"unflushed line {i}" in err for i in (1, 2, 3)), err


def test_a_pipeline_that_is_not_a_function_is_told_what_to_give(tmp_path: Path) -> None:
    rows = [{"i": 1}, {"i": 2}]

    def records() -> Any:
        yield from rows

    cases = [
        (records(), "give the function (records), not what calling it made (records())"),
        (rows, "give one that yields these records (def records(): yield from rows)"),
        (iter(rows), "give one that yields these records"),
        (Path("pipe.py"), "give the file and its function as one string, 'pipe.py:function'"),
        (5, None),
    ]
    for given, words in cases:
        with pytest.raises(snap.PipelineLoadError) as err:
            snap.create(given, str(tmp_path / "s"), workers=0)  # type: ignore[arg-type]
        assert str(err.value).startswith("pipeline must be a function or a spec string, got ")
        assert words in str(err.value) if words else str(err.value).endswith("got 5")
    assert not (tmp_path / "s").exists()
    snap.create(records, str(tmp_path / "s"), workers=0)  # what it says to give
    assert [r["i"] for r in snap.open(str(tmp_path / "s")).head()] == [1, 2]


@pytest.mark.parametrize("output", ["s", Path("s")])
def test_the_function_and_output_swapped_are_told_the_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, output: Any
) -> None:
    monkeypatch.chdir(tmp_path)

    def records() -> Any:
        yield {"i": 1}

    with pytest.raises(snap.OptionError) as err:
        snap.create(output, records, workers=0)  # type: ignore[arg-type]
    assert str(err.value) == (
        f"snap.create takes the function first, then OUTPUT: snap.create(records, {output!r}, "
        f"...), not snap.create({output!r}, records, ...)"
    )
    assert not (tmp_path / "s").exists() and not list(tmp_path.iterdir())
    snap.create(records, output, workers=0)  # the order it says
    assert [r["i"] for r in snap.open(output).head()] == [1]


@pytest.mark.parametrize("output", [None, 3, b"s", ["s"]])
def test_an_output_that_is_no_path_is_named(tmp_path: Path, output: Any) -> None:
    def records() -> Any:
        yield {"i": 1}

    with pytest.raises(snap.OptionError, match="OUTPUT must be a path or URL") as err:
        snap.create(records, output, workers=0)
    assert f"got {type(output).__name__} {output!r}" in str(err.value)


def test_creates_in_threads_leave_stdout_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A notebook making snapshots in a thread pool (workers=0): each task sent its prints to
    stderr with redirect_stdout, and overlapping ones left sys.stdout on stderr for good."""
    from concurrent.futures import ThreadPoolExecutor

    gate = threading.Barrier(4, timeout=60)

    def preprocess(i: int) -> Any:
        if i == 0:
            gate.wait()  # every create has a task running before any ends
        print(f"printed by task {i}")
        yield {"v": i}

    before = sys.stdout

    def make(k: int) -> Any:
        return snap.create(preprocess, tmp_path / f"s{k}", inputs=[0, 1], workers=0, progress=False)

    with ThreadPoolExecutor(4) as pool:
        made = list(pool.map(make, range(4)))
    assert [m.num_records for m in made] == [2] * 4
    assert sys.stdout is before
    print("after")
    out, err = capsys.readouterr()
    assert out == "after\n"
    assert err.count("printed by task 0") == 4 and err.count("printed by task 1") == 4
