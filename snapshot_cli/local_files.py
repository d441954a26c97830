"""Which local files may be read as a snapshot's: regular files inside it (pure ``os``
calls, nothing opened). A FIFO there would block its reader forever, a device could act,
and a link out of the snapshot reads someone else's file."""

from __future__ import annotations

import errno
import os
import stat


def local_file_problem(root: str, path: str, real_root: str | None = None) -> str | None:
    """Why the local file ``path`` may not be read as part of the snapshot at ``root``, or
    None: it must be a regular file (not a directory, FIFO or device: a FIFO would block the
    reader forever) whose real path stays inside the snapshot (no symlink out of it).
    Nothing is read. FileNotFoundError propagates. ``real_root`` is ``realpath(root)`` when
    the caller knows it (a reader of thousands of shards: realpath stats every component).
    """
    mode = _mode_below(root, path)  # no symlink below root: path is inside it
    if mode is None:
        real_root = os.path.realpath(root) if real_root is None else real_root
        real = os.path.realpath(path)
        if os.path.commonpath([real_root, real]) != real_root:
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
