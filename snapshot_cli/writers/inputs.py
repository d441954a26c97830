"""What the pipeline is called on, and what identifies it for the fingerprint.

Inputs are files (``--input`` globs and URLs; in Python ``inputs="raw/*.jpg"`` or a list of
paths) or items (``--inputs-from module:function``; in Python a list of JSON values, or
``inputs_from=`` a function returning one). A list of strings is read as paths and globs;
a list holding anything else (numbers, lists, dicts, with or without strings) as items.

Identity, as make and git do it: a cheap *stat identity* (path, size, and the mtime,
generation or checksum a listing reports) is compared first; only when it differs from
what the snapshot recorded is the *content identity* computed (a checksum the storage keeps,
GCS crc32c or S3 ETag, else the sha256 of the bytes), and the fingerprint is made from
content. So a file rewritten with the same bytes keeps its snapshot up to date, and a changed
file is still detected.
"""

from __future__ import annotations

import functools
import glob
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import faults, layout, os_paths, storage
from ..console import named
from ..errors import OptionError
from ..globbing import loop_hint
from ..manifest import canonical_json, fingerprint, sha256_text
from . import contents
from . import items as items_mod
from .chunking import input_name
from .input_identity import identity, recorded_before_inodes
from .input_names import as_text, by_bytes, directories_only, given, held_as_bytes, meant

log = logging.getLogger("snapshot_cli")


@dataclass(frozen=True)
class InputFile:
    """One input file: what the pipeline receives (``url``) and what identifies it.

    ``version`` is cheap to get (a listing: mtime, generation or checksum); ``content`` is a
    checksum of the bytes the storage reports (GCS crc32c, S3 ETag), or "" when only
    :func:`.contents.hash_file` can tell (local disk, HDFS). ``name`` is what identifies it
    (``url`` where not given): a local file's by its bytes (:func:`by_bytes`). ``etag_key``:
    the key of an S3 multipart upload's ETag, whose content is the MD5 of its bytes, said
    as a one-part upload's ETag (:mod:`.input_identity`).
    """

    url: str
    size: int
    version: str
    content: str
    name: str = ""
    etag_key: str = ""

    def __post_init__(self) -> None:
        if not self.name:
            object.__setattr__(self, "name", self.url)

    def stat_identity(self) -> list[Any]:
        return [self.name, self.size, self.version]


