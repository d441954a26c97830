"""What snap says and takes agrees with itself: a Python call is told its keywords
(``workers=``) and a command its flags (``--workers``); options that cannot go together are
refused the same way whichever two they are; the public calls document what they take; and
the package's star import leaves Python's builtins alone."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
import numpy as np
import pytest
from click.testing import CliRunner

import snapshot_cli as snap
from snapshot_cli import console
from snapshot_cli.cli import cli
from snapshot_cli.cli_types import check_create_usage
from snapshot_cli.errors import OptionError, SchemaMismatchError
from snapshot_cli.readers.snapshot import open as open_snapshot
from snapshot_cli.readers.verify import verify
from snapshot_cli.writers.executors import make_executor
from snapshot_cli.writers.options import Compression, CreateOptions


def _one(i: int) -> Iterator[dict[str, Any]]:
    yield {"x": int(i)}


@snap.ragged("tokens")
def _ragged(i: int) -> Iterator[dict[str, Any]]:
    yield {"x": int(i), "tokens": np.arange(int(i) % 3 + 1, dtype=np.int32)}


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stderr


# --- fault 1: the star import ----------------------------------------------------------------


def test_a_star_import_leaves_the_builtin_open_alone(tmp_path: Path) -> None:
    """``from snapshot_cli import *`` bound ``open`` to snap.open: the module's own
    ``open("data.csv")`` then said the file is not a snapshot."""
    data = tmp_path / "data.csv"
    data.write_text("a,b\n")
    namespace: dict[str, Any] = {"path": str(data)}
    exec("from snapshot_cli import *\nwith open(path) as f:\n    text = f.read()", namespace)
    assert namespace["text"] == "a,b\n"
    assert "create" in namespace and "open" not in namespace
    assert snap.open is open_snapshot  # (still the API: snap.open)


# --- fault 2: a Python call is told its keywords, a command its flags -------------------------


PYTHON_SAYS: list[tuple[dict[str, Any], str]] = [
    ({"workers": -1, "inputs": [1]}, "workers= must be an integer >= 0, got -1"),
    ({"compression": "lz4", "level": 5, "inputs": [1], "workers": 0},
     "level= applies to zstd only, not to 'lz4'"),
    ({"compression": "none", "level": 3, "inputs": [1], "workers": 0},
     "level= applies to zstd only, not to 'none'"),
    ({"ray_address": "localhost:6379", "inputs": [1], "workers": 0},
     "ray_address= applies to executor='ray' only"),
    ({"inputs_from": lambda x: [1], "workers": 0},
     "inputs_from='<lambda>' is called with no arguments and returns the list of inputs"),
]  # fmt: skip


@pytest.mark.parametrize(("options", "said"), PYTHON_SAYS)
def test_a_python_call_is_told_its_keywords_not_the_flags(
    tmp_path: Path, options: dict[str, Any], said: str
) -> None:
    with pytest.raises(OptionError) as caught:
        snap.create(_one, str(tmp_path / "out"), **options)
    assert str(caught.value).startswith(said), caught.value
    assert "--" not in str(caught.value), caught.value
    assert not (tmp_path / "out").exists()


def test_the_same_checks_name_the_flags_in_a_command() -> None:
    checks: list[tuple[Callable[[], object], str]] = [
        (lambda: CreateOptions(workers=-1), "--workers must be an integer >= 0, got -1"),
        (lambda: CreateOptions(ray_address="h:1"), "--ray-address applies to --executor ray"),
        (lambda: make_executor("local", -1), "--workers must be >= 0, got -1"),
        (lambda: make_executor("local", 1, "h:1"), "--ray-address applies to --executor ray"),
    ]
    for check, flag in checks:
        with console.command(), pytest.raises(OptionError) as caught:
            check()
        assert str(caught.value).startswith(flag), caught.value
        with pytest.raises(OptionError) as caught:  # (and out of one, the keyword)
            check()
        assert "--" not in str(caught.value), caught.value
    with console.command(), pytest.raises(ValueError, match="^--level applies to --compressio"):
        Compression("lz4", 5)


def test_an_inputs_from_given_a_list_file_is_told_in_python_terms(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "items.json").write_text("[1, 2]")
    with pytest.raises(snap.PipelineLoadError) as caught:
        snap.create(_one, str(tmp_path / "out"), inputs_from="items.json", workers=0)
    said = str(caught.value)
    assert said.startswith("inputs_from= takes a function that returns the inputs"), said
    assert "give inputs_from='items.py:items'" in said and "--" not in said, said


def test_an_up_to_date_create_names_the_layout_options_as_python_gave_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Its note named ``--batch-rows`` to a Python caller, who gave ``batch_rows=``."""
    out = str(tmp_path / "s")
    snap.create(_one, out, inputs=list(range(6)), workers=0, inputs_per_task=6)
    with caplog.at_level("WARNING", logger="snapshot_cli"):
        info = snap.create(_one, out, inputs=list(range(6)), workers=0, batch_rows=2)
    assert info.reused
    assert "note: batch_rows= shapes the shards" in caplog.text, caplog.text
    assert "--batch-rows" not in caplog.text


