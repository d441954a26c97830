"""An input's name: as it identifies the file (its bytes, the same under every locale), as
the manifest keeps it (Unicode text), and as what snap says names it (the pattern as the
caller gave it, with what it may have been meant as).
"""

from __future__ import annotations

import difflib
import glob
import os
import re
import sys

from ..console import in_command, named


def by_bytes(path: str) -> str:
    """A local file's path as its bytes read in UTF-8 (bytes that are not UTF-8 as lone
    surrogates, as a UTF-8 locale has them): the same text under every locale. Python
    decodes a name by the locale: ``café`` under UTF-8, ``caf\\udcc3\\udca9`` under
    ``LC_ALL=C``, and the same files were "1 added, 1 removed" when the locale changed. Under
    a UTF-8 locale this is the path as it is: the identities snapshots recorded stay."""
    try:
        return os.fsencode(path).decode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # (text this locale names no file by: taken as it is)
        return path


def as_text(name: str) -> str:
    """``name`` (a local path, a URL) as Unicode text for the manifest, the same under every
    locale (see :func:`by_bytes`): the bytes of a local file name that are not UTF-8 (Python
    holds them as lone surrogates, which no JSON reader takes, and a manifest holding one was
    refused when it was read) written ``\\xNN``."""
    raw = by_bytes(name).encode("utf-8", "surrogateescape")
    return raw.decode("utf-8", "backslashreplace")


def given(pattern: str) -> str:
    """``--input 'raw/*'`` to a command, ``inputs='raw/*'`` in Python."""
    return named(f"--input {pattern!r}", f"inputs={pattern!r}")


def meant(pattern: str, patterns: list[str], first: bool) -> str:
    """What a pattern that matched nothing may have been meant as: an option taken as
    ``--input``'s value, or one of a list of strings that are items, not files (ids, or URLs
    the function fetches itself: a list of strings is read as paths and globs). ``first``:
    no pattern before it matched a file (after one that did, it is a missing file)."""
    if pattern.startswith("-") and not os.path.exists(pattern) and _an_option(pattern):
        return (
            f" ({pattern} is an option: --input took it as its value; give --input a "
            "path or pattern)"
        )
    if re.search(r"\{[^{}]*,[^{}]*\}", pattern) and not os.path.exists(pattern):
        return (
            " (braces, {a,b}, are the shell's expansion, not a glob's: give "
            f"{named('--input', 'inputs=')} a pattern for each, or one glob such as [ab])"
        )
    if (escaped := _brackets_meant(pattern)) is not None:
        return (
            f" (brackets are glob syntax, a set of characters to match one of, and "
            f"{escaped[0]!r} is a name here: to mean it, write its [ as [[]: {escaped[1]!r})"
        )
    from .. import literal  # (here: it imports fsspec, which `snap --help` needs not)

    if "://" not in pattern and (url := literal.meant_url(pattern)) is not None:
        return f" (it is a local path; did you mean {url}?)"
    if (missing := _missing_directory(pattern)) is not None:
        return missing
    if first and not glob.has_magic(pattern) and (len(patterns) > 1 or "/" not in pattern):
        return (
            " (paths and globs are read as files; for strings that are items, not files, such "
            "as ids or URLs the function fetches itself, give inputs_from=lambda: [...] in "
            "Python or --inputs-from MODULE:FUNC)"
        )
    return ""


def _missing_directory(pattern: str) -> str | None:
    """For a local pattern whose directory part is not there (``dta/npy/*.npy``): the first
    directory of it that is missing, and a sibling of that name that is there; None where
    every directory before its first wildcard is there (the files are what is missing).
    ``~`` is the home directory, as the inputs take it."""
    if "://" in pattern:
        return None
    parts = os.path.expanduser(pattern).split("/")[:-1]  # (the last part names the files)
    for k, part in enumerate(parts, 1):
        if glob.has_magic(part):
            return None
        head = "/".join(parts[:k])
        if not head or os.path.isdir(head):  # ("" : the root of "/...")
            continue
        parent = "/".join(parts[: k - 1]) or ("/" if head.startswith("/") else ".")
        try:
            names = [n for n in os.listdir(parent) if os.path.isdir(os.path.join(parent, n))]
        except OSError:
            names = []
        close = difflib.get_close_matches(part, names, n=1)
        meant = f"; did you mean {'/'.join([*parts[: k - 1], close[0]]) + '/'!r}?" if close else ""
        what = "is not a directory" if os.path.lexists(head) else "does not exist"
        here = "" if os.path.isabs(head) else f" here, in {os.path.abspath(os.curdir)}"
        return f" ({head}/ {what}{here}{meant})"
    return None


def _brackets_meant(pattern: str) -> tuple[str, str] | None:
    """For a local pattern through a name that holds brackets (``data[1]/*.txt``, whose
    ``[1]`` a glob reads as a set of characters): the longest such part of it that is a path
    here, and the pattern with that part escaped; None if there is none."""
    if "[" not in pattern or "://" in pattern:
        return None
    parts = pattern.split("/")
    for k in range(len(parts), 0, -1):
        head = "/".join(parts[:k])
        if "[" in head and os.path.lexists(head):
            return head, "/".join([glob.escape(head), *parts[k:]])
    return None


def _an_option(text: str) -> bool:
    """Whether ``text`` (``--overwrite``, ``--workers=2``) is an option of the command that
    runs (click's, which a command's process has loaded): ``--input=-x.bin`` names a file."""
    click = sys.modules.get("click") if in_command() else None
    context = click.get_current_context(silent=True) if click is not None else None
    if context is None:
        return False
    options = {*context.help_option_names}
    for param in context.command.params:
        options.update(getattr(param, "opts", ()), getattr(param, "secondary_opts", ()))
    return text.split("=", 1)[0] in options


def held_as_bytes(value: object) -> str:
    """For a path held as bytes (``os.listdir(b"raw")``, a name that is not UTF-8): how to
    give it (bytes are no JSON item either)."""
    if not isinstance(value, bytes):
        return ""
    return (
        "; for a path held as bytes, give os.fsdecode(path) (a name that is not UTF-8 keeps "
        "its bytes: it is the same file)"
    )


def directories_only(pattern: str) -> str:
    """Why ``pattern`` can match no input ("" if it can): a glob ending in '/' matches
    directories only, as a shell's and Python's do (it took the files the pattern without
    the slash matched)."""
    if not (glob.has_magic(pattern) and pattern.endswith("/")):
        return ""
    return (
        f"{given(pattern)} ends with '/', which makes a glob match directories only, and an "
        f"input is a file: give '{pattern}*' for the files in them"
    )
