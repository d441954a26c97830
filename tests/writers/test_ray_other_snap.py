"""A Ray cluster whose workers run another snap than the driver's, or none: refused before
the first task, naming both snaps and what to install (an older snap failed every task with
"unexpected keyword argument 'key'"). The workers' snap is made another by the job's own
``runtime_env`` (a ``PYTHONPATH`` put ahead of the installed snap), on the suite's real
cluster."""

from __future__ import annotations

import importlib
import os
import shutil
import signal
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

import snapshot_cli as snap
from snapshot_cli.errors import OptionError
from snapshot_cli.writers import ray_probe
from tests.conftest import REPO

pytestmark = pytest.mark.slow


def _another_snap(where: Path, version: str) -> Path:
    """A copy of this snap's package at ``where`` whose ``__version__`` is ``version``
    (with its compiled modules, wherever the install put them)."""
    copy = where / "snapshot_cli"
    shutil.copytree(REPO / "snapshot_cli", copy, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("_decode", "_gather", "_ragged", "_shuffle"):
        built = Path(importlib.import_module(f"snapshot_cli.{name}").__file__ or "")
        if not (copy / built.name).exists():
            shutil.copy(built, copy)
    init = copy / "__init__.py"
    text = init.read_text()
    assert f'__version__ = "{snap.__version__}"' in text
    init.write_text(
        text.replace(f'__version__ = "{snap.__version__}"', f'__version__ = "{version}"')
    )
    return where


@pytest.fixture
def users_ray(
    ray_cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[object]:
    """``ray.init`` as a user would (snap then runs in their job), shut down after; from a
    directory of no snap (Ray puts the driver's first on its workers' ``sys.path``: the
    suite's, the repository, holds this snap)."""
    import ray

    monkeypatch.chdir(tmp_path)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    yield ray
    ray.shutdown()
    for sig, handler in handlers.items():
        signal.signal(sig, handler)


def _create(tmp_path: Path) -> None:
    snap.create(lambda x: {"x": x}, str(tmp_path / "out"), inputs=[1, 2, 3], executor="ray")


def test_workers_running_another_snap_version_are_refused_before_any_task(
    users_ray, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    older = _another_snap(tmp_path / "older", "0.0.9")
    users_ray.init(  # type: ignore[attr-defined]
        address=users_ray_address(), runtime_env={"env_vars": {"PYTHONPATH": str(older)}},
        configure_logging=False, log_to_driver=False,
    )  # fmt: skip
    with pytest.raises(OptionError) as err:
        _create(tmp_path)
    said = str(err.value)
    assert "workers run snap 0.0.9, and this is snap" in said and snap.__version__ in said
    assert str(older / "snapshot_cli") in said  # where the workers' snap is
    assert f"arrowsnap=={snap.__version__}" in said and "runtime_env" in said
    out = tmp_path / "out"  # no task ran, nothing committed
    assert not (out / "manifest.json").exists() and not list(out.rglob("*.arrow"))


def test_workers_that_cannot_import_snap_are_refused_with_their_error(
    users_ray, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    broken = tmp_path / "broken" / "snapshot_cli"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('no snap on this node')\n")
    users_ray.init(  # type: ignore[attr-defined]
        address=users_ray_address(), runtime_env={"env_vars": {"PYTHONPATH": str(broken.parent)}},
        configure_logging=False, log_to_driver=False,
    )  # fmt: skip
    with pytest.raises(OptionError, match="cannot import snap .ImportError: no snap on this"):
        _create(tmp_path)


def test_the_same_snap_on_the_workers_runs(users_ray, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    same = _another_snap(tmp_path / "same", snap.__version__)  # a copy: the same code
    users_ray.init(  # type: ignore[attr-defined]
        address=users_ray_address(), runtime_env={"env_vars": {"PYTHONPATH": str(same)}},
        configure_logging=False, log_to_driver=False,
    )  # fmt: skip
    _create(tmp_path)
    got = [int(x) for b in snap.open(str(tmp_path / "out")).loader(8) for x in b["x"]]
    assert sorted(got) == [1, 2, 3]


def users_ray_address() -> str:
    return os.environ["RAY_ADDRESS"]  # (the ray_cluster fixture's)


MINE = {"version": "1.2.0", "code": "a" * 64, "where": "/venv/snapshot_cli"}


@pytest.mark.parametrize(
    ("theirs", "words"),
    [
        (dict(MINE, where="/other/snapshot_cli"), None),  # the same code anywhere
        (dict(MINE, code="b" * 64), "another build of snap 1.2.0 (its code differs"),
        (dict(MINE, version="1.1.0", code="b" * 64), "run snap 1.1.0, and this is snap 1.2.0"),
        ({"missing": "ModuleNotFoundError: No module named 'snapshot_cli'"}, "cannot import snap"),
    ],
)
def test_what_is_refused_and_said(theirs: dict[str, str], words: str | None) -> None:
    why = ray_probe.refusal(theirs, MINE)
    if words is None:
        assert why is None
    else:
        assert why is not None and words in why and "arrowsnap==1.2.0" in why


def test_the_code_digest_follows_every_module_of_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The digest covers every ``.py`` file by its path: another file, or the same bytes
    under another name, is another code; the same files elsewhere are the same code."""

    def digest(root: Path) -> dict[str, str]:
        package = types.ModuleType("snapshot_cli")
        package.__file__ = str(root / "snapshot_cli" / "__init__.py")
        package.__version__ = snap.__version__  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "snapshot_cli", package)  # what import_module finds
        return ray_probe.installed_snap()

    a = digest(_another_snap(tmp_path / "a", snap.__version__))
    assert a["code"] == ray_probe.this_snap()["code"]
    assert a["where"] == str(tmp_path / "a" / "snapshot_cli")
    b = _another_snap(tmp_path / "b", snap.__version__)
    (b / "snapshot_cli" / "writers" / "extra.py").write_text("X = 1\n")
    c = _another_snap(tmp_path / "c", snap.__version__) / "snapshot_cli" / "writers"
    (c / "ray_probe.py").rename(c / "ray_probe2.py")
    shutil.copy(REPO / "snapshot_cli" / "writers" / "ray_probe.py", c)
    assert len({a["code"], digest(b)["code"], digest(c.parent.parent)["code"]}) == 3