def test_bench_tells_a_command_its_flags_and_a_loader_its_keywords(tmp_path: Path) -> None:
    """``snap bench --processes 1`` over a ragged column said ``use processes=0``."""
    out = str(tmp_path / "s")
    snap.create(_ragged, out, inputs=list(range(4)), workers=0)
    code, stderr = _run("bench", out, "--processes", "1", "--epochs", "1")
    assert code == 1 and "Traceback" not in stderr
    assert "--processes decodes columns of numbers" in stderr, stderr
    assert "(--columns) or use --processes 0" in stderr and "processes=" not in stderr, stderr
    with pytest.raises(OptionError) as caught:
        snap.open(out).loader(2, processes=1)
    said = str(caught.value)
    assert said.startswith("processes= decodes columns of numbers"), said
    assert "(columns=[...]) or use processes=0" in said and "--" not in said, said


# --- fault 3: --level with another codec is a usage error ------------------------------------


def test_check_create_usage_takes_the_codec_and_level() -> None:
    """``--level`` with lz4 or none exited 1 (the library's error), where --ray-address without
    --executor ray, the other pair that cannot go together, exits 2 (the command's cases:
    tests/test_cli.py, test_options_that_cannot_work_are_usage_errors_by_their_option_names)."""
    common: tuple[Any, ...] = ("p.py:f", (), None, "local", None, "out", None)
    with pytest.raises(click.UsageError, match="--level applies to --compression zstd only"):
        check_create_usage(*common, compression="lz4", level=3)
    check_create_usage(*common, compression="zstd", level=3)
    check_create_usage(*common, compression="lz4", level=None)


# --- fault 5: snapshot() with dry_run ----------------------------------------------------------


def test_snapshot_refuses_dry_run_up_front(tmp_path: Path) -> None:
    """It created nothing, then failed to open it: "... is not a snapshot (no manifest.json)"."""
    out = tmp_path / "snapdry"
    with pytest.raises(OptionError) as caught:
        snap.snapshot(_one, str(out), inputs=[1, 2], dry_run=True, workers=0)
    said = str(caught.value)
    assert "creates the snapshot, then opens it" in said and "snap.create(" in said, said
    assert not out.exists()
    s = snap.snapshot(_one, str(out), inputs=[1, 2], dry_run=False, workers=0)
    assert s.num_records == 2


# --- fault 6: the public calls document what they take -----------------------------------------


DOCUMENTED: dict[str, Callable[..., Any]] = {
    "mix": snap.mix,
    "Loader.to_torch": snap.Loader.to_torch,
    "Loader.to_jax": snap.Loader.to_jax,
    "Loader.to_tf": snap.Loader.to_tf,
    "Snapshot.loader": snap.Snapshot.loader,
    "snapshot": snap.snapshot,
    "verify": verify,
}


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_every_parameter_of_a_public_call_is_documented(name: str) -> None:
    fn = DOCUMENTED[name]
    doc = inspect.getdoc(fn) or ""
    params = [p for p in inspect.signature(fn).parameters if p != "self"]
    assert [p for p in params if not re.search(rf"\b{p}\b", doc)] == [], doc


@pytest.mark.parametrize("cls", [snap.Manifest, snap.ShardEntry, snap.Loader, snap.Mixture])
def test_every_public_member_has_a_docstring(cls: type) -> None:
    bare = []
    for klass in cls.__mro__:
        if not klass.__module__.startswith("snapshot_cli"):
            continue
        for name, value in vars(klass).items():
            if name.startswith("_"):
                continue
            fn = value.fget if isinstance(value, property) else value
            fn = fn.__func__ if isinstance(fn, (classmethod, staticmethod)) else fn
            if callable(fn) and not (fn.__doc__ or "").strip():
                bare.append(f"{klass.__name__}.{name}")
    assert bare == []


def test_to_torch_points_at_the_module_with_its_code() -> None:
    doc = inspect.getdoc(snap.Loader.to_torch) or ""
    assert "torch_batches.py" in doc, doc


# --- fault 9: small inconsistencies --------------------------------------------------------


