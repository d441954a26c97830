"""What snap ships with a Ray job, without a cluster (the cluster's tests are in test_ray.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import snapshot_cli as snap
from snapshot_cli.cli import cli
from snapshot_cli.errors import OptionError
from snapshot_cli.writers import ray_code


def _tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_a_file_pipeline_ships_its_directorys_modules_and_packages_only(tmp_path: Path) -> None:
    """What ``import`` finds beside the pipeline is shipped (its packages too: `from
    mylib.ops import double` failed on Ray); data, hidden and other directories are not."""
    _tree(tmp_path, {
        "prep.py": "from mylib.ops import double\n",
        "helpers.py": "",
        "vocab.txt": "a b c",
        "mylib/__init__.py": "",
        "mylib/ops.py": "def double(x): return 2 * x\n",
        "mylib/words.txt": "data, not code",
        "mylib/deep/__init__.py": "",
        "mylib/deep/more.py": "",
        "mylib/notes/old.py": "",  # not a package: nothing imports it as mylib.notes.old
        "mylib/__pycache__/ops.cpython-311.py": "",
        "data/__init__.py": "",  # a package, whatever its name
        "data/rows.csv": "1,2",
        "raw/load.py": "",  # a directory of scripts, not a package
        ".cache/__init__.py": "",  # hidden
        "my-tools/__init__.py": "",  # no module name: cannot be imported
    })  # fmt: skip
    code = ray_code.collect(f"{tmp_path}/prep.py:f")
    assert code is not None
    assert code.source_dir == str(tmp_path) and code.spec == "prep.py:f"
    assert sorted(code.files) == [
        "data/__init__.py",
        "helpers.py",
        "mylib/__init__.py",
        "mylib/deep/__init__.py",
        "mylib/deep/more.py",
        "mylib/ops.py",
        "prep.py",
    ]
    assert code.files["mylib/ops.py"] == b"def double(x): return 2 * x\n"
    assert ray_code.collect("mypackage.prep:f") is None  # installed on the cluster instead
    written = tmp_path / "job"
    code.write(str(written))  # a job's working_dir: all under snap-code, no module name
    assert [p.name for p in written.iterdir()] == ["snap-code"]
    assert (written / "snap-code" / "mylib" / "deep" / "more.py").is_file()


def test_too_much_code_beside_the_pipeline_is_refused_naming_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tree(tmp_path, {"prep.py": "", "big/__init__.py": "x = 1\n" * 1000})
    monkeypatch.setattr(ray_code, "SHIP_LIMIT", 4000)
    with pytest.raises(OptionError, match=rf"pipeline's directory {tmp_path} and of") as refused:
        ray_code.collect(f"{tmp_path}/prep.py:f")
    # (in MiB, rounded down: 21,000,039 bytes were "20 MiB ... (at most 20 MiB)")
    assert (
        "are 6,000 bytes (5.9 KiB), too much to ship with every Ray job (at most 4,000 bytes)"
        in str(refused.value)
    )


def test_a_memory_output_with_ray_names_the_local_executor(tmp_path: Path) -> None:
    """Ray's workers cannot see this process's memory; running in this process is
    ``executor="local", workers=0``."""
    with pytest.raises(OptionError) as caught:
        snap.create(lambda x: iter([{"x": x}]), "memory://ray-x", inputs=[1, 2],
                    executor="ray")  # fmt: skip
    message = str(caught.value)
    assert message.startswith("memory:///ray-x is in this process's memory")
    assert '--executor local --workers 0 (executor="local", workers=0)' in message


def test_no_workers_with_ray_is_refused_not_taken_for_the_default(tmp_path: Path) -> None:
    """``--workers 0`` (in this process) with Ray ran with 2 tasks per cluster CPU, unsaid."""
    out = tmp_path / "s"
    with pytest.raises(OptionError) as caught:
        snap.create(lambda x: iter([{"x": x}]), str(out), inputs=[1, 2], executor="ray",
                    workers=0)  # fmt: skip
    assert str(caught.value) == (
        "workers=0 runs the tasks in this process, which executor='ray' does not: give the "
        "tasks in flight on the cluster (N >= 1), or leave it out for 2 per cluster CPU"
    )
    assert not out.exists()
    # to the command, a usage error (exit 2, as --ray-address without --executor ray is),
    # whatever the inputs: it was the library's exit 1
    said = CliRunner().invoke(cli, ["create", "p.py:f", str(out), "--input", "nothing/*",
                                    "--executor", "ray", "--workers", "0"])  # fmt: skip
    assert (
        said.exit_code == 2
        and "--workers 0 runs the tasks in this process, which --executor ray does not"
        in said.output
    )


def test_what_ray_refuses_is_refused_before_the_run_begins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An address nothing answers at, code too large to ship: found once the run had begun,
    they left its lease and state, a run to resume that could not go on."""
    import socket

    _tree(
        tmp_path / "code",
        {"prep.py": "def f(x):\n    yield {'x': x}\n", "big.py": "x = 1\n" * 1000},
    )
    with socket.socket() as held:  # (bound, never listened on: nothing answers there)
        held.bind(("127.0.0.1", 0))
        nobody = f"127.0.0.1:{held.getsockname()[1]}"
        with pytest.raises(OptionError, match=f"cannot reach the Ray cluster at {nobody}"):
            snap.create(f"{tmp_path}/code/prep.py:f", str(tmp_path / "a"), inputs=[1, 2],
                        executor="ray", ray_address=nobody)  # fmt: skip
    monkeypatch.setattr(ray_code, "SHIP_LIMIT", 4000)
    with pytest.raises(OptionError, match="of the pipeline's directory"):
        snap.create(f"{tmp_path}/code/prep.py:f", str(tmp_path / "b"), inputs=[1, 2],
                    executor="ray")  # fmt: skip
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
