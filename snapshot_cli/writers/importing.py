"""Importing a pipeline (or ``--inputs-from``) by its spec: ``path/to/file.py:function``
or ``package.module:function``, under which module name, and what a failed import says.

A file is imported under its own name where that name means only it (see
:func:`_module_name_for`), with its directory on ``sys.path`` as ``python file.py`` has it
(but after the standard library: :func:`_put_on_path`); a module as ``python -m`` finds it,
from the working directory. Threads importing one file at once wait for one import of it
(:func:`_file_lock`). An error shows the user's frames only, with advice for the usual
causes (a script that parses its command line or exits when imported, a package's module
given as a file).
"""

from __future__ import annotations

import contextvars
import difflib
import hashlib
import importlib
import importlib.util
import keyword
import os
import stat
import sys
import threading
import traceback
from collections.abc import Callable
from importlib.machinery import PathFinder
from typing import Any

from .. import child, faults, os_paths
from ..child import absolute_or_none, is_stdlib
from ..errors import PipelineLoadError
from ..os_paths import cwd_gone
from . import bytecode, codedeps, shipping

_loaded: dict[str, Callable[..., Any]] = {}
_homes: dict[str, str | None] = {}  # the same key → the file of the module it was found in
# A file imported here → its (mtime_ns, size) then: a file edited since is imported again (in
# a notebook, `snap.create("prep.py:f", ...)` after an edit to prep.py runs the edit).
_stamps: dict[str, tuple[int, int]] = {}
_file_locks: dict[str, threading.RLock] = {}  # see _file_lock
_naming = threading.RLock()  # choosing a file's module name and putting it in sys.modules


