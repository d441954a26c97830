"""Which snap a Ray cluster's workers run, asked before a run's first task.

A Ray task is :func:`.ray_code.task_outcome` pickled by reference: each worker runs the snap
installed where it runs. A worker whose snap is another version (or another build of the
same version) may read this driver's job and tasks otherwise, or not at all: an older snap
failed every task with ``TypeError: ... unexpected keyword argument 'key'``, a traceback
that says nothing of versions. So the driver first runs :func:`installed_snap` on the
cluster, pickled by value (it must not need the worker's snap to run), and compares what it
finds with the same function run here: the package's version and a digest of its ``.py``
files. :func:`refusal` says what differs and what to do.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
from typing import Any

from ..console import named
from ..errors import OptionError
from .ray_session import POLL_S


def installed_snap() -> dict[str, str]:
    """The snap this process imports: ``{"version", "code", "where"}`` (``code``: a digest of
    the package's ``.py`` files by their paths in it), or ``{"missing": why}``.

    Self-contained (imports inside, nothing of snap's at module level): it is sent by value
    to Ray workers whose snap may be another or none.
    """
    import hashlib
    import importlib
    import os

    try:
        package = importlib.import_module("snapshot_cli")
    except Exception as err:  # (not installed, or failing to import there: both are said)
        return {"missing": f"{type(err).__name__}: {err}"}
    root = os.path.dirname(os.path.abspath(package.__file__ or "."))
    digest = hashlib.sha256()
    for here, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(f for f in files if f.endswith(".py")):
            path = os.path.join(here, name)
            digest.update(os.path.relpath(path, root).replace(os.sep, "/").encode() + b"\0")
            with open(path, "rb") as f:
                digest.update(f.read() + b"\0")
    version = str(getattr(package, "__version__", "unknown"))
    return {"version": version, "code": digest.hexdigest(), "where": root}


@functools.cache
def this_snap() -> dict[str, str]:
    """:func:`installed_snap` of this process, computed once."""
    return installed_snap()


def refusal(theirs: dict[str, str], mine: dict[str, str]) -> str | None:
    """Why the workers that answered ``theirs`` cannot run this snap's tasks, or None."""
    want = f"arrowsnap=={mine['version']}"
    how = (
        f"install this snap there ({want} on every node, or in the job's runtime_env: "
        f'{{"pip": ["{want}"]}}) and run the same command again'
    )
    if "missing" in theirs:
        executor = named("--executor ray", "executor='ray'")
        return (
            f"the Ray cluster's workers cannot import snap ({theirs['missing'][:300]}): "
            f"{executor} runs snap's own code on them: {how}"
        )
    if theirs.get("code") == mine["code"]:
        return None
    if theirs.get("version") == mine["version"]:
        which = f"another build of snap {mine['version']} (its code differs from this one's)"
    else:
        which = f"snap {theirs.get('version')}, and this is snap {mine['version']}"
    return (
        f"the Ray cluster's workers run {which}, installed at {theirs.get('where')} there; "
        f"this snap is at {mine['where']}: a worker's snap runs the tasks, and another snap "
        f"may read them otherwise or fail on each: {how}"
    )


def check(ray: Any, stopping: threading.Event) -> None:
    """Raise :class:`.OptionError` unless the cluster's workers run this snap (one task,
    before the run's first); return at once when ``stopping`` (a busy cluster may not start
    it for long)."""
    module = sys.modules[__name__]
    ray.cloudpickle.register_pickle_by_value(module)  # (the workers' snap may lack it)
    try:
        ref = ray.remote(installed_snap).remote()
        while not ray.wait([ref], timeout=POLL_S)[0]:
            if stopping.is_set():
                with contextlib.suppress(Exception):  # (finished meanwhile: nothing to stop)
                    ray.cancel(ref)
                return
        theirs = ray.get(ref)
    except ray.exceptions.RayError as err:
        raise OptionError(f"the Ray cluster could not run a first task of snap's: {err}") from err
    finally:
        ray.cloudpickle.unregister_pickle_by_value(module)
    why = refusal(theirs, this_snap())
    if why:
        raise OptionError(why)