def expand_inputs(
    patterns: list[str], storage_options: dict[str, Any] | None = None, output: str | None = None
) -> list[InputFile]:
    """Expand ``--input`` globs and URLs into a sorted, de-duplicated list of files; none
    inside ``output`` (the snapshot's URL: its own files are no input, and a glob such as
    ``data/**`` with OUTPUT ``data/snap`` would take them in from the second run on).

    Raises:
        OptionError: a pattern matched nothing (but the snapshot's files), or names a directory.

    A pattern whose glob matches nothing but which is itself a file's name (``a[1].jpg``,
    ``what?.txt``) is that file, as a shell passes an unmatched pattern on as it is
    (:func:`storage.matching`).
    """
    inside = None if output is None else output.rstrip("/") + "/"
    found: dict[str, InputFile] = {}
    listed = time.time()
    for pattern in patterns:
        if not pattern:  # (storage's "empty path or URL" named neither --input nor inputs=)
            raise OptionError(f"{given(pattern)} is an empty path: give a file, glob or URL")
        if said := directories_only(pattern):
            raise OptionError(said)
        wild = glob.has_magic(pattern)
        fs, path = storage.resolve(pattern, storage_options)
        try:
            infos = {p: _followed(fs, p, i, pattern) for p, i in storage.matching(fs, path).items()}
        except OptionError as err:
            raise OptionError(f"{given(pattern)} {err}") from err
        urls = {_url(fs, p): i for p, i in infos.items() if i.get("type") != "directory"}
        files = {u: i for u, i in urls.items() if not (inside and u.startswith(inside))}
        own = len(urls) - len(files)
        others = snapshots_files(list(files), pattern)
        files = {u: i for u, i in files.items() if u not in others}
        if not files:
            if own and not others:
                raise OptionError(
                    f"{given(pattern)} matched only files under OUTPUT ({output}), which "
                    "are the snapshot's own: no input may be inside the snapshot being written; "
                    f"point {named('--input', 'inputs=')} at the inputs, or write the snapshot "
                    "elsewhere"
                )
            if others:
                raise OptionError(
                    f"{given(pattern)} matched only files of snapshots "
                    f"({', '.join(sorted(set(others.values())))}); point it at the inputs, "
                    "or name the files meant (old/shards/*.arrow)"
                )
            if infos and "**" in pattern:  # (empty/** matches empty itself: "is a directory;
                raise OptionError(  # pass a glob such as 'empty/**/*'", which matches nothing)
                    f"{given(pattern)} matched only directories, no file in them: check the "
                    "path, or that the files are there"
                )
            if infos and wild:
                raise OptionError(
                    f"{given(pattern)} matched only directories; pass a glob such as "
                    f"'{pattern.rstrip('/')}/*' to use the files in them"
                )
            if infos:
                raise OptionError(
                    f"{given(pattern)} is a directory; pass a glob such as "
                    f"'{pattern.rstrip('/')}/*' to use the files in it"
                )
            raise OptionError(
                f"{given(pattern)} matched no files{meant(pattern, patterns, not found)}"
                + faults.missing_bucket_hint(fs, path)
                + loop_hint(fs, path)
            )
        if others:
            roots = sorted(set(others.values()))
            log.warning(
                "%s: left out %d files of the snapshot%s at %s (snap's own files, no input; a "
                "pattern that names shards/, _runs/, _versions/ or manifest.json takes them)",
                given(pattern), len(others), "s" * (len(roots) > 1), ", ".join(roots),
            )  # fmt: skip
        for url, info in files.items():
            size = int(info.get("size") or 0)
            version, content, etag_key = identity(info, listed)
            name = by_bytes(url) if storage.is_local(fs) else url
            found[url] = InputFile(url, size, version, content, name, etag_key)
    return sorted(found.values(), key=lambda f: (f.name, f.url))  # (in every locale's order)


def snapshots_files(urls: list[str], pattern: str) -> dict[str, str]:
    """Those of ``urls`` that are a snapshot's own files (``url -> root``) which ``pattern``
    took in by a wildcard: ``data/**`` over ``data/old-snap/`` took its shards, leases and
    manifests as inputs (and a lease's heartbeat made every run a new version). A pattern
    that names the part (``old/shards/*.arrow``) keeps what it names. Pure."""
    named = "/" + pattern.replace("\\", "/")
    found: dict[str, str] = {}
    for url in urls:
        hit = layout.own_file(url)
        if hit is not None and f"/{hit[1]}/" not in named:
            found[url] = hit[0]
    roots = set(found.values())
    for url in urls:  # a manifest.json beside such files is theirs
        root, _, name = url.rpartition("/")
        if name == layout.MANIFEST_NAME and root in roots and name not in pattern:
            found[url] = root
    return found


def _followed(fs: Any, path: str, info: dict[str, Any], pattern: str) -> dict[str, Any]:
    """``info`` of what ``path`` is: for a symbolic link, its target's (a local glob lists the
    link itself: its mtime, not the file's, and a changed file looked unchanged). A broken
    link, a FIFO, a socket or a device is an OptionError: reading one fails or blocks (its
    message goes on from the pattern, which the caller names)."""
    if info.get("islink"):
        try:
            info = storage.file_info(fs, path)
        except FileNotFoundError:
            raise OptionError(
                f"matched {_url(fs, path)}, a link to "
                f"{info.get('destination')}, which does not exist; remove it or narrow the pattern"
            ) from None
    if info.get("type") not in ("file", "directory"):  # (local disk's "other")
        raise OptionError(
            f"matched {_url(fs, path)}, which is not a regular file (a "
            "FIFO, socket or device: reading it blocks or fails); remove it or narrow the pattern"
        )
    return info


