"""An output on a protocol registered in the creating process only
(``fsspec.register_implementation("ownfs", OwnFS)``): worker processes open the output's URL
anew, and said "Protocol not known: ownfs" from every task (found by a probe). Now the
class is registered in each worker by its importable name, on the process executor and on
Ray; one no worker can import (defined in ``__main__`` or in a function) is refused before
any work, naming it and the way to run in this process."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import fsspec
import pytest
from fsspec.implementations.local import LocalFileSystem

import snapshot_cli as snap
from snapshot_cli.errors import OptionError
from snapshot_cli.writers.worker_storage import for_workers

OWN_FS = """
from fsspec.implementations.local import LocalFileSystem

class OwnFS(LocalFileSystem):
    protocol = ("{name}",)
    root_marker = "/"

    @classmethod
    def _strip_protocol(cls, path):
        return LocalFileSystem._strip_protocol(str(path).removeprefix("{name}://"))
"""

# the pipeline does not import the filesystem's module: only snap's registration reaches
# the workers
PIPE = "import numpy as np\n\ndef run(x):\n    yield {'x': np.int64(x)}\n"


@pytest.fixture
def own_fs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A filesystem class in a module beside the pipeline, registered here only; its name."""
    name = f"ownfs{tmp_path.name.replace('_', '').lower()[-12:]}"
    (tmp_path / f"{name}_mod.py").write_text(textwrap.dedent(OWN_FS.format(name=name)))
    (tmp_path / "prep.py").write_text(PIPE)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module(f"{name}_mod")
    fsspec.register_implementation(name, module.OwnFS, clobber=True)
    yield name
    importlib.import_module("fsspec.registry")._registry.pop(name, None)  # (not for later tests)


def _records(path: Path) -> list[int]:
    with snap.open(str(path)).loader(64, shuffle=False) as loader:
        return sorted(int(x) for b in loader for x in b["x"])


@pytest.mark.slow
def test_worker_processes_register_the_class_by_its_name(own_fs: str, tmp_path: Path) -> None:
    out = f"{own_fs}://{tmp_path}/out"
    made = snap.create(f"{tmp_path}/prep.py:run", out, inputs=list(range(12)), workers=2,
                       inputs_per_task=1)  # fmt: skip
    assert made.num_records == 12 and made.tasks == 12
    assert _records(tmp_path / "out") == list(range(12))


@pytest.mark.slow
def test_ray_workers_register_the_class_by_its_name(
    ray_cluster: str, own_fs: str, tmp_path: Path
) -> None:
    """On Ray the module comes with the pipeline's directory (ray_code ships it)."""
    out = f"{own_fs}://{tmp_path}/out"
    made = snap.create(f"{tmp_path}/prep.py:run", out, inputs=list(range(6)), executor="ray",
                       inputs_per_task=2)  # fmt: skip
    assert made.num_records == 6
    assert _records(tmp_path / "out") == list(range(6))


def test_a_class_defined_in_main_is_refused_before_any_work(tmp_path: Path) -> None:
    script = f"""
import fsspec, os
from fsspec.implementations.local import LocalFileSystem
import snapshot_cli as snap

class MainFS(LocalFileSystem):
    protocol = ("mainfs",)
    root_marker = "/"
    @classmethod
    def _strip_protocol(cls, path):
        return LocalFileSystem._strip_protocol(str(path).removeprefix("mainfs://"))

def run(x):
    yield {{"x": x}}

fsspec.register_implementation("mainfs", MainFS, clobber=True)
try:
    snap.create(run, "mainfs://{tmp_path}/out", inputs=[1, 2, 3], workers=2)
except snap.OptionError as err:
    print("refused:", err)
print("exists:", os.path.exists("{tmp_path}/out"))
print("in process:", snap.create(run, "mainfs://{tmp_path}/out", inputs=[1, 2, 3],
                                 workers=0).num_records)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    refused, exists, in_process = done.stdout.splitlines()
    assert refused.startswith(f"refused: mainfs://{tmp_path}/out: its protocol mainfs:// is ")
    assert "MainFS, registered in this process and defined in __main__" in refused
    assert "workers=0" in refused
    assert exists == "exists: False"  # (nothing made before the refusal)
    assert in_process == "in process: 3"


def test_a_class_defined_in_a_function_is_refused(tmp_path: Path) -> None:
    class LocalFS(LocalFileSystem):
        protocol = ("fnlocalfs",)

    fsspec.register_implementation("fnlocalfs", LocalFS, clobber=True)
    try:
        url = f"simplecache::fnlocalfs://{tmp_path}/out"  # (each protocol of a chain)
        with pytest.raises(OptionError, match="is .*LocalFS, registered in this process "
                           "and defined in a function"):  # fmt: skip
            for_workers(url, "simplecache", in_process=False)
        assert for_workers(url, "simplecache", in_process=True) == {}
    finally:
        importlib.import_module("fsspec.registry")._registry.pop("fnlocalfs", None)


def test_fsspec_s_own_and_unused_protocols_are_not_shipped(tmp_path: Path) -> None:
    fsspec.filesystem("file")  # (registered: by fsspec's own name, which workers find too)
    assert for_workers(f"file://{tmp_path}/out", "file", in_process=False) == {}
    assert for_workers(f"{tmp_path}/out", "file", in_process=False) == {}
    import gcsfs
    import gcsfs.core

    before = fsspec.get_filesystem_class("gs")
    try:  # (fsspec's name for gs is gcsfs.GCSFileSystem: found by it in a worker, not shipped)
        fsspec.register_implementation("gs", gcsfs.GCSFileSystem, clobber=True)
        assert for_workers("gs://bucket/out", "gs", in_process=False) == {}
        # another class registered for it (gcsfs's own, of gcsfs.core): shipped by its name,
        # so that each worker uses the class this process does
        fsspec.register_implementation("gs", gcsfs.core.GCSFileSystem, clobber=True)
        shipped = for_workers("gs://bucket/out", "gs", in_process=False)
        assert shipped == ({} if gcsfs.GCSFileSystem is gcsfs.core.GCSFileSystem
                           else {"gs": "gcsfs.core:GCSFileSystem"})  # fmt: skip
    finally:
        fsspec.register_implementation("gs", before, clobber=True)
    assert for_workers("unusedfs://x/out", "unusedfs", in_process=False) == {}  # (none)
    with pytest.raises(OptionError, match="memory:///x is in this process's memory"):
        for_workers("memory:///x", "memory", in_process=False)
