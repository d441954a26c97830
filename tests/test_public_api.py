"""``snapshot_cli.__all__`` is exactly the public API: complete, with no strays, documented."""

from __future__ import annotations

import builtins
import inspect

import snapshot_cli

CONSTANTS = {"FORMAT_VERSION", "__version__"}  # data: no docstring of their own to check
# Public (``snap.open``) but not in __all__: a star import would replace the built-in.
NOT_STARRED = {"open"}


def defined_here(obj: object) -> bool:
    """A function or class whose home is snapshot_cli (not a submodule, not re-exported)."""
    module = getattr(obj, "__module__", None) or ""
    return (inspect.isfunction(obj) or inspect.isclass(obj)) and (
        module == "snapshot_cli" or module.startswith("snapshot_cli.")
    )


def test_every_name_in_all_exists() -> None:
    missing = [name for name in snapshot_cli.__all__ if not hasattr(snapshot_cli, name)]
    assert missing == []


def test_all_has_no_duplicates() -> None:
    assert len(snapshot_cli.__all__) == len(set(snapshot_cli.__all__))


def test_every_public_function_and_class_is_in_all() -> None:
    public = {
        name
        for name, obj in vars(snapshot_cli).items()
        if not name.startswith("_") and defined_here(obj)
    }
    assert public - set(snapshot_cli.__all__) - NOT_STARRED == set()


def test_the_names_kept_out_of_all_are_public_and_documented() -> None:
    for name in NOT_STARRED:
        assert name not in snapshot_cli.__all__ and name in dir(snapshot_cli)
        assert defined_here(getattr(snapshot_cli, name))
        assert (getattr(snapshot_cli, name).__doc__ or "").strip()


def test_no_name_in_all_is_a_builtin() -> None:
    """``from snapshot_cli import *`` bound ``open``: the module's ``open("data.csv")`` then
    opened a snapshot (ManifestError: a file, not a snapshot)."""
    assert set(snapshot_cli.__all__) & set(dir(builtins)) == set()


def test_every_name_in_all_has_a_docstring() -> None:
    # A class's __doc__ is its own (not inherited); int's and str's would pass for constants.
    names = set(snapshot_cli.__all__)
    assert {n for n in names if not defined_here(getattr(snapshot_cli, n, None))} == CONSTANTS
    undocumented = [
        name
        for name in sorted(names - CONSTANTS)
        if not (getattr(snapshot_cli, name).__doc__ or "").strip()
    ]
    assert undocumented == []


def test_star_import_gives_exactly_all() -> None:
    namespace: dict[str, object] = {}
    exec("from snapshot_cli import *", namespace)
    del namespace["__builtins__"]
    assert sorted(namespace) == sorted(snapshot_cli.__all__)
    assert all(namespace[name] is getattr(snapshot_cli, name) for name in namespace)