def _url(fs: Any, path: str) -> str:
    """An input's URL as runs record it (an absolute path on local disk), one that resolves
    to the same file in a worker: on HDFS with the NameNode's host and port, which
    ``unstrip_protocol`` leaves out (``hdfs:///path`` opened the default filesystem); a
    ``..`` after a link as the OS takes it (:mod:`.os_paths`)."""
    return os_paths.absolute(path) if storage.is_local(fs) else storage.to_url(fs, path)


@dataclass
class Inputs:
    """The inputs of a run: the values passed to the function, and their identities."""

    items: list[Any]  # what the function is called with (file URLs, or JSON items)
    sizes: list[int]  # bytes per input (0 for items): tasks are planned from these
    description: dict[str, Any]  # for the manifest: count, patterns or inputs_from
    files: list[InputFile] | None = None
    storage_options: dict[str, Any] | None = None
    _records: list[list[Any]] | None = field(default=None, repr=False)

    @property
    def versioned(self) -> bool:
        """Whether the listing tells every file's version (else the stat vouches for none)."""
        return self.files is None or all(f.version for f in self.files)

    @functools.cached_property
    def stat(self) -> str:
        """Hash of the cheap identities (no file is read)."""
        ids = self.items if self.files is None else [f.stat_identity() for f in self.files]
        return sha256_text(canonical_json(ids))

    def records(self, known: Mapping[tuple[str, int, str], str] | None = None) -> list[list[Any]]:
        """``[name, size, version, content]`` per input (an item: its JSON, 0, "", its JSON).

        A file's content identity is read from the listing where the storage keeps a
        checksum, taken from ``known`` (the last version's records, by name, size and
        version: an unchanged file is not read again), else computed from its bytes. Made
        once: the first call decides ``known``.
        """
        if self._records is None:
            if self.files is None:
                names = [input_name(item) for item in self.items]
                self._records = [[n, 0, "", n] for n in names]
            else:
                known = known or {}

                def kept(f: InputFile) -> str | None:
                    if not f.version:
                        return None
                    return known.get((f.name, f.size, f.version)) or known.get(
                        (f.name, f.size, recorded_before_inodes(f.version)))  # fmt: skip

                todo = [f for f in self.files if not f.content and not kept(f)]
                etags = {f.url: f.etag_key for f in todo if f.etag_key}  # (as an MD5)
                files = [(f.url, f.size) for f in todo]
                hashed = contents.hash_files(files, self.storage_options, etags)
                self._records = [
                    [f.name, f.size, f.version, f.content or kept(f) or hashed[f.url]]
                    for f in self.files
                ]
        return self._records

    def content_identities(self) -> list[Any]:
        """One identity per input from its contents (the fingerprint's inputs part)."""
        if self.files is None:
            return self.items
        return [[name, size, content] for name, size, _, content in self.records()]


