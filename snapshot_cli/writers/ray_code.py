"""The pipeline's code on Ray workers: what is shipped, where a worker finds it, and what a
failed import or file read there says.

- **What.** For a ``path/to/file.py:fn`` pipeline, the ``.py`` files of its directory and of
  the packages in it (directories with ``__init__.py``, and their subpackages; not hidden
  ones, nor ``__pycache__``): what ``import`` finds beside the pipeline locally. No data files
  and no other directories: a function runs on Ray in another working directory, where its
  data must come from shared storage, an input or a param.
- **How.** When snap connects to Ray itself, they go in the job's ``working_dir`` (Ray
  uploads it once and unpacks it on every node), in its subdirectory ``snap-code``: Ray puts
  the working directory *first* on the workers' ``sys.path``, where a ``statistics.py``
  beside the pipeline hid the standard library's module (for Ray's own imports too), and
  ``snap-code`` is no module name. After the user's own ``ray.init()`` Ray takes a
  directory only as a URI per task, so the files travel in the run's one object in Ray's
  object store and each worker process writes them to a private temporary directory.
- **Where.** A worker puts the standard library's entries first on ``sys.path`` and loads
  the pipeline from its copy, whose directory goes right after them, as local workers do
  (:mod:`snapshot_cli.child`, :func:`.importing._put_on_path`).
- **Errors.** A traceback names the user's directory, not the copy's; an
  ImportError or FileNotFoundError says what was shipped and where the function ran.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import sys
import tempfile
from dataclasses import dataclass
from typing import Any

from ..child import child_path
from ..errors import OptionError
from ..progress import human_bytes
from . import importing, ray_output, worker

CODE_DIR = "snap-code"  # in the job's working_dir; not a module name: nothing in it can hide one
SHIP_LIMIT = 20 << 20  # bytes of .py files shipped with a file pipeline


@dataclass(frozen=True)
class Code:
    """A file pipeline's code, as shipped: its directory here, the spec in the copy, the files."""

    source_dir: str
    spec: str  # the pipeline in the copy: "prep.py:f"
    files: dict[str, bytes]  # path relative to source_dir → contents

    @property
    def digest(self) -> str:
        h = hashlib.sha256()
        for name, data in sorted(self.files.items()):
            h.update(f"{name}\0{len(data)}\0".encode())
            h.update(data)
        return h.hexdigest()

    def write(self, into: str) -> None:
        """Write the files under ``into/snap-code`` (a job's working_dir)."""
        for name, data in self.files.items():
            path = os.path.join(into, CODE_DIR, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)

    def shared(self, with_files: bool) -> dict[str, Any]:
        """What the workers are sent: the files too where no working_dir holds them."""
        return {
            "source_dir": self.source_dir,
            "spec": self.spec,
            "files": self.files if with_files else None,
            "digest": self.digest,
        }


def collect(spec: str) -> Code | None:
    """The code shipped with a ``path/to/file.py:fn`` pipeline; None for a module spec.

    The pipeline's file is the one the local import takes (:func:`.importing.pipeline_file`),
    however the spec spells it: ``file:///dir/prep.py:f``, ``~/prep.py:f`` and
    ``lnk/../prep.py:f`` (a ``..`` after a link as the OS takes it) were read here as text,
    and not shipped, or the wrong directory was.

    Raises:
        OptionError: the files are more than :data:`SHIP_LIMIT` bytes.
    """
    path, fn = importing.pipeline_file(spec), spec.rpartition(":")[2]
    if path is None or not path.endswith(".py") or not os.path.isfile(path):
        return None
    path = os.path.realpath(path)  # (a link: its target's directory, as the import takes it)
    source_dir = os.path.dirname(path)
    names = list(_python_files(source_dir))
    total = sum(os.path.getsize(os.path.join(source_dir, n)) for n in names)
    if total > SHIP_LIMIT:
        raise OptionError(
            f"the .py files of the pipeline's directory {source_dir} and of its packages are "
            f"{total:,} bytes ({human_bytes(total)}), too much to ship with every Ray job (at "
            f"most {SHIP_LIMIT:,} bytes): move the pipeline into a directory of its own, or "
            "install its code as a package on the cluster and name it as package.module:function"
        )
    files = {}
    for name in names:
        with open(os.path.join(source_dir, name), "rb") as f:
            files[name] = f.read()
    return Code(source_dir, f"{os.path.basename(path)}:{fn}", files)