def _stamp(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def _split(spec: str, what: str) -> tuple[str, str]:
    target, sep, func = spec.rpartition(":")
    # (p.py::f, p.py:f:g: "module 'p.py:f' not found"; a file's name may hold a colon)
    bad_target = not target or (":" in target and not target.endswith((".py", ".ipynb")))
    if not sep or bad_target or not func or not func.replace(".", "_").isidentifier():
        module, dot, name = spec.rpartition(".")  # (pipe.preprocess: a dot for the colon)
        guess = dot and not sep and module and name.isidentifier() and name != "py"
        meant = f"; did you mean '{module}:{name}'?" if guess else ""
        raise PipelineLoadError(
            f"{what} {spec!r} must look like path/to/file.py:function or "
            f"package.module:function{meant}"
        )
    return target, func


def check_spec(spec: str, what: str = "pipeline") -> None:
    """A PipelineLoadError if ``spec`` cannot name a function, whatever the files are (the
    CLI says it as a usage error, before anything is read)."""
    _split(_expanded(spec), what)


def is_file_target(target: str) -> bool:
    """Whether a spec's target names a file (``path/to/file.py``), not a module."""
    return target.endswith((".py", ".ipynb")) or os.sep in target or "/" in target


def _near_files(target: str) -> str:
    """ "; did you mean 'x.py'?" for the Python files of ``target``'s directory like its name
    (shown as ``target`` was given: relative or absolute)."""
    directory, name = os.path.split(target)
    try:
        files = [f for f in os.listdir(directory or ".") if f.endswith(".py")]
    except OSError:
        return ""
    near = difflib.get_close_matches(name, files, n=2, cutoff=0.75)
    shown = [repr(os.path.join(directory, f)) for f in near]
    return f"; did you mean {' or '.join(shown)}?" if near else ""


def _module_name_for(path: str) -> str:
    """The name a pipeline file is imported under: its own (``pipe`` for ``pipe.py``), as
    ``import pipe`` from its directory would, so that what it defines pickles by reference
    for processes it starts itself (a spawn or forkserver ``multiprocessing.Pool``, a
    ``ProcessPoolExecutor``: such children import it by that name, and hung, each dying on a
    private name) and a sibling's ``import pipe`` is the same module. A private name where
    its own cannot be imported or could mean another module (``types.py``, ``my-prep.py``)."""
    stem = os.path.splitext(os.path.basename(path))[0]
    if stem.isidentifier() and not keyword.iskeyword(stem) and not _taken(stem, path):
        return stem
    digest = hashlib.sha256(os.fsencode(path)).hexdigest()[:12]
    return f"_snap_pipeline_{stem}_{digest}"


def _same_file(a: str | None, b: str) -> bool:
    try:
        return a is not None and os.path.samefile(a, b)
    except OSError:
        return False


def _put_on_path(directory: str) -> None:
    """Put ``directory`` on ``sys.path`` (if it is not there) right after the standard
    library's entries, not first as ``python file.py`` does: it stays there for the caller's
    process and every process it starts later, and first, a ``json.py`` or ``random.py``
    beside the pipeline would be the standard library's module to them (a ``spawn`` child
    importing json died). Sibling modules still come before installed packages."""
    with _naming:  # (two threads put it there twice)
        if directory in sys.path:
            return
        last = -1
        for i, entry in enumerate(sys.path):
            if is_stdlib(entry):
                last = i
        sys.path.insert(last + 1, directory)
        child.CODE_DIRS.add(directory)  # (after snap's own imports in the processes it starts)


def _taken(name: str, path: str) -> bool:
    """Whether ``import name`` is, or could be, a module other than the file at ``path``
    (imported already, or found by any importer on the path without the file's directory)."""
    if name in sys.modules:
        return not _same_file(getattr(sys.modules[name], "__file__", None), path)
    directory = os.path.dirname(path)
    others = [p for p in sys.path if absolute_or_none(p or os.curdir) != directory]
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        try:
            spec = find(name, others) if finder is PathFinder else find(name, None)
        except Exception:  # an importer that cannot tell: take no chance
            return True
        if spec is not None and not _same_file(spec.origin, path):
            return True
    return False


def _file_path(target: str) -> str:
    """The absolute path of a file target (``file://`` as OUTPUT and ``--input`` take it; a
    ``..`` after a link as the OS takes it: :mod:`.os_paths`)."""
    return os_paths.absolute(target.removeprefix("file://"))


def _check_file(path: str, target: str, what: str, spec: str) -> None:
    """Raise what keeps the pipeline file at ``path`` from being read: missing, not a file,
    or an OS error (a directory above it this user may not enter, with its owner and mode, as
    ``--input`` says it; a loop of links), by its errno (:func:`.faults.fault`)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise PipelineLoadError(f"{what} file {target!r} is not a file (from {spec!r})")
        os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
    except FileNotFoundError:
        raise PipelineLoadError(
            f"{what} file {target!r} not found (from {spec!r}){_near_files(target)}"
        ) from None
    except OSError as err:
        said = faults.fault(err, path, reading=True)
        raise PipelineLoadError(
            f"{what} file {target!r} cannot be read (from {spec!r}): {said}"
        ) from err


def _not_python_file(target: str) -> str:
    """For a module name that is a file's name here (``prep``, ``prep.txt``, made a module
    name as it has no ``.py``): it is taken as a module only a file ending in .py is read
    as (it was told to run from the directory that contains it, which it was)."""
    if not os.path.isfile(target):
        return ""
    return (
        f"{target!r} is a file here, but a pipeline file is read as Python only when its "
        f"name ends in .py (a name without it is a module's, package.module): rename it "
        f"{os.path.splitext(target)[0]}.py"
    )


def _import_target(target: str, what: str, spec: str) -> Any:
    if is_file_target(target):
        path = _file_path(target)
        _check_file(path, target, what, spec)
        _put_on_path(os.path.dirname(os.path.realpath(path)))  # as `python file.py` does,
        # for sibling imports: a link's target's directory (the link's: "No module named")
        with _file_lock(path):
            return _import_file(path, target, what, spec)
    if "" not in sys.path and (here := absolute_or_none(os.curdir)) is not None:
        _put_on_path(here)  # as `python -m` does (none where the directory was deleted)
    token = _LOADING.set(target)
    try:
        with bytecode.fresh_imports(codedeps.is_user_file):
            return importlib.import_module(target)
    except ModuleNotFoundError as err:
        if err.name and target.startswith(err.name):
            todo = (
                cwd_gone(target)
                or _not_python_file(target)
                or "run from the directory that contains it, or give a file path"
            )
            raise PipelineLoadError(
                f"{what} module {target!r} not found (from {spec!r}); {todo}"
            ) from err
        raise PipelineLoadError(
            f"importing {what} module {target!r} failed:\n{format_user_traceback(err)}"
        ) from err
    except (Exception, SystemExit) as err:  # SystemExit: exited 0 with nothing done, silently
        raise PipelineLoadError(
            f"importing {what} module {target!r} failed:\n{format_user_traceback(err)}"
            f"{_exit_hint(err)}"
        ) from err
    finally:
        _LOADING.reset(token)


def _file_lock(path: str) -> threading.RLock:
    """The lock of the pipeline file at ``path`` (one per file, whatever path names it), held
    while it is imported: a file is put in ``sys.modules`` before its code runs, and a second
    thread (two ``snap.create`` of one pipeline at once) took that half-run module and found
    no function in it. Re-entrant: a file's top level may load its own functions."""
    with _naming:
        return _file_locks.setdefault(os.path.realpath(path), threading.RLock())