class Identity:
    """The fingerprint of a run, computed from contents only when the cheap check fails."""

    def __init__(self, code_hash: str, params: dict[str, Any], inputs: Inputs) -> None:
        self.code_hash, self.params, self.inputs = code_hash, params, inputs
        _, self._cheap_parts = fingerprint(code_hash, params, [])
        del self._cheap_parts["inputs"]

    @property
    def stat(self) -> str:
        return self.inputs.stat

    @functools.cached_property
    def full(self) -> tuple[str, dict[str, Any]]:
        """``(fingerprint, parts)`` from the inputs' contents."""
        if self.inputs.files is None:  # items are their own contents: the hash stat made
            return fingerprint(self.code_hash, self.params, [], inputs_hash=self.inputs.stat)
        return fingerprint(self.code_hash, self.params, self.inputs.content_identities())

    @property
    def cheap_parts(self) -> dict[str, Any]:
        """The fingerprint's parts but the inputs': code, params, format."""
        return dict(self._cheap_parts)

    def quick_match(self, parts: Mapping[str, Any], stat: str | None) -> bool:
        """The same code and params and inputs listed the same: no file need be read."""
        return (
            self.inputs.versioned
            and stat == self.stat
            and all(parts.get(k) == v for k, v in self._cheap_parts.items())
        )

    def same_as(self, fp: str, parts: Mapping[str, Any], stat: str | None) -> bool:
        """Whether a snapshot or run recorded as ``(fp, parts, stat)`` was made from this."""
        return self.quick_match(parts, stat) or fp == self.full[0]


def _files(
    patterns: list[str], storage_options: dict[str, Any] | None, output: str | None
) -> Inputs:
    files = expand_inputs(patterns, storage_options, output)
    return Inputs(
        items=[f.url for f in files],
        sizes=[f.size for f in files],
        description={"count": len(files), "patterns": [as_text(p) for p in patterns]},
        files=files,
        storage_options=storage_options,
    )


def _items(items: list[Any], description: dict[str, Any]) -> Inputs:
    return Inputs(items, [0] * len(items), {"count": len(items), **description})


def resolve(
    inputs: Any,
    inputs_from: str | Callable[[], Any] | None,
    storage_options: dict[str, Any] | None,
    output: str | None = None,
) -> Inputs:
    """``inputs=`` / ``--input`` and ``inputs_from=`` / ``--inputs-from`` → :class:`Inputs`
    (files inside ``output``, the snapshot's URL, are left out).

    Raises:
        OptionError: both given, an empty list, or a value that is neither a path nor JSON
            (the message names the element).
        PipelineLoadError: the ``inputs_from`` function cannot be loaded or raised.
    """
    if inputs is not None and inputs_from is not None:
        raise OptionError("use either --input or --inputs-from (inputs= or inputs_from=), not both")
    if inputs_from is not None:
        found, name = items_mod.from_function(inputs_from)
        return _items(found, {"inputs_from": name})
    if inputs is None:
        return _items([], {})  # the function is called once, with no argument
    if isinstance(inputs, (str, os.PathLike)):
        return _files([os.fspath(inputs)], storage_options, output)
    if isinstance(inputs, np.ndarray):
        inputs = inputs.tolist()
    items_mod.refuse_a_table(inputs, "inputs")
    if isinstance(inputs, (bytes, Mapping)) or not isinstance(inputs, Iterable):
        raise OptionError(
            f"inputs must be a path or glob, or a list of paths or of JSON items; got a "
            f"{type(inputs).__name__} ({inputs!r:.80}){held_as_bytes(inputs)}"
        )
    values = list(inputs)
    paths = all(isinstance(v, (str, os.PathLike, bytes)) for v in values)
    if paths and (held := [i for i, v in enumerate(values) if isinstance(v, bytes)]):
        raise OptionError(
            f"inputs[{held[0]}] is a bytes ({values[held[0]]!r:.80}): paths are given as str "
            f"or pathlib.Path{held_as_bytes(values[held[0]])}"
        )
    if not values:
        raise OptionError(
            "inputs is an empty list: nothing to preprocess (leave inputs out to call the "
            "function once with no argument)"
        )
    if all(isinstance(v, (str, os.PathLike)) for v in values):
        return _files([os.fspath(v) for v in values], storage_options, output)
    return _items(items_mod.checked(values, inputs), {})


def recorded_stat(pipeline: dict[str, Any]) -> str | None:
    """The inputs' stat identity a manifest's ``pipeline`` recorded, if any."""
    inputs = pipeline.get("inputs") if isinstance(pipeline, dict) else None
    return inputs.get("stat") if isinstance(inputs, dict) else None