def _python_files(source_dir: str) -> list[str]:
    """The ``.py`` files of ``source_dir`` and of its packages, relative to it."""
    found = []
    with os.scandir(source_dir) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            if entry.name.endswith(".py") and entry.is_file():
                found.append(entry.name)
            elif _is_package(entry.path, entry.name):
                found += [os.path.join(entry.name, n) for n in _package_files(entry.path)]
    return found


def _is_package(path: str, name: str) -> bool:
    return (
        name.isidentifier()
        and name != "__pycache__"
        and os.path.isfile(os.path.join(path, "__init__.py"))
    )


def _package_files(package: str) -> list[str]:
    found = []
    for root, dirs, files in os.walk(package):  # (symbolic links to directories not followed)
        dirs[:] = sorted(d for d in dirs if _is_package(os.path.join(root, d), d))
        rel = os.path.relpath(root, package)
        found += [
            os.path.normpath(os.path.join(rel, f))
            for f in sorted(files)
            if f.endswith(".py") and os.path.isfile(os.path.join(root, f))
        ]
    return found


# --- in a Ray worker -------------------------------------------------------------------------

_last: list[Any] = []  # [the shared object's id, its value]: every task of a run shares one
_copies: dict[str, str] = {}  # digest → this process's copy of the code (after a user's init)


def task_outcome(shared: list[Any], task: dict[str, Any]) -> dict[str, Any]:
    """A Ray task: :func:`.worker.outcome` with the run's shared object (the job, and the
    code if any), the user's code found first as local workers find it, and an error's
    paths in the copy named as the user's.

    ``shared`` holds the object's reference in a list, so that Ray hands it over as it is:
    a worker takes its value once per run, not once per task (a by-value function of 40 MiB
    was otherwise copied and hashed again for each task).
    """
    job, code = _shared(shared[0])
    sys.path[:] = child_path()  # (Ray put its working_dir, or the driver's, first)
    with ray_output.kept() as printed:  # (said by the driver: Ray's forwarding lost lines)
        if code is None:
            out = worker.outcome(job, task)
        else:
            where = _code_dir(code)
            _forget_other_copies(where)
            out = worker.outcome({**job, "pipeline": os.path.join(where, code["spec"])}, task)
            if "error" in out:
                out["error"]["message"] = _as_users(out["error"]["message"], where, code)
    if "error" in out:
        out["error"]["cwd"] = os.getcwd()
    if text := printed.text():  # (a warning's path into the copy: the user's file)
        out["printed"] = (
            text if code is None else text.replace(where + os.sep, code["source_dir"] + os.sep)
        )
    return out


_in_use = [""]  # the copy this worker process imported the pipeline's modules from last


def _forget_other_copies(where: str) -> None:
    """Drop the modules this worker process imported from another copy of the code than
    ``where`` (an earlier run's, before the user edited a helper module): the pipeline
    imports them anew from this copy. After the user's own ``ray.init()`` the worker
    processes outlive a run, and a run of edited code used the first run's ``mylib.ops``
    from ``sys.modules``: a snapshot of the new code held the old code's records."""
    if _in_use[0] == where:  # (once per change of copy: not per task)
        return
    _in_use[0] = where
    others = tuple(d + os.sep for d in _copies.values() if d != where)
    if not others:
        return
    for name, module in list(sys.modules.items()):
        if (getattr(module, "__file__", None) or "").startswith(others):
            del sys.modules[name]


