"""Which local files may be read as a snapshot's: regular files inside it (pure ``os``
calls, nothing opened). A FIFO there would block its reader forever, a device could act,
and a link out of the snapshot reads someone else's file.

Also what keeps this user from a local file another user made (a teammate's snapshot, a
shared directory), or its own it took the permissions from: the directory it may not enter,
the file it may not read, the directory it may not write, named with its owner and mode, and
the ``chmod`` that lets it in, recursive only inside the snapshot (the words are pure
functions of a :class:`Who`: ``read_advice``, ``write_advice``, ``parent_advice``)."""

from __future__ import annotations

import errno
import functools
import os
import pwd
import stat
from dataclasses import dataclass
from typing import Any

from . import interrupted, layout
from .errors import StorageError


def local_file_problem(root: str, path: str, real_root: str | None = None) -> str | None:
    """Why the local file ``path`` may not be read as part of the snapshot at ``root``, or
    None: it must be a regular file (not a directory, FIFO or device: a FIFO would block the
    reader forever) whose real path stays inside the snapshot (no symlink out of it).
    Nothing is read. FileNotFoundError propagates; a directory this user may not enter is a
    StorageError naming it, its owner and what to do. ``real_root`` is ``realpath(root)``
    when the caller knows it (a reader of thousands of shards: realpath stats every component).
    """
    try:
        return _problem(root, path, real_root)
    except PermissionError as err:
        raise StorageError(read_denied(path, err)) from err


LINKED_OUT = "is a link to"  # (a problem saying so says what to do: no other advice fits it)


def _problem(root: str, path: str, real_root: str | None) -> str | None:
    mode = _mode_below(root, path)  # no symlink below root: path is inside it
    if mode is None:
        if (real := link_out_of(root, path, real_root)) is not None:
            return (
                f"{LINKED_OUT} {real}, outside the snapshot (a snapshot's files are read only "
                "inside it, whoever made it): copy what the link points to into the snapshot "
                "(cp -rL), or open the snapshot where its files are"
            )
        try:  # not opened: opening a FIFO or a device can block or act
            mode = os.stat(path).st_mode
        except OSError as err:
            if err.errno == errno.ELOOP:  # (the storage's fault it was said to be)
                return "is a link in a loop (it leads back to itself); it is no file"
            raise
    if not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        return f"is {kind} (mode {stat.filemode(mode)})"
    return None


def link_out_of(root: str, path: str, real_root: str | None = None) -> str | None:
    """Where the local ``path`` really is, if a symlink (it, or a directory above it) leads
    it out of the snapshot at ``root``; else None. The rule readers hold every file to
    (:func:`local_file_problem`), and writers hold the directories they write to. Nothing is
    opened; ``path`` need not exist."""
    real_root = os.path.realpath(root) if real_root is None else real_root
    real = os.path.realpath(path)
    return None if os.path.commonpath([real_root, real]) == real_root else real


def _mode_below(root: str, path: str) -> int | None:
    """The mode of ``path`` if it lies below ``root`` through no symlink (an ``lstat`` of each
    component below root), else None: then only its real path can tell."""
    rel = os.path.relpath(path, root)
    if os.path.isabs(rel) or rel == os.curdir or rel.split(os.sep)[0] == os.pardir:
        return None
    current, mode = root, 0
    for part in rel.split(os.sep):
        current = os.path.join(current, part)
        mode = os.lstat(current).st_mode
        if stat.S_ISLNK(mode):
            return None
    return mode


def broken_link_above(path: str) -> str | None:
    """The nearest of ``path`` and its parent directories that is a link to nothing (where
    creating ``path`` fails with "File exists"), or None. A look that fails otherwise than
    with ENOENT or ENOTDIR raises (EIO: no link to nothing is known)."""
    while True:
        if mode_of(path, follow=False) is not None and mode_of(path) is None:
            return path
        parent = os.path.dirname(path)
        if parent == path:
            return None
        path = parent