_LOADING: contextvars.ContextVar[str | None] = contextvars.ContextVar("snap_loading", default=None)


def loading() -> str | None:
    """The pipeline (or inputs) file this thread is importing to find a function in, if any:
    a ``snap.create`` its top level runs then is refused (:func:`.guards.refuse_in_import`)."""
    return _LOADING.get()


def _import_file(path: str, target: str, what: str, spec: str) -> Any:
    """Import the pipeline file at ``path`` (or take it from ``sys.modules``, unless it was
    edited since); its lock (:func:`_file_lock`) is held."""
    bytecode.drop_stale([path])  # (else an edit within a second of the last import is lost)
    with _naming:  # (a name is chosen and taken at once: two files named prep.py in two
        name = _module_name_for(path)  # threads got the same one)
        ours = shipping.FROM_FILES.get(name) == path
        if name in sys.modules and not (ours and _stamps.get(path) != _stamp(path)):
            shipping.FROM_FILES[name] = path
            return sys.modules[name]
        stamp = _stamp(path)  # (taken before it is read: an edit meanwhile counts next time)
        module_spec = importlib.util.spec_from_file_location(name, path)
        if module_spec is None or module_spec.loader is None:  # not a .py (.pyw, .so ...) name
            notebook = path.endswith(".ipynb")
            raise PipelineLoadError(
                f"{what} file {target!r} cannot be imported: Python imports source files "
                "named *.py"
                + (
                    "; a notebook's function is given to snap.create itself in the notebook, "
                    "or exported to a .py file (jupyter nbconvert --to script)"
                    if notebook
                    else f"; name it {os.path.splitext(target)[0]}.py"
                )
            )
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        shipping.FROM_FILES[name] = path
        if stamp is not None:
            _stamps[path] = stamp
    token = _LOADING.set(target)
    try:
        with bytecode.fresh_imports(codedeps.is_user_file):  # (its helpers' .pyc too)
            module_spec.loader.exec_module(module)
    except BaseException as err:
        with _naming:
            if sys.modules.get(name) is module:
                del sys.modules[name]
            shipping.FROM_FILES.pop(name, None)
        if isinstance(err, KeyboardInterrupt):
            raise
        raise PipelineLoadError(
            f"importing {what} file {target!r} failed:\n{format_user_traceback(err)}"
            f"{_package_hint(err, path, spec)}{_exit_hint(err)}"
        ) from err
    finally:
        _LOADING.reset(token)
    return module


def _exit_hint(err: BaseException) -> str:
    """For a module that exits when imported: a script's command-line parsing or its end."""
    if not isinstance(err, SystemExit):
        return ""
    return (
        "\nit exits when imported (argparse's parse_args() or sys.exit() at its top level?): "
        "snap imports it to find the function, so run the script's own work only under "
        '`if __name__ == "__main__":`'
    )


def _package_hint(err: BaseException, path: str, spec: str) -> str:
    """For a file of a package that imports relatively (as ``python file.py`` fails too):
    the module spec to give instead, and where to run it from."""
    if not (isinstance(err, ImportError) and "relative import" in str(err)):
        return ""
    parts, directory = [os.path.splitext(os.path.basename(path))[0]], os.path.dirname(path)
    while os.path.isfile(os.path.join(directory, "__init__.py")):
        parts.insert(0, os.path.basename(directory))
        directory = os.path.dirname(directory)
    if len(parts) == 1:
        return ""
    return (
        f"\n{os.path.basename(path)} is a module of the package {'.'.join(parts[:-1])}: give "
        f"it as {'.'.join(parts)}:{spec.rpartition(':')[2]}, run from {directory}"
    )


