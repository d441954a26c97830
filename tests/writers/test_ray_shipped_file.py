"""The directory shipped to Ray is the pipeline file's the local import takes, for every
spelling of the spec, without a cluster (on one: test_ray_spec_spellings.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from snapshot_cli.writers import importing, ray_code

PREP = b"def f(x):\n    yield {'x': x}\n"


@pytest.mark.parametrize(
    "spec",
    ["file://{proj}/prep.py:f", "~/prep.py:f", "lnk/../prep.py:f", "../real/proj/prep.py:f",
     "./lnk/../prep.py:f", "{proj}/deep/../prep.py:f"],
)  # fmt: skip
def test_the_code_shipped_is_the_directory_of_the_file_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spec: str
) -> None:
    proj, run = tmp_path / "real" / "proj", tmp_path / "run"
    (proj / "deep").mkdir(parents=True)
    run.mkdir()
    (proj / "prep.py").write_bytes(PREP)
    (proj / "helper.py").write_text("")
    (run / "lnk").symlink_to("../real/proj/deep")
    (run / "prep.py").write_text("DECOY = 1\n")  # what abspath("lnk/../prep.py") named
    monkeypatch.chdir(run)
    monkeypatch.setenv("HOME", str(proj))
    spec = spec.format(proj=proj)
    assert importing.pipeline_file(spec) == str(proj / "prep.py")
    importing.load_function(spec)  # (the local import takes that file)
    assert importing.home_file(spec) == str(proj / "prep.py")
    code = ray_code.collect(spec)
    assert code is not None
    assert (code.source_dir, code.spec) == (str(proj), "prep.py:f")
    assert sorted(code.files) == ["helper.py", "prep.py"] and code.files["prep.py"] == PREP


def test_a_module_spec_ships_nothing() -> None:
    assert importing.pipeline_file("json.decoder:JSONDecoder") is None
    assert ray_code.collect("json.decoder:JSONDecoder") is None


def test_a_module_the_workers_cannot_import_is_said_to_be_on_ray() -> None:
    """``snap.create(pipe.prep, executor="ray")`` of a module the driver found by a
    ``sys.path`` of its own: "pipeline module 'pipe' not found ...; run from the directory
    that contains it", which the user had, with nothing saying it failed on Ray (a probe)."""
    from snapshot_cli.writers.ray_code import explain

    for message in (
        "pipeline module 'pipe' not found (from 'pipe:prep'); run from the directory that "
        "contains it, or give a file path",
        "pipeline file 'p/x.py' not found (from 'p/x.py:f')",
    ):
        said = explain({"type": "PipelineLoadError", "message": message}, "pipe:prep", None)
        assert said["message"].startswith(message)
        assert "\non Ray the worker imports pipe:prep from the Python environment of the " \
            "cluster" in said["message"]  # fmt: skip
    other = {"type": "PipelineLoadError", "message": "pipeline module 'x' is empty"}
    assert explain(other, "x:f", None) == other