def user_name(uid: int) -> str:
    """The login name of ``uid``, or ``"uid N"`` if it has none."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def owner_of(path: str) -> tuple[str, str]:
    """The user name of the owner of the local ``path`` and its mode (``drwxr-sr-x``)."""
    st = os.stat(path)
    return user_name(st.st_uid), stat.filemode(st.st_mode)


def unreadable_part(path: str) -> tuple[str, str] | None:
    """What keeps this user from reading the local ``path``: ``(directory, "enter")`` for
    the first directory above it it may not enter, ``(path, "read")`` if it may not read the
    file (or list the directory) itself; None if neither (nothing of the permissions)."""
    path = os.path.abspath(path)
    above, parent = [], os.path.dirname(path)
    while parent not in above:
        above.append(parent)
        parent = os.path.dirname(parent)
    for directory in reversed(above):
        if is_dir(directory) and refused(directory, os.X_OK):
            return directory, "enter"
    if mode_of(path, follow=False) is not None:
        need = os.R_OK | os.X_OK if is_dir(path) else os.R_OK
        if refused(path, need):
            return path, "read"
    return None


def mode_of(path: str, follow: bool = True) -> int | None:
    """The mode of the local ``path`` (``follow``: of what a link leads to), None only if
    nothing is there (ENOENT, ENOTDIR); any other failure of the stat (EIO, ENOMEM, EACCES
    on a directory above) is raised: os.path's isdir and exists take it for absence."""
    look = os.stat if follow else os.lstat
    try:
        return interrupted.again(lambda: look(path)).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None


def is_dir(path: str) -> bool:
    """``os.path.isdir``, but a stat that fails otherwise than for absence raises."""
    mode = mode_of(path)
    return mode is not None and stat.S_ISDIR(mode)


# What access(2) says where the permissions refuse, or a read-only filesystem a write
REFUSALS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})


def refused(path: str, mode: int) -> int | None:
    """The errno with which access(2) refuses this user ``mode`` (``os.R_OK``, ``W_OK``,
    ``X_OK``) of the local ``path`` (EACCES, EPERM, EROFS), or None if it may. Any other
    failure (EIO, ENOMEM, ELOOP, ENAMETOOLONG) is raised as the OSError it is: os.access
    says False to those too, and a failing disk was given a chmod. EINTR tried again."""
    try:
        interrupted.again(lambda: _access(path, mode))
    except OSError as err:
        if err.errno in REFUSALS:
            return err.errno
        raise
    return None


def _access(path: str, mode: int) -> None:
    """access(2) of ``path``, raising the OSError it fails with (os.access keeps no errno)."""
    call = _libc_access()
    if call is None:  # (no C library: os.access's no, taken for a denial)
        if not os.access(path, mode):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
        return
    if call(os.fsencode(path), mode) != 0:
        import ctypes  # (loaded already by _libc_access: not at import, for snap --help)

        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), path)


@functools.cache
def _libc_access() -> Any:
    """The C library's ``access`` (errno kept), or None where there is none to load."""
    import ctypes

    try:
        call = ctypes.CDLL(None, use_errno=True).access
    except (OSError, AttributeError):
        return None
    call.argtypes, call.restype = [ctypes.c_char_p, ctypes.c_int], ctypes.c_int
    return call


OWN = "restore its permission"  # (this user's own file: no one else to ask)


@dataclass(frozen=True)
class Who:
    """Whose a local file or directory is, as a hint says it (read by :func:`who_of`)."""

    me: str  # this user's name
    owner: str  # the owner's name
    mode: str  # its mode, ``drwxr-sr-x``
    own: bool  # this user is its owner
    group: bool  # this user is in its group


def who_of(path: str) -> Who:
    """The :class:`Who` of the local ``path`` (OSError if it cannot be stat'ed)."""
    st, euid = os.stat(path), os.geteuid()
    group = st.st_gid == os.getegid() or st.st_gid in os.getgroups()
    mode = stat.filemode(st.st_mode)
    return Who(user_name(euid), user_name(st.st_uid), mode, st.st_uid == euid, group)


def read_hint(path: str) -> str | None:
    """What to do so that this user may read the local ``path`` (:func:`read_advice`), or
    None if its permissions do not keep this user out."""
    try:
        path = os.path.abspath(path)
        if (found := unreadable_part(path)) is None:
            return None
        who = who_of(found[0])
        top = snapshot_root(path) or (path if os.path.isdir(path) else None)
    except OSError:
        return None
    return read_advice(path, *found, who, top)


