"""Where a create's relative paths point: the directory it started in.

A pipeline file may change the working directory as it is imported (the common
``os.chdir(os.path.dirname(os.path.abspath(__file__)))``, so that its own files load). The
paths the user gave (OUTPUT, ``--input`` patterns, ``path/to/file.py:fn`` specs of the
pipeline and of ``--inputs-from``) are relative to the directory the command, or the call
of ``snap.create``, started in, not to the one the pipeline chose: :class:`Given`, made
before any of the user's code runs, knows that directory, and where the working directory
moved since, the paths are made absolute from it and used in place of the ones given.
What is recorded for them is what was given (a snapshot's inputs are identified by their
absolute paths either way: it stays up to date). Worker processes start in the directory
the pipeline chose, where its function runs in this process too, and import it by its
absolute path.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import os
from collections.abc import Callable, Iterator
from typing import Any

from .. import os_paths, storage
from . import importing
from . import inputs as inputs_mod
from . import pipeline as pipeline_mod
from .input_names import as_text

# The directory a command started in, where it imported user code before its create began
# (the CLI reads --param for the function's annotations): see :func:`kept`.
_started: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "snap_started_in", default=None
)


def _cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # (deleted: relative paths fail as they did, said as such)
        return None


@contextlib.contextmanager
def kept() -> Iterator[None]:
    """Within it, a create takes the working directory of now as the one it started in (the
    CLI's: reading ``--param`` imports the pipeline before the create begins)."""
    token = _started.set(_cwd())
    try:
        yield
    finally:
        _started.reset(token)


def anchored_spec(spec: str, start: str | None) -> str:
    """A ``path/to/file.py:fn`` spec with its relative path made absolute from ``start``;
    a module spec, or an absolute path, as it is."""
    target, sep, func = spec.rpartition(":")
    if start is None or not sep or not target or not importing.is_file_target(target):
        return spec
    target = os.path.expanduser(target.removeprefix("file://"))  # (as importing reads it)
    return os.path.join(start, target) + sep + func


def anchored_path(text: str, options: dict[str, Any] | None, start: str | None) -> str:
    """A local path (or glob) relative to the working directory (``file:x``, ``file://x``
    too: :func:`.os_paths.without_scheme`), made absolute from
    ``start``; anything else (a URL, an absolute or ``~`` path, what the storage reads
    otherwise) as it is."""
    here, bare = _cwd(), os_paths.without_scheme(text)  # ("file:x" is "x": os_paths)
    if not text or start is None or here is None or "://" in bare or os.path.isabs(bare):
        return text
    try:
        fs, path = storage.resolve(text, options)
    except Exception:  # (said where the create resolves it, as before)
        return text
    if not storage.is_local(fs) or path != os_paths.resolved(os.path.join(here, bare)):
        return text  # ("~/x": not a path relative to the working directory)
    return os.path.join(start, bare)


class Given:
    """A create's paths as given, and as absolute paths from the directory it started in;
    made before any of the user's code runs."""

    def __init__(
        self,
        pipeline: str | Callable[..., Any],
        output: str | os.PathLike[str],
        inputs: Any,
        inputs_from: Any,
        options: dict[str, Any] | None,
    ) -> None:
        self.start = _started.get() or _cwd()
        self.pipeline, self.inputs, self.inputs_from = pipeline, inputs, inputs_from
        self.options = options
        self.output = anchored_path(os.fspath(output), options, self.start)

    def moved(self) -> bool:
        """Whether the working directory is no longer the one the create started in."""
        return self.start is not None and _cwd() != self.start

    def pipeline_ref(self) -> pipeline_mod.PipelineRef:
        """The pipeline, imported (a spec's file named as given: it is recorded so)."""
        if not isinstance(self.pipeline, str) or not self.moved():
            return pipeline_mod.resolve(self.pipeline)
        ref = pipeline_mod.resolve(anchored_spec(self.pipeline, self.start))
        return dataclasses.replace(ref, spec=self.pipeline)

    def job_spec(self, spec: str) -> str:
        """The spec worker processes import: from the directory the pipeline moved to, by
        its absolute path."""
        return anchored_spec(spec, self.start) if spec and self.moved() else spec

    def resolve_inputs(self, output: str) -> inputs_mod.Inputs:
        """:func:`.inputs.resolve` of the inputs given, from the directory the create started
        in; recorded as given."""
        if not self.moved():
            return inputs_mod.resolve(self.inputs, self.inputs_from, self.options, output=output)
        inputs, inputs_from = self.inputs, self.inputs_from  # (looked at only now: a
        if isinstance(inputs, (str, os.PathLike)):  # list of 100,000 paths costs nothing else)
            inputs = anchored_path(os.fspath(inputs), self.options, self.start)
        elif isinstance(inputs, (list, tuple)) and all(  # (else items)
            isinstance(v, (str, os.PathLike)) for v in inputs
        ):
            inputs = [anchored_path(os.fspath(v), self.options, self.start) for v in inputs]
        if isinstance(inputs_from, str):
            inputs_from = anchored_spec(inputs_from, self.start)
        found = inputs_mod.resolve(inputs, inputs_from, self.options, output=output)
        if "patterns" in found.description:
            given = [self.inputs] if isinstance(self.inputs, (str, os.PathLike)) else self.inputs
            found.description["patterns"] = [as_text(os.fspath(p)) for p in given]
        if isinstance(self.inputs_from, str) and "inputs_from" in found.description:
            found.description["inputs_from"] = self.inputs_from
        return found