def _as_users(message: str, where: str, code: dict[str, Any]) -> str:
    """``message`` with the files of the copy at ``where`` named as the user's, in its first
    line ("importing pipeline file ...") and its traceback's frames; not in the exception's
    own text, which says what the function really opened."""
    lines = message.split("\n")
    for i, line in enumerate(lines):
        if i == 0 or line.startswith('  File "'):
            lines[i] = line.replace(where + os.sep, code["source_dir"] + os.sep)
    return "\n".join(lines)


def _shared(ref: Any) -> tuple[dict[str, Any], dict[str, Any] | None]:
    import ray

    key = ref.hex()
    if not _last or _last[0] != key:
        value = ray.get(ref)
        _last[:] = [key, (value["job"], value["code"])]
    job, code = _last[1]
    return job, code


def _code_dir(code: dict[str, Any]) -> str:
    """The directory of this worker's copy of the code."""
    digest = code["digest"]
    if code["files"] is None:  # in the job's working_dir, where Ray starts its workers (the
        key = f"{digest} in the working_dir"  # function may change directory: asked once)
        return _copies.setdefault(key, os.path.join(os.getcwd(), CODE_DIR))
    if digest not in _copies:
        _copies[digest] = os.path.join(_shared_copy(code), CODE_DIR)
    return _copies[digest]


def _shared_copy(code: dict[str, Any]) -> str:
    """``/tmp/snap-code-<uid>-<digest>``: one copy of this code for every worker process of
    this user on the node, kept as a cache (Ray kills its workers, whose own copies, removed
    at exit, were left in /tmp, two a run). Made private (0700) under a new name, then
    renamed into place; one found there is used only if it is this user's own and private."""
    final = os.path.join(tempfile.gettempdir(), f"snap-code-{os.getuid()}-{code['digest'][:32]}")
    if not _ours(final):
        into = tempfile.mkdtemp(prefix="snap-code-")  # (0700, a new name)
        Code(code["source_dir"], code["spec"], code["files"]).write(into)
        try:
            os.rename(into, final)  # (atomic: another worker's, complete, or this one)
        except OSError:  # another worker's came first (not empty there)
            shutil.rmtree(into, ignore_errors=True)
        if not _ours(final):
            raise OptionError(f"{final} is not this user's own private directory: remove it")
    return final


def _ours(path: str) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and st.st_mode & 0o077 == 0


# --- in the driver ---------------------------------------------------------------------------

_NOT_THERE = re.compile(r"^(?:ModuleNotFoundError|ImportError|FileNotFoundError)\b|"
                        r"\((?:ModuleNotFoundError|ImportError)\b|"
                        r"^pipeline (?:module|file) '[^\n]*' not found \(from ", re.M)  # fmt: skip


def explain(error: dict[str, Any], spec: str, code: Code | None) -> dict[str, Any]:
    """``error`` (a worker's), with a line saying what was shipped and where the function
    ran, if what failed is an import or a file that is not on the worker."""
    if error.get("type") not in ("PipelineError", "PipelineLoadError"):
        return error
    if not _NOT_THERE.search(error.get("message", "")):
        return error
    if code is not None:
        shipped = (
            f"runs from a copy of the .py files of {code.source_dir} and of its packages "
            "(directories with __init__.py), no other file"
        )
    elif spec:
        shipped = f"imports {spec} from the Python environment of the cluster"
    else:
        shipped = "gets the function by value (its code and the values it uses), no files"
    cwd, here = error.get("cwd"), os.getcwd()
    if cwd and cwd != here:
        where = f"in the working directory Ray gave it ({cwd}, not {here})"
    else:  # a local Ray, after the user's ray.init(): their working directory
        where = f"in {here} on this machine, but in Ray's working directory on other nodes"
    note = (
        f"\non Ray the worker {shipped}, {where}: read data files from shared storage "
        "(gs://, s3://, ...) or pass them as inputs or params, and install other modules on "
        "the cluster's nodes"
    )
    return {**error, "message": error["message"] + note}
