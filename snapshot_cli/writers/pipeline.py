"""Resolving the user's pipeline function, hashing its code, checking a call of it.

A PIPELINE is ``path/to/file.py:function`` or ``package.module:function`` (the CLI), or a
function object (the Python API). Worker processes load a spec again by name; a function
that is not importable by name is shipped by value instead (see :mod:`.shipping`).
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from ..console import named
from ..errors import OptionError, PipelineLoadError, SnapshotExistsError
from ..manifest import Manifest
from . import codedeps, shipping
from .importing import home_file, load_function
from .input_names import as_text


@dataclass(frozen=True)
class PipelineRef:
    """A loadable reference to the pipeline: its spec, the function, and its code hash."""

    spec: str  # "" when the function is shipped by value
    function: Callable[..., Any]
    code_hash: str
    # the code hash an earlier snap gave it, where another: by name, before the function's
    # name counted (2026-11-30); by value, before a logger counted by its name (2026-12-01)
    earlier_hash: str = ""
    # a spec's files as hashed, ``{path: digest}``: each worker checks them (check_imported)
    files: dict[str, str] = field(default_factory=dict)
    # a function sent by value: the files of your modules its identity counted (recorded)
    used: dict[str, str] = field(default_factory=dict)
    # and the digest of each of its parts (value_identity: recorded, named where one differs)
    parts: dict[str, str] = field(default_factory=dict)

    @property
    def recorded_files(self) -> dict[str, str]:
        """The files the manifest records (``pipeline.files``), to name one that changed."""
        return self.files or self.used

    @property
    def by_value(self) -> bool:
        return not self.spec

    @property
    def name(self) -> str:
        return getattr(self.function, "__qualname__", repr(self.function))

    @property
    def spec_text(self) -> str:
        """The spec as the manifest records it: Unicode text, the same under every locale (a
        file's path that is not UTF-8, as Python holds it, made the manifest unreadable)."""
        return as_text(self.spec)

    @property
    def ragged(self) -> frozenset[str]:
        return getattr(self.function, "__snap_ragged__", frozenset())


# The scheme by which a pipeline's identity (its code hash: code_hash, file_hash, and
# shipping.identities for a function sent by value) is computed, recorded by every create as
# ``created_by.identity_scheme``. Raise it with any change to these hashes that a snap from
# before the change cannot recognise (continued() recognises older schemes' hashes; an older
# snap cannot know a newer one's): an older snap then says the snapshot was made by a newer
# snap, not "different pipeline code" with advice to --overwrite it. 1: the files' bytes;
# 2: and the name the spec gives the function (2026-11-30); 3: a logger a function sent by
# value uses, counted by its name (2026-12-01); 4: a decorator's wrapper by its own source
# (it was the source of the function it wraps, so an edit of the decorator went unseen) and
# a class sent by value by its attributes' values too (2026-12-06); 5: only the globals a
# function sent by value reads, not a global named as an attribute it uses (2026-12-07).
# Snaps before 2026-12-01 record none.
IDENTITY_SCHEME = 5


def code_hash(spec: str, fn: Callable[..., Any]) -> str:
    """sha256 of :func:`file_hash` and of the name the spec gives the function: two functions
    of one file are two pipelines (``q.py:triple`` found the snapshot of ``q.py:double`` up
    to date, and a grow mixed their records). The spec's name, not ``__qualname__``: two made
    by one factory (``scaled.<locals>.fn``), wrapped by one decorator or bound to two
    objects (``small.run``, ``large.run``: ``Pre.run``) share a qualname."""
    return _named(file_hash(fn), spec)


def spec_name(spec: str) -> str:
    """The attribute path a spec names in its module (``q.py:small.run`` → ``small.run``)."""
    return spec.rsplit(":", 1)[-1]


def _named(digest: str, spec: str) -> str:
    return hashlib.sha256(f"{digest}\nfunction={spec_name(spec)}".encode()).hexdigest()


def continued(
    ref: PipelineRef, made: Manifest | None, runs: list[dict[str, Any]], url: str = ""
) -> PipelineRef:
    """``ref`` with the code hash of the committed snapshot ``made`` (or, without one, of an
    unfinished first run in ``runs``) if that was made before the function's name counted
    (2026-11-30) by this function, the name its spec gives: the snapshot stays up to date,
    the run resumes, and their next versions keep that hash. Another function's is other
    code, as it should be. A function sent by value likewise keeps the hash snap before
    2026-12-01 gave it where that differs only in how a logger it uses counted."""
    if made is not None:
        pairs = [(made.pipeline.get("spec"), made.fingerprint_parts.get("code"))]
    else:
        pairs = [(r.get("pipeline"), (r.get("parts") or {}).get("code")) for r in runs]
    if ref.by_value:  # (made before a logger counted by its name: the hash it had then)
        if ref.earlier_hash and any(not s and c == ref.earlier_hash for s, c in pairs):
            return replace(ref, code_hash=ref.earlier_hash)
        return _comparable(ref, made, url)
    mine = spec_name(ref.spec)
    if any(spec_name(str(s or "")) == mine and c == ref.earlier_hash for s, c in pairs):
        return replace(ref, code_hash=ref.earlier_hash)
    return _comparable(ref, made, url)


def identity_scheme(made: Manifest) -> int | None:
    """The identity scheme the snapshot ``made`` records (None: made before snap recorded
    one, 2026-12-01, or by another writer)."""
    scheme = made.created_by.get("identity_scheme")
    return scheme if isinstance(scheme, int) and not isinstance(scheme, bool) else None


def _comparable(ref: PipelineRef, made: Manifest | None, url: str = "") -> PipelineRef:
    """``ref``, unless the committed snapshot ``made`` has another code hash computed by a
    newer identity scheme than this snap's: then it may be the same code, hashed as this
    snap cannot, and "different pipeline code, pass --overwrite" would throw it away."""
    if made is None or made.fingerprint_parts.get("code") == ref.code_hash:
        return ref
    theirs = identity_scheme(made)
    if theirs is None or theirs <= IDENTITY_SCHEME:
        return ref
    raise SnapshotExistsError(
        f"{url or named('OUTPUT', 'output')} holds a snapshot made by a newer snap (pipeline "
        f"identity scheme {theirs}; this snap computes scheme {IDENTITY_SCHEME}): it "
        "identifies the pipeline's code otherwise, so this snap cannot tell whether your "
        "code is the code it was made with: upgrade snap to grow or update it; pass "
        f"{named('--overwrite', 'overwrite=True')} only if you mean to replace it, computing "
        "it in full"
    )


def defining(fn: Any) -> Any:
    """The function whose code says what ``fn`` does: a ``functools.partial``'s function, a
    callable object's ``__call__``, an object's method's function (the object is made
    elsewhere: ``q.py:scale.apply``); ``fn`` itself for a function."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.ismethod(fn) and not inspect.isclass(fn.__self__):
        return fn.__func__
    call = inspect.getattr_static(type(fn), "__call__", None)
    if not (inspect.isroutine(fn) or inspect.isclass(fn)) and inspect.isfunction(call):
        return call
    return fn


def file_hash(
    fn: Callable[..., Any], home: str | None = None, seen: dict[str, str] | None = None
) -> str:
    """sha256 of the source file that defines ``fn`` (any edit to it changes the fingerprint)
    and of the files of your other modules its code reaches (:mod:`.codedeps`); with none,
    the file's own sha256, as before they counted. ``home``: the file of the module a spec
    names ``fn`` in, also hashed where ``fn`` is made there of code defined elsewhere (a
    partial's arguments, a callable object's settings). ``seen`` gets each file hashed, as
    ``{path: its digest}`` (what :func:`check_imported` compares)."""
    seen = {} if seen is None else seen
    code = defining(fn)
    try:
        path = inspect.getsourcefile(inspect.unwrap(code))
    except TypeError:
        path = None
    if not path or not os.path.isfile(path):
        raise PipelineLoadError(
            f"cannot find the source file of {fn!r} to fingerprint it: a pipeline is a "
            "Python function in a .py file (or a functools.partial of one, or an object of a "
            "class with __call__); wrap a built-in or compiled function in one (def pipeline("
            "x): return f(x))"
        )
    own = seen[path] = codedeps.file_digest(path)
    mine = os.path.realpath(path)
    if code is not fn and home and os.path.isfile(home) and os.path.realpath(home) != mine:
        seen[home] = codedeps.file_digest(home)
        own = hashlib.sha256(f"{own}\nmade in={seen[home]}".encode()).hexdigest()
    others = sorted((m, p) for m, p in codedeps.user_modules(fn).items() if p != mine)
    if not others:
        return own
    h = hashlib.sha256(own.encode())
    for module, dep in others:  # by module name, not path: a moved checkout keeps its snapshot
        seen[dep] = codedeps.file_digest(dep)
        h.update(f"\n{module}={seen[dep]}".encode())
    return h.hexdigest()


def resolve(pipeline: str | Callable[..., Any]) -> PipelineRef:
    """Accept a spec string (CLI) or a function object (Python API).

    A function that workers can import by name keeps its spec; any other (defined in a
    notebook or in the script being run, a closure, a lambda) goes by value: see shipping.py.
    """
    if isinstance(pipeline, str):
        fn, seen = load_function(pipeline), dict[str, str]()
        digest = file_hash(fn, home_file(pipeline), seen)
        return PipelineRef(pipeline, fn, _named(digest, pipeline), digest, seen)
    if not callable(pipeline):
        raise PipelineLoadError(
            f"pipeline must be a function or a spec string, got {pipeline!r:.100}"
            + _not_callable_hint(pipeline)
        )
    spec = shipping.importable_spec(pipeline)
    if spec is not None:
        digest = file_hash(pipeline, None, seen := dict[str, str]())
        return PipelineRef(spec, pipeline, _named(digest, spec), digest, seen)
    code, earlier, used, parts = shipping.identities(pipeline)
    return PipelineRef("", pipeline, code, earlier, used=used, parts=parts)


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


def defaults(function: Callable[..., Any]) -> dict[str, Any]:
    """The function's parameters' defaults ({} where Python cannot tell its signature)."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return {}
    return {p.name: p.default for p in parameters if p.default is not p.empty}


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
        meant = [f"{m[0]}= for {k}=" for k, m in close.items() if m]
        hint = f" (did you mean {', '.join(meant)}?)" if meant else ""
        how = (
            "with each input as its argument"
            if with_input
            else "once with no argument, as no inputs were given "
            + named("(--input, --inputs-from)", "(inputs=, inputs_from=)")
        )
        raise OptionError(
            f"{name}{bare} cannot be called as {name}({shown}): {err}{hint}; it is called "
            f"{how}, and each {named('--param', 'key of params=')} is a keyword argument"
        ) from None


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


def why_no_records(fn: Any) -> str:
    """What to add to "the pipeline made no records": a plain function that neither yields
    nor returns its records returns None, taken as no records; a generator yielded none."""
    fn = inspect.unwrap(defining(fn))  # (a callable object's __call__, a partial's function)
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        return " (no call of its generator yielded a record)"
    return (  # (a call's empty list or table is no records either: it returned something)
        "; every call returned no records (an empty list, table or batch, or None: a "
        "function that neither yields nor returns its records returns None)"
    )


def files_record(seen: dict[str, str]) -> dict[str, str]:
    """The files a by-name pipeline's fingerprint hashed (``seen``: the function's own file
    first), ``{path: digest}`` with each path relative to that file's directory (a moved
    checkout names the same ones), for the manifest's ``pipeline.files``: a later create
    whose code differs names the files that did (:func:`files_changed`)."""
    if not seen:
        return {}
    base = os.path.dirname(next(iter(seen)))
    return {os.path.relpath(p, base) if p.startswith(base + os.sep) else p: d
            for p, d in seen.items()}  # fmt: skip


def files_changed(then: Any, now: dict[str, str]) -> str:
    """The files :func:`files_record` recorded ``then`` whose bytes ``now`` differ, or that
    one side has alone, said for "different pipeline code (...)"; "" where ``then`` is not
    such a record (a snapshot of snap before 2026-12-06, or one shipped by value)."""
    if not isinstance(then, dict) or not then or not all(isinstance(v, str) for v in then.values()):
        return ""
    edited = [p for p in now if p in then and then[p] != now[p]]
    added, gone = [p for p in now if p not in then], [p for p in then if p not in now]
    said = [*(f"{p} edited" for p in edited), *(f"{p} now used" for p in added),
            *(f"{p} no longer used" for p in gone)]  # fmt: skip
    return "; ".join(said[:5]) + (f"; and {len(said) - 5} more" if len(said) > 5 else "")


def check_imported(files: dict[str, str]) -> None:
    """Refuse to run a worker's import of the pipeline where a file the create fingerprinted
    (``files``, ``{path: digest}`` then) holds other bytes now: one edited while the create
    ran (a ``git pull``) had workers run the new code under the old fingerprint, and the
    snapshot, "up to date" with the old code, mixed both. A file not here (a Ray worker on
    another machine, given the code otherwise) is not judged.

    Raises:
        PipelineLoadError: a file changed since the create began, named.
    """
    for path, digest in files.items():
        try:
            now = codedeps.file_digest(path)
        except FileNotFoundError:
            continue
        if now != digest:
            raise PipelineLoadError(
                f"{path} changed while this create ran (edited or replaced: a git pull?), so "
                "its workers would run other code than the snapshot's fingerprint names; run "
                "the same snap create again once the files are as they should be"
            )