def read_advice(path: str, where: str, verb: str, who: Who, top: str | None) -> str:
    """Why this user may not read ``path``: it may not ``verb`` ("enter", "read") ``where``
    (whose it is), and what to do. A ``chmod -R`` only of a directory of ``top``, the
    snapshot (or directory) being read: a directory above it is let through (``chmod
    o+x``), a file outside any snapshot read (``chmod o+r``), never ``chmod -R o+rX`` of a
    home directory. This user's own: ``u+``, said to it (no one else to ask). Pure."""
    is_dir = who.mode.startswith("d")
    grant = "u" if who.own else "g" if who.group else "o"
    below = where if is_dir else os.path.dirname(where)
    if top is not None and inside(below, top):
        chmod, let = f"chmod -R {grant}+rX {below}", "read it"
    elif verb == "enter":  # (a directory above the snapshot: passing through it is enough)
        chmod, let = f"chmod {grant}+x {where}", "through it"
    else:
        chmod, let = f"chmod {grant}+r{'x' if is_dir else ''} {where}", "read it"
    said = f"this user ({who.me}) may not {verb} {'it' if where == path else where}"
    if who.own:
        return f"{said} (its own, mode {who.mode}): {OWN} ({chmod})"
    return (
        f"{said} ({who.owner}'s, mode {who.mode}): run as a user who may, or ask {who.owner} "
        f"to let others {let} ({chmod})"
    )


def read_denied(path: str, err: OSError) -> str:
    """One line for a denied read of the local ``path``: the path, the cause and what to do."""
    code = errno.errorcode.get(err.errno or 0, "")
    cause = f"{err.strerror or err}{f' ({code})' if code else ''}"
    hint = read_hint(path) or (
        "check that this user may read it (the permissions of the file and of every directory "
        "above it)"
    )
    return f"{path}: {cause}; {hint}"


def unwritable_dir(path: str) -> str | None:
    """The directory this user may not write (create or delete files in) for the local
    ``path``: ``path`` itself if it is a directory, else the nearest one above it that exists
    (where ``path`` and the missing ones above it would be made); None if it may, or if no
    user may (a read-only filesystem: its own error says so). OSError where a look fails
    otherwise than for absence or a permission (EIO: no permission is to blame)."""
    directory = path
    while True:
        try:
            if is_dir(directory):
                break
        except PermissionError:  # (a directory above it it may not enter: looked at next)
            pass
        parent = os.path.dirname(directory)
        if parent == directory:  # ("" for a relative path where nothing of it exists)
            return None
        directory = parent
    return directory if denies_write(directory) else None


def denies_write(directory: str) -> bool:
    """Whether the permissions of the local ``directory`` (an existing one) keep this user
    from creating or deleting files in it; False on a read-only filesystem, which is no
    matter of permissions, and where it is not there. OSError where a look at it fails
    otherwise (EIO, ENOMEM; EACCES on a directory above): for the caller to say as such."""
    if not is_dir(directory):
        return False
    return refused(directory, os.W_OK | os.X_OK) in (errno.EACCES, errno.EPERM)


def write_hint(directory: str, as_whom: str = "run it as {owner}", tree: str | None = None) -> str:
    """:func:`write_advice` for the local ``directory`` this user may not write; one its
    mode would let it, refused EPERM (``chattr +i``: a chmod was said, which cannot help)."""
    if (held := held_by_attribute(directory)) is not None:
        return held
    return write_advice(directory, who_of(directory), as_whom, tree)


def held_by_attribute(directory: str) -> str | None:
    """Advice where no user may write the local ``directory`` whatever its mode (access(2)
    says EPERM, not EACCES: an immutable or append-only attribute), else None."""
    if refused(directory, os.W_OK | os.X_OK) != errno.EPERM:
        return None
    return (
        f"no user may write {directory}, whatever its mode: it is immutable or append-only "
        f"(lsattr -d shows i or a; as root, chattr -i -a {directory} lifts that)"
    )


