"""Which local files may be read as a snapshot's: regular files inside it (pure ``os``
calls, nothing opened). A FIFO there would block its reader forever, a device could act,
and a link out of the snapshot reads someone else's file.

Also what keeps this user from a local file another user made (a teammate's snapshot, a
shared directory): the directory it may not enter, the file it may not read, the directory
it may not write, named with its owner and mode, and the ``chmod`` that lets it in."""

from __future__ import annotations

import errno
import os
import pwd
import stat

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


def _problem(root: str, path: str, real_root: str | None) -> str | None:
    mode = _mode_below(root, path)  # no symlink below root: path is inside it
    if mode is None:
        if (real := link_out_of(root, path, real_root)) is not None:
            return (
                f"is a link to {real}, outside the snapshot (a snapshot's files are read only "
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
    creating ``path`` fails with "File exists"), or None."""
    while True:
        if os.path.islink(path) and not os.path.exists(path):
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


def _in_group_of(path: str) -> bool:
    gid = os.stat(path).st_gid
    return gid == os.getegid() or gid in os.getgroups()


def _who(path: str) -> str:
    """``"ru1's, mode drwx------"``."""
    owner, mode = owner_of(path)
    return f"{owner}'s, mode {mode}"


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
        if os.path.isdir(directory) and not os.access(directory, os.X_OK):
            return directory, "enter"
    if os.path.lexists(path):
        need = os.R_OK | os.X_OK if os.path.isdir(path) else os.R_OK
        if not os.access(path, need):
            return path, "read"
    return None


def read_hint(path: str) -> str | None:
    """What to do so that this user may read the local ``path`` (the part it may not reach,
    named with its owner and mode), or None if its permissions do not keep this user out."""
    try:
        found = unreadable_part(path)
        if found is None:
            return None
        where, verb = found
        owner, _ = owner_of(where)
        who, grant = _who(where), "g+rX" if _in_group_of(where) else "o+rX"
    except OSError:
        return None
    me = user_name(os.geteuid())
    what = "it" if where == os.path.abspath(path) else where
    below = where if verb == "enter" or os.path.isdir(where) else os.path.dirname(where)
    return (
        f"this user ({me}) may not {verb} {what} ({who}): run as a user who may, or ask "
        f"{owner} to let others read it (chmod -R {grant} {below})"
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
    ``path``: ``path`` itself if it is a directory, else the one holding it; None if it may,
    or if no user may (a read-only filesystem: its own error says so)."""
    directory = path if os.path.isdir(path) else os.path.dirname(path)
    return directory if denies_write(directory) else None


def denies_write(directory: str) -> bool:
    """Whether the permissions of the local ``directory`` (an existing one) keep this user
    from creating or deleting files in it; False on a read-only filesystem, which is no
    matter of permissions."""
    if not os.path.isdir(directory) or os.access(directory, os.W_OK | os.X_OK):
        return False
    try:
        return not os.statvfs(directory).f_flag & os.ST_RDONLY
    except OSError:
        return True


def write_hint(directory: str, as_whom: str = "run it as {owner}") -> str:
    """``"this user (ru1) may not write <directory> (ru2's, mode drwxr-sr-x): run it as ru2,
    or ask ru2 to let the group write it (chmod -R g+w <directory>)"``; ``as_whom`` is the
    first remedy, with ``{owner}`` for the directory's owner."""
    owner, _ = owner_of(directory)
    if _in_group_of(directory):
        grant = f"let the group write it (chmod -R g+w {directory})"
    else:
        grant = (f"give it a group you share and let that group write it (chgrp -R GROUP "
                 f"{directory}; chmod -R g+w {directory})")  # fmt: skip
    return (
        f"this user ({user_name(os.geteuid())}) may not write {directory} ({_who(directory)}): "
        f"{as_whom.format(owner=owner)}, or ask {owner} to {grant}"
    )


def cwd_gone(path: str) -> str | None:
    """Why the relative local ``path`` cannot be found if it is that the current directory
    was deleted (``os.getcwd()`` fails: every relative path then does, said as "No such file
    or directory" with no name), else None."""
    if "://" in path or os.path.isabs(path):
        return None
    try:
        os.getcwd()
    except FileNotFoundError:
        return (
            "the current directory was deleted, and this path is relative to it: cd to a "
            "directory that exists, or give absolute paths"
        )
    return None