def test_snapshot_dataset_names_itself_for_a_misspelt_option(tmp_path: Path) -> None:
    """It said ``Snapshot.loader() got an unexpected keyword argument 'shufle'``."""
    pytest.importorskip("torch")
    from snapshot_cli.readers.torch import SnapshotDataset

    out = str(tmp_path / "s")
    snap.create(_one, out, inputs=list(range(4)), workers=0)
    with pytest.raises(TypeError) as caught:
        SnapshotDataset(out, shufle=False)
    said = str(caught.value)
    assert said.startswith(
        "SnapshotDataset() got an unexpected keyword argument 'shufle'; did you mean 'shuffle'?"
    ), said
    with pytest.raises(TypeError, match=r"^SnapshotDataset\(\) got .* 'workers'; .*create\(\)"):
        SnapshotDataset(out, workers=2)  # (create's: said so)
    assert len(SnapshotDataset(out, batch_size=2, shuffle=False)) == 2


def test_no_batch_says_what_to_change() -> None:
    from snapshot_cli.readers.options import no_batch

    assert "(20 on each of 2 ranks) holds no batch of 32" in no_batch(40, 32, 2)
    said = no_batch(3, 1, 4)
    assert "each rank then repeats records" in said and "fewer ranks" in said, said
    assert "on each of" not in no_batch(3, 4, 1) and "smaller batch_size" in no_batch(3, 4, 1)


@pytest.mark.parametrize("threads", [0, -1, True, 1.5, "4"])
def test_verify_refuses_threads_the_command_refuses(tmp_path: Path, threads: Any) -> None:
    """``threads=0`` or ``-1`` ran with one thread; ``snap verify --threads 0`` is a usage
    error."""
    out = str(tmp_path / "s")
    snap.create(_one, out, inputs=list(range(3)), workers=0)
    with pytest.raises(OptionError, match=r"^threads must be an integer >= 1"):
        verify(snap.open(out), threads=threads)
    assert verify(snap.open(out), threads=np.int64(2)).ok


@pytest.mark.parametrize("within", [False, True])
def test_a_number_then_text_in_a_column_is_told_how_to_give_it_one_type(
    tmp_path: Path, within: bool
) -> None:
    """int64 → str said only that the type changed; int → float and str → bytes advise."""

    def mixed(i: int) -> Iterator[dict[str, Any]]:
        if within:  # (two records of one task, or one record of each of two tasks)
            yield {"x": 1}
        yield {"x": int(i) if i < 2 and not within else f"id-{i}"}

    with pytest.raises(SchemaMismatchError) as caught:
        snap.create(mixed, str(tmp_path / "s"), inputs=list(range(4)), workers=0,
                    inputs_per_task=1)  # fmt: skip
    said = str(caught.value)
    assert "int64" in said and "str" in said, said
    assert said.endswith("; give the column one type, e.g. str(value) in every record "
                         "(or int(value))"), said  # fmt: skip


def test_open_refuses_storage_options_for_an_open_snapshot(tmp_path: Path) -> None:
    """``snap.open(s, storage_options={...})`` returned ``s`` and ignored the options."""
    out = str(tmp_path / "s")
    snap.create(_one, out, inputs=list(range(3)), workers=0)
    s = snap.open(out)
    with pytest.raises(OptionError, match=r"is open already, on its own filesystem: "
                                          r"storage_options apply to a path or URL"):  # fmt: skip
        snap.open(s, storage_options={"token": "anon"})
    assert snap.open(s) is s


def test_an_up_to_date_create_says_overwrite_as_python_gave_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = str(tmp_path / "s")
    snap.create(_one, out, inputs=list(range(6)), workers=0, inputs_per_task=6)
    with caplog.at_level("WARNING", logger="snapshot_cli"):
        snap.create(_one, out, inputs=list(range(6)), workers=0, batch_rows=2, compression="lz4")
    assert "not part of the fingerprint: pass overwrite=True to rewrite it" in caplog.text
    assert "none are written: pass overwrite=True to rewrite it with that option" in caplog.text
    assert "--" not in caplog.text, caplog.text


def test_the_other_public_calls_document_every_parameter() -> None:
    from snapshot_cli.writers.gc import gc

    for fn in (snap.create, snap.open, gc, snap.Snapshot.head, snap.Snapshot.iter_batches):
        doc = inspect.getdoc(fn) or ""
        params = [p for p in inspect.signature(fn).parameters if p != "self"]
        assert [p for p in params if not re.search(rf"\b{p}\b", doc)] == [], fn
    assert "the CPUs this job may use (affinity, cgroup)" in (snap.create.__doc__ or "")


@pytest.mark.parametrize("cls", [snap.Snapshot, snap.CreateInfo])
def test_snapshot_and_create_info_members_have_docstrings(cls: type) -> None:
    test_every_public_member_has_a_docstring(cls)