def write_advice(
    directory: str, who: Who, as_whom: str = "run it as {owner}", tree: str | None = None
) -> str:
    """``"this user (ru1) may not write <directory> (ru2's, mode drwxr-sr-x): run it as ru2,
    or ask ru2 to let the group write it (chmod -R g+rwX <directory>)"``; ``as_whom`` is the
    first remedy, with ``{owner}`` for the directory's owner. ``tree``: what the ``chmod -R``
    covers, ``directory`` or the snapshot it is in; never a directory above a snapshot (see
    :func:`parent_advice`). This user's own directory: ``chmod -R u+rwX``, said to it (a
    create lists, enters and writes the snapshot's directories: ``u+w``, said for a
    ``d---------``, left ``d-w-------``, refused with the same advice again; a probe). Pure."""
    tree = tree or directory
    said = f"this user ({who.me}) may not write {directory}"
    if who.own:
        return f"{said} (its own, mode {who.mode}): {OWN} (chmod -R u+rwX {tree})"
    it = "it" if tree == directory else f"all of {tree}"
    if who.group:
        grant = f"let the group write {it} (chmod -R g+rwX {tree})"
    else:
        grant = (f"give {it} a group you share and let that group write {it} (chgrp -R GROUP "
                 f"{tree}; chmod -R g+rwX {tree})")  # fmt: skip
    return (
        f"{said} ({who.owner}'s, mode {who.mode}): {as_whom.format(owner=who.owner)}, or ask "
        f"{who.owner} to {grant}"
    )


def parent_advice(directory: str, output: str, who: Who, what: str = "an OUTPUT") -> str:
    """What to do where this user may not write ``directory``, in which OUTPUT (``output``,
    not there yet; ``what`` it is) would be made: one elsewhere, or the owner makes it this
    user's. Never a chmod of ``directory`` for others: it is no snapshot's (``chmod -R g+w
    /`` was said for an OUTPUT in ``/``). Pure."""
    said = f"this user ({who.me}) may not write {directory}"
    where, elsewhere = f"where {output} would be made", f"choose {what} in a directory it may write"
    if who.own:
        return (
            f"{said} (its own, mode {who.mode}), {where}: {elsewhere}, or {OWN} (chmod u+w "
            f"{directory})"
        )
    mkdir = "mkdir" if os.path.dirname(output) == directory else "mkdir -p"
    return (
        f"{said} ({who.owner}'s, mode {who.mode}), {where}: {elsewhere}, or ask {who.owner} to "
        f"make it this user's ({mkdir} {output}; chown {who.me} {output})"
    )


def write_denied(path: str) -> str | None:
    """What keeps this user from writing the local ``path`` (a snapshot's file or directory,
    or OUTPUT itself, being made), named with its owner and mode, and what to do; None if
    its permissions do not. A directory of the snapshot: the ``chmod -R`` names the whole
    snapshot; the directory OUTPUT is made in: :func:`parent_advice`."""
    directory = unwritable_dir(path)
    if directory is None:
        return read_hint(path)  # (a directory above it this user may not enter)
    root = snapshot_root(path) or path  # (no file of a snapshot's: OUTPUT itself)
    if (held := held_by_attribute(directory)) is not None:
        return held
    if not inside(directory, root):
        return parent_advice(directory, root, who_of(directory))
    return f"{write_hint(directory, 'run as {owner}', tree=root)}; or choose another OUTPUT"


def inside(path: str, top: str) -> bool:
    """Whether the local ``path`` is ``top`` or below it (by name). Pure."""
    top = top.rstrip(os.sep) or os.sep
    return path == top or path.startswith(top if top == os.sep else top + os.sep)


def snapshot_root(path: str) -> str | None:
    """The snapshot whose own file or directory ``path`` is, by its name (the layout's):
    ``/s`` for ``/s/manifest.json``, ``/s/shards``, ``/s/_runs/<run>/tasks/00001.json``...;
    None for any other name. Pure."""
    if (own := layout.own_file(path)) is not None:
        return own[0]
    parent, name = os.path.split(path.rstrip(os.sep))
    up, above = os.path.split(parent)
    if name in (layout.SHARDS_DIR, layout.RUNS_DIR, layout.VERSIONS_DIR, layout.MANIFEST_NAME):
        return parent
    if layout.is_own_temporary(name):  # (the manifest's, being written)
        return parent
    if above == layout.RUNS_DIR and layout.is_own_run(name):
        return up
    if name == layout.TASKS_DIR and os.path.basename(up) == layout.RUNS_DIR:
        return os.path.dirname(up) if layout.is_own_run(above) else None
    return None
