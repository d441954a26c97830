"""The output's filesystem as worker processes reach it: each opens the output's URL anew,
so what only this process knows is refused before any work (a ``memory://`` output, a
protocol registered here with a class defined in ``__main__``), and a protocol registered
here with an importable class (``fsspec.register_implementation("myfs", MyFS)``) is
registered in each worker by its name before it opens the URL (it said "Protocol not known:
myfs" from every task before)."""

from __future__ import annotations

import sys

import fsspec
from fsspec.registry import known_implementations
from fsspec.registry import registry as classes

from ..errors import OptionError

IN_PROCESS = '--executor local --workers 0 (executor="local", workers=0)'


def for_workers(url: str, protocol: str, in_process: bool) -> dict[str, str]:
    """The protocols of ``url`` (its filesystem's ``protocol``) registered in this process
    only, each with its class's importable name (``module:qualname``), for :func:`register`;
    {} where the tasks run in this process.

    Raises:
        OptionError: no worker process could open ``url``; says to run in this process.
    """
    if in_process:
        return {}
    if protocol == "memory":
        raise OptionError(
            f"{url} is in this process's memory, which no worker process can write into: "
            f"pass {IN_PROCESS} to run it in this process"
        )
    shipped = {}
    for name in _protocols(url):
        cls = classes.get(name)
        if cls is None or _known_as(known_implementations.get(name, {}).get("class"), cls):
            continue  # (fsspec's own, a plugin's entry point, or not used yet: found by name)
        if cls.__module__ in ("__main__", "__mp_main__") or "<locals>" in cls.__qualname__:
            where = "in a function" if "<locals>" in cls.__qualname__ else "in __main__"
            raise OptionError(
                f"{url}: its protocol {name}:// is {cls.__qualname__}, registered in this "
                f"process and defined {where} (the script or notebook running this), which "
                "worker processes cannot import: define it at the top of a module of its own, "
                f"or pass {IN_PROCESS} to run the tasks in this process"
            )
        shipped[name] = _name(cls)
    return shipped


def register(protocols: dict[str, str]) -> None:
    """In a worker: register each of the parent's ``protocols`` by its class's name (as
    :func:`for_workers` gave them), so that opening the output finds it."""
    for name, cls in protocols.items():
        if name not in classes:  # (its own import may have registered it)
            fsspec.register_implementation(name, cls, clobber=True)


def _known_as(known: object, cls: type) -> bool:
    """Whether fsspec's name for a protocol (``"gcsfs.GCSFileSystem"``, a re-export of
    ``gcsfs.core.GCSFileSystem``) is ``cls``, as imported here (a worker finds it by it)."""
    if not isinstance(known, str):
        return False
    module, _, name = known.rpartition(":" if ":" in known else ".")
    found: object = sys.modules.get(module)
    for part in name.split("."):
        found = getattr(found, part, None)
    same = (getattr(found, "__module__", None), getattr(found, "__qualname__", None))
    return found is cls or same == (cls.__module__, cls.__qualname__)  # (or its module's
    # class after a reload: the registry kept the class of before, which a worker finds too)


def _name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _protocols(url: str) -> list[str]:
    """The protocols ``url`` names (each of a chain: ``simplecache::myfs://...``)."""
    return [p.partition("://")[0].lower() for p in url.split("::") if "://" in p]