def load_function(spec: str, what: str = "pipeline") -> Callable[..., Any]:
    """Import ``spec`` and return the function it names (cached per process)."""
    spec = _expanded(spec)
    target = spec.rpartition(":")[0]
    if is_file_target(target) and (gone := cwd_gone(target)) is not None:
        raise PipelineLoadError(f"cannot load the {what} {spec!r}: {gone}")
    path = pipeline_file(spec)  # (a file's, by its path now: "prep.py:f" after os.chdir to
    # another project gave the first's function, which ran, fingerprinted as its own file)
    key = f"{what}|{spec}" if path is None else f"{what}|{path}:{spec.rpartition(':')[2]}"
    if key in _loaded and (path is None or _stamps.get(path) == _stamp(path)):
        return _loaded[key]
    target, func_name = _split(spec, what)
    module = _import_target(target, what, spec)
    obj: Any = module
    for part in func_name.split("."):
        if not hasattr(obj, part):
            defined = sorted(  # (its own: not what it imported, typing's Any, Iterator)
                n for n, v in vars(module).items() if callable(v) and not n.startswith("_")
                and getattr(v, "__module__", None) == module.__name__
            )  # fmt: skip
            near = difflib.get_close_matches(func_name, defined, 1)
            raise PipelineLoadError(
                f"{what} {target!r} has no function {func_name!r}"
                + (f" (did you mean {near[0]!r}?)" if near else "")
                + f"; it defines: {', '.join(defined) or 'no functions'}"
            )
        obj = getattr(obj, part)
    if not callable(obj):
        raise PipelineLoadError(
            f"{what} {spec!r} is a value of type {type(obj).__name__}, not a function"
        )
    _loaded[key] = obj
    _homes[f"{what}|{spec}"] = getattr(module, "__file__", None)  # (the last one loaded)
    return obj


def home_file(spec: str, what: str = "pipeline") -> str | None:
    """The source file of the module :func:`load_function` found ``spec``'s object in."""
    return _homes.get(f"{what}|{_expanded(spec)}")


def pipeline_file(spec: str) -> str | None:
    """The absolute path of the file a ``path/to/file.py:function`` spec names, the one
    :func:`load_function` imports (``~`` expanded, ``file://`` taken off, a ``..`` after a
    link as the OS takes it, relative to the working directory of now); None for a
    ``package.module:function`` spec. What is shipped to Ray is read from it too
    (:func:`.ray_code.collect`): the two cannot disagree."""
    target = _expanded(spec).rpartition(":")[0]
    return _file_path(target) if is_file_target(target) else None


def _expanded(spec: str) -> str:
    if spec.startswith("~"):  # (a shell leaves '~/prep.py:f' quoted, or after a '=')
        head, sep, func = spec.rpartition(":")
        spec = os.path.expanduser(head) + sep + func
    return spec


def format_user_traceback(err: BaseException) -> str:
    """Format ``err`` the way Python would, showing only the user's frames: with the
    exceptions it was raised from or while handling (``raise X(...) from e``: the cause is
    often the real failure, and was left out), an exception group's members and notes."""
    described = traceback.TracebackException.from_exception(err)
    package_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    pending, seen = [described], set()
    while pending:  # (every exception of the chain and the groups, each once)
        te = pending.pop()
        if id(te) in seen:
            continue
        seen.add(id(te))
        te.stack = traceback.StackSummary.from_list(
            [f for f in te.stack if not _snaps_or_importlibs(f.filename, package_dir)]
        )
        pending += [t for t in (te.__cause__, te.__context__) if t is not None]
        pending += getattr(te, "exceptions", None) or []  # (a group's: Python 3.11+)
    return "".join(described.format()).rstrip("\n")


def _snaps_or_importlibs(filename: str, package_dir: str) -> bool:
    return (absolute_or_none(filename) or "").startswith(package_dir) or "importlib" in filename
