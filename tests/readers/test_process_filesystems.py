"""Decode processes (``processes=N``) and a filesystem of the user's own: one a new
interpreter cannot make (its class defined in ``__main__``, or not pickling) is refused as
the loader is made, naming it, and one that fails there anyway says so; before, the
pass the processes took over in (some epochs in) raised ``AttributeError: Can't get
attribute 'MyFS' on <module '__main__'>`` (found by a probe)."""

from __future__ import annotations

import subprocess
import sys
import threading
import types
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pytest
from fsspec.implementations.local import LocalFileSystem

import snapshot_cli as snap
from snapshot_cli.errors import OptionError
from snapshot_cli.readers import procs
from snapshot_cli.readers.procs_check import unshippable

from .conftest import numbered_snapshot


def _local_class(module: str, protocol: str) -> type:
    """A local filesystem class under its own ``protocol``, as if defined in ``module``."""

    def strip(cls: type, path: Any) -> str:
        path = str(path)
        return LocalFileSystem._strip_protocol(path.removeprefix(f"{protocol}://"))

    attrs = {"protocol": (protocol,), "root_marker": "/", "_strip_protocol": classmethod(strip)}
    cls = type("UserFS", (LocalFileSystem,), {**attrs, "__module__": module})
    cls.__qualname__ = "UserFS"
    return cls


class PlainFS(LocalFileSystem):
    """Importable by its module: what keeps it from a decode process is in its options."""

    protocol = ("snapplainfs",)


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> str:
    record = '{"label": np.int64(n), "x": np.full((16, 16), n % 251, np.uint8)}'
    return numbered_snapshot(tmp_path_factory.mktemp("images"), 2400, record, "64KiB")


def test_a_filesystem_class_of_main_is_refused_as_the_loader_is_made(images: str) -> None:
    script = f"""
import fsspec, sys
from fsspec.implementations.local import LocalFileSystem
import snapshot_cli as snap

class MainFS(LocalFileSystem):
    protocol = ("mainfs",)
    root_marker = "/"
    @classmethod
    def _strip_protocol(cls, path):
        return LocalFileSystem._strip_protocol(str(path).removeprefix("mainfs://"))

fsspec.register_implementation("mainfs", MainFS, clobber=True)
s = snap.open("mainfs://{images}")
try:
    s.loader(64, processes=1)
except snap.OptionError as err:
    print("refused:", err)
with s.loader(64, processes=0, shuffle=False) as threads:
    print("read", sum(len(b["label"]) for b in threads))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    refused = done.stdout.splitlines()[0]
    assert refused.startswith("refused: processes= cannot read mainfs://"), done.stdout
    assert "MainFS, defined in __main__" in refused and "processes=0" in refused
    assert done.stdout.splitlines()[1] == "read 2400"


@pytest.mark.parametrize("where", ["__main__", "__mp_main__"])
def test_any_global_of_main_in_the_filesystem_is_found(where: str) -> None:
    def hook() -> int:
        return 0

    hook.__module__, hook.__qualname__ = where, "hook"
    fs = PlainFS(skip_instance_cache=True)
    fs.storage_options = {"hook": hook}  # (what pickles with it: a callable option)
    main = types.ModuleType(where)
    main.hook = hook  # type: ignore[attr-defined]
    saved = sys.modules.get(where)
    sys.modules[where] = main
    try:
        assert "uses hook, defined in __main__" in (unshippable(fs) or "")
    finally:
        if saved is None:
            del sys.modules[where]
        else:
            sys.modules[where] = saved
    assert unshippable(PlainFS(skip_instance_cache=True)) is None


def test_a_filesystem_that_does_not_pickle_is_refused() -> None:
    fs = PlainFS(skip_instance_cache=True)
    fs.storage_options = {"lock": threading.Lock()}
    said = unshippable(fs) or ""
    assert said.startswith("its filesystem (PlainFS) cannot be sent to another process")
    assert "(TypeError: cannot pickle '_thread.lock' object)" in said


def test_a_class_a_decode_process_cannot_import_is_said_by_the_process(
    images: str, tmp_path: Path
) -> None:
    """What the check cannot see (a module of this process only): the pass that meets it
    raises an OptionError that names the snapshot and says what to do."""
    module = types.ModuleType("snap_test_module_of_this_process_only")
    cls = _local_class(module.__name__, "onlyherefs")
    module.UserFS = cls  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    fsspec.register_implementation("onlyherefs", cls, clobber=True)
    try:
        s = snap.open(f"onlyherefs://{images}")
        assert len(procs.pool().wait_ready(1)) == 1  # (the loader's windows go through it)
        loader = s.loader(64, processes=1, shuffle=False, shuffle_buffer="64KiB")
        with pytest.raises(OptionError) as err:
            for _ in loader:
                pass
        loader.close()
    finally:
        del sys.modules[module.__name__]
    said = str(err.value)
    assert said.startswith(f"a decode process cannot make the filesystem of {images}")
    assert "ModuleNotFoundError" in said and "use processes=0" in said
    # the same snapshot over the plain local filesystem still reads through the processes
    with snap.open(images).loader(64, processes=1, shuffle=False) as plain:
        labels = np.concatenate([b["label"] for b in plain])
    assert np.array_equal(np.sort(labels), np.arange(2400))
