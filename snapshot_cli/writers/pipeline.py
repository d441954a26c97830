"""Finding the user's pipeline function, hashing its code, parsing ``--param`` and inputs.

A PIPELINE is ``path/to/file.py:function`` or ``package.module:function`` (the CLI), or a
function object (the Python API). Worker processes load a spec again by name; a function
that is not importable by name is shipped by value instead (see :mod:`.shipping`).
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.util
import inspect
import json
import keyword
import math
import os
import sys
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.machinery import PathFinder
from typing import Any

from ..errors import OptionError, PipelineLoadError
from . import codedeps, shipping

_loaded: dict[str, Callable[..., Any]] = {}


@dataclass(frozen=True)
class PipelineRef:
    """A loadable reference to the pipeline: its spec, the function, and its code hash."""

    spec: str  # "" when the function is shipped by value
    function: Callable[..., Any]
    code_hash: str

    @property
    def by_value(self) -> bool:
        return not self.spec

    @property
    def name(self) -> str:
        return getattr(self.function, "__qualname__", repr(self.function))

    @property
    def ragged(self) -> frozenset[str]:
        return getattr(self.function, "__snap_ragged__", frozenset())


def _split(spec: str, what: str) -> tuple[str, str]:
    target, sep, func = spec.rpartition(":")
    if not sep or not target or not func or not func.replace(".", "_").isidentifier():
        raise PipelineLoadError(
            f"{what} {spec!r} must look like path/to/file.py:function or package.module:function"
        )
    return target, func


def _is_file_target(target: str) -> bool:
    return target.endswith(".py") or os.sep in target or "/" in target


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


def _taken(name: str, path: str) -> bool:
    """Whether ``import name`` is, or could be, a module other than the file at ``path``
    (imported already, or found by any importer on the path without the file's directory)."""
    if name in sys.modules:
        return not _same_file(getattr(sys.modules[name], "__file__", None), path)
    directory = os.path.dirname(path)
    others = [p for p in sys.path if os.path.abspath(p or os.curdir) != directory]
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


def _import_target(target: str, what: str, spec: str) -> Any:
    if _is_file_target(target):
        path = os.path.abspath(target)
        if not os.path.isfile(path):
            raise PipelineLoadError(
                f"{what} file {target!r} not found (from {spec!r}){_near_files(target)}"
            )
        directory = os.path.dirname(path)
        if directory not in sys.path:
            sys.path.insert(0, directory)  # as `python file.py` does, for sibling imports
        name = _module_name_for(path)
        if name in sys.modules:
            shipping.FROM_FILES[name] = path
            return sys.modules[name]
        module_spec = importlib.util.spec_from_file_location(name, path)
        if module_spec is None or module_spec.loader is None:
            raise PipelineLoadError(f"{what} file {target!r} cannot be imported")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        shipping.FROM_FILES[name] = path
        try:
            module_spec.loader.exec_module(module)
        except BaseException as err:
            del sys.modules[name], shipping.FROM_FILES[name]
            if isinstance(err, KeyboardInterrupt):
                raise
            raise PipelineLoadError(
                f"importing {what} file {target!r} failed:\n{format_user_traceback(err)}"
                f"{_package_hint(err, path, spec)}{_exit_hint(err)}"
            ) from err
        return module
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` does
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as err:
        if err.name and target.startswith(err.name):
            raise PipelineLoadError(
                f"{what} module {target!r} not found (from {spec!r}); run from the directory "
                "that contains it, or give a file path"
            ) from err
        raise PipelineLoadError(
            f"importing {what} module {target!r} failed:\n{format_user_traceback(err)}"
        ) from err
    except (Exception, SystemExit) as err:  # SystemExit: exited 0 with nothing done, silently
        raise PipelineLoadError(
            f"importing {what} module {target!r} failed:\n{format_user_traceback(err)}"
            f"{_exit_hint(err)}"
        ) from err


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
    key = f"{what}|{spec}"
    if key in _loaded:
        return _loaded[key]
    target, func_name = _split(spec, what)
    module = _import_target(target, what, spec)
    obj: Any = module
    for part in func_name.split("."):
        if not hasattr(obj, part):
            defined = sorted(
                n for n, v in vars(module).items() if callable(v) and not n.startswith("_")
            )
            raise PipelineLoadError(
                f"{what} {target!r} has no function {func_name!r}; it defines: "
                f"{', '.join(defined) or 'no functions'}"
            )
        obj = getattr(obj, part)
    if not callable(obj):
        raise PipelineLoadError(
            f"{what} {spec!r} is a value of type {type(obj).__name__}, not a function"
        )
    _loaded[key] = obj
    return obj


def code_hash(fn: Callable[..., Any]) -> str:
    """sha256 of the source file that defines ``fn`` (any edit to it changes the fingerprint)
    and of the files of your other modules its code reaches (:mod:`.codedeps`); with none,
    the file's own sha256, as before they counted."""
    try:
        path = inspect.getsourcefile(inspect.unwrap(fn))
    except TypeError:
        path = None
    if not path or not os.path.isfile(path):
        raise PipelineLoadError(f"cannot find the source file of {fn!r} to fingerprint it")
    own = codedeps.file_digest(path)
    mine = os.path.realpath(path)
    others = sorted((m, p) for m, p in codedeps.user_modules(fn).items() if p != mine)
    if not others:
        return own
    h = hashlib.sha256(own.encode())
    for module, dep in others:  # by module name, not path: a moved checkout keeps its snapshot
        h.update(f"\n{module}={codedeps.file_digest(dep)}".encode())
    return h.hexdigest()


def resolve(pipeline: str | Callable[..., Any]) -> PipelineRef:
    """Accept a spec string (CLI) or a function object (Python API).

    A function that workers can import by name keeps its spec; any other (defined in a
    notebook or in the script being run, a closure, a lambda) goes by value: see shipping.py.
    """
    if isinstance(pipeline, str):
        fn = load_function(pipeline)
        return PipelineRef(pipeline, fn, code_hash(fn))
    if not callable(pipeline):
        raise PipelineLoadError(
            f"pipeline must be a function or a spec string, got {pipeline!r:.100}"
            + _not_callable_hint(pipeline)
        )
    spec = shipping.importable_spec(pipeline)
    if spec is not None:
        return PipelineRef(spec, pipeline, code_hash(pipeline))
    return PipelineRef("", pipeline, shipping.identity(pipeline))


def check_arguments(pipeline: object, output: object) -> None:
    """Refuse ``snap.create(OUTPUT, function)`` (the two swapped) and an OUTPUT that is not a
    path or URL, before anything is loaded."""
    if callable(output) and not callable(pipeline):
        name = getattr(output, "__name__", "function")
        raise OptionError(
            f"snap.create takes the function first, then OUTPUT: snap.create({name}, "
            f"{pipeline!r:.100}, ...), not snap.create({pipeline!r:.100}, {name}, ...)"
        )
    if not isinstance(output, (str, os.PathLike)):
        raise OptionError(
            f"OUTPUT must be a path or URL (a str or pathlib.Path), got {type(output).__name__}"
            f" {output!r:.100}"
        )


def check_call(function: Callable[..., Any], params: dict[str, Any], with_input: bool) -> None:
    """Refuse, before any work, params (or an input) the function cannot take: a misspelt
    ``--param`` used to fail in the first task, after every input was read and identified.
    Functions whose signature Python cannot tell, or that take ``**kwargs``, are not judged."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return
    args = ("<input>",) if with_input else ()
    try:
        signature.bind(*args, **params)
    except TypeError as err:
        name = getattr(function, "__name__", "the pipeline")
        plain = [p.replace(annotation=p.empty) for p in signature.parameters.values()]
        bare = signature.replace(parameters=plain, return_annotation=signature.empty)
        shown = ", ".join([*args, *(f"{k}=..." for k in params)])
        names = [p.name for p in signature.parameters.values() if p.kind != p.VAR_POSITIONAL]
        unknown = [k for k in params if k not in signature.parameters]
        close = {k: difflib.get_close_matches(k, names, 1) for k in unknown}
        hint = "".join(f"; did you mean {m[0]}= for {k}=?" for k, m in close.items() if m)
        how = (
            "with each input as its argument"
            if with_input
            else "once with no argument, as no inputs were given (--input, --inputs-from)"
        )
        raise OptionError(
            f"{name}{bare} cannot be called as {name}({shown}): {err}{hint}; it is called "
            f"{how}, and each --param is a keyword argument"
        ) from None


def parse_params(items: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """``KEY=VALUE`` strings → dict; values are JSON literals, else plain strings."""
    params: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise OptionError(f"--param {item!r} must look like KEY=VALUE with KEY a Python name")
        if key in params:
            raise OptionError(f"--param {key} is given twice; give each parameter once")
        try:
            params[key] = json.loads(raw, parse_constant=_no_constant, parse_float=_finite)
        except (json.JSONDecodeError, _NotJson):
            params[key] = raw
        except (ValueError, RecursionError) as err:  # an integer over 4,300 digits, deep nesting
            raise OptionError(f"--param {key}: {str(err)[:200]}") from err
    return params


class _NotJson(Exception):
    pass


def _no_constant(name: str) -> Any:
    """Python's json reads NaN and Infinity, which JSON has not: such a VALUE is a string."""
    raise _NotJson(name)


def _finite(text: str) -> float:
    """A JSON number too large for a float (1e999) would be infinity: the VALUE is a string."""
    value = float(text)
    if not math.isfinite(value):
        raise _NotJson(text)
    return value


def check_params(params: object) -> dict[str, Any]:
    """``params=`` as keyword arguments of JSON values (a numpy scalar becomes the Python
    number it holds), or an OptionError."""
    if params is None:
        return {}
    if not isinstance(params, Mapping):
        raise OptionError(
            f"params must be a dict of keyword arguments (name -> JSON value), got a "
            f"{type(params).__name__}: {params!r:.80}"
        )
    bad = [k for k in params if not (isinstance(k, str) and k.isidentifier())]
    if bad:
        raise OptionError(f"params keys must be Python names (keyword arguments), got {bad}")
    return {key: check_json(value, f"params[{key!r}]") for key, value in params.items()}


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python number it holds (json.dumps' default); an array is not
    taken: the function would get a list where it was given an array."""
    if type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0:
        return value.item()
    hint = " (pass a list, arr.tolist(): the function receives JSON values)" * hasattr(
        value, "tolist"
    )
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable{hint}")


def check_json(value: Any, what: str) -> Any:
    """Return ``value`` as its JSON round trip, or explain why it cannot be one."""
    try:
        return json.loads(json.dumps(value, allow_nan=False, default=_plain))
    except (TypeError, ValueError) as err:
        hint = (
            " (NaN and infinities have none: pass a string such as 'inf' and convert it in "
            "the function)"
            if str(err).startswith("Out of range float")
            else ""
        )
        raise OptionError(
            f"{what} must be JSON (str, numbers, bools, lists, dicts; it is kept in the "
            f"manifest): {err}{hint}"
        ) from err


def user_frames(err: BaseException) -> traceback.StackSummary:
    """The traceback of ``err`` without snap's own frames: what the user needs to see."""
    package_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frames = [
        f
        for f in traceback.extract_tb(err.__traceback__)
        if not os.path.abspath(f.filename).startswith(package_dir + os.sep)
        and "importlib" not in f.filename
    ]
    return traceback.StackSummary.from_list(frames)


def format_user_traceback(err: BaseException) -> str:
    """Format ``err`` the way Python would, showing only the user's frames."""
    frames = user_frames(err).format()
    lines = ["Traceback (most recent call last):\n", *frames] if frames else []
    lines += traceback.format_exception_only(type(err), err)
    return "".join(lines).rstrip("\n")


def _not_callable_hint(pipeline: object) -> str:
    """What to give instead of a value that is not a function."""
    if inspect.isgenerator(pipeline) or inspect.iscoroutine(pipeline):
        name = getattr(pipeline, "__name__", "f")
        return (
            f": give the function ({name}), not what calling it made ({name}()); snap calls "
            "it for each task itself, and a later create compares its code"
        )
    if isinstance(pipeline, os.PathLike):
        return f": give the file and its function as one string, '{os.fspath(pipeline)}:function'"
    if isinstance(pipeline, (list, tuple, dict)) or hasattr(pipeline, "__iter__"):
        return (
            ": snap snapshots what a function yields: give one that yields these records "
            "(def records(): yield from rows); a later create is compared by the function's "
            "code and inputs, not by the records"
        )
    return ""
