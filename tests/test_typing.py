"""Code that uses snap as README shows type-checks under ``mypy --strict``: the public
signatures say what the calls take and give (``@snap.ragged`` made a pipeline ``Any``,
``compression=None`` and a ``Mapping`` of params were type errors though README shows them,
the adapters were ``Any``, ``mix(weights=np.array(...))`` ran but was refused), and a
misspelt option of ``snap.snapshot`` is caught."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

USER_CODE = """
    import types
    from collections.abc import Iterator, Mapping

    import numpy as np

    import snapshot_cli as snap


    @snap.ragged("tokens")
    def preprocess(path: str, *, size: int = 64) -> Iterator[dict[str, object]]:
        yield {"tokens": np.zeros(size % 5, np.int32), "label": 1}


    def square(n: int) -> list[dict[str, int]]:
        return [{"n": n * n}]


    config: Mapping[str, int] = types.MappingProxyType({"size": 32})
    info: snap.CreateInfo = snap.create(
        preprocess, "out/a", inputs="raw/*.bin", params=config, compression=None
    )
    s: snap.Snapshot = snap.snapshot(square, "out/b", inputs=range(3), workers=0)
    rows: list[dict[str, object]] = s.head(2, columns=("n",))
    for batch in s.iter_batches(columns=("n",)):
        batch["n"].sum()
    loader = s.loader(batch_size=2, seed=0, epochs=1)
    for torch_batch in loader.to_torch():
        torch_batch["n"]
    for jax_batch in loader.to_jax():
        jax_batch["n"]
    state: dict[str, object] = loader.state_dict()
    # weights as a numpy array (a config's) run, and type-check; snap.open is exported,
    # though not in __all__ (a star import would replace the built-in open)
    mixed: snap.Mixture = snap.mix([s, snap.open("out/b")], weights=np.array([0.3, 0.7]))
    reveal_type(preprocess)
"""

WRONG = """
    import snapshot_cli as snap

    def square(n: int) -> list[dict[str, int]]:
        return [{"n": n * n}]

    snap.snapshot(square, "out/c", inptus=range(3))
    snap.create(square, "out/d", inputs=range(3), compression=3)
"""


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """mypy's output on each file, by file: one run for both (the package's analysis is most
    of the time). With ``MYPYPATH`` mypy reads the package as a regular install would be
    read, but also reports the package's own lines against ``--strict``: only the user's
    files' lines count (an installed package's are never reported). Under the project's
    own mypy settings (``pyproject.toml``, ``--strict`` on top), which skip torch, Ray and
    JAX as ``make test``'s mypy does (their thousands of files: 22 s of this test's 30 s
    here; their types are not the subject, and the reports were the same)."""
    where = tmp_path_factory.mktemp("typing")
    (where / "user.py").write_text(textwrap.dedent(USER_CODE))
    (where / "wrong.py").write_text(textwrap.dedent(WRONG))
    env = {**os.environ, "MYPYPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
           "--strict", "--no-error-summary", "--cache-dir", str(where / "cache"), "user.py",
           "wrong.py"]  # fmt: skip
    run = subprocess.run(cmd, cwd=where, env=env, capture_output=True, text=True, timeout=600)
    lines = (run.stdout + run.stderr).splitlines()
    return {
        f: "\n".join(x for x in lines if x.startswith(f"{f}:")) for f in ("user.py", "wrong.py")
    }


def test_code_as_readme_shows_it_type_checks(checked: dict[str, str]) -> None:
    out = checked["user.py"]
    assert ": error:" not in out, out
    # the decorated pipeline keeps its own signature, not Any
    assert 'Revealed type is "def (path: str, *, size: int =)' in out, out


def test_a_misspelt_or_wrong_option_is_a_type_error(checked: dict[str, str]) -> None:
    out = checked["wrong.py"]
    assert 'Unexpected keyword argument "inptus"' in out, out
    assert 'Argument "compression" to "create" has incompatible type "int"' in out, out
