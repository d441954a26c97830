"""A local input file is the same input under every locale.

Python decodes a file's name by the locale: ``raw/café.bin`` is ``'raw/café.bin'`` under a
UTF-8 locale and ``'raw/caf\\udcc3\\udca9.bin'`` under ``LC_ALL=C``. Inputs were compared by
that text, so the same files were "1 added, 1 removed" (and their tasks computed again) when
a create ran under another locale than the last: a cron job or a container without a UTF-8
locale beside a login shell with one. They are compared by their bytes now; under a UTF-8
locale that is the text as before, so snapshots made before stay up to date. The pipeline
file's path, kept in the manifest, is Unicode text too (one that is not UTF-8 made the
manifest unreadable).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import snapshot_cli as snap
from snapshot_cli.fingerprint import canonical_json, fingerprint, sha256_text
from snapshot_cli.writers import contents
from snapshot_cli.writers import inputs as inputs_mod

PIPE = """
import os

def sizes(path):
    yield {"n": os.path.getsize(path), "name": os.fsencode(os.path.basename(path))}
"""
UTF8 = {"LC_ALL": "C.UTF-8"}
ASCII = {"LC_ALL": "C", "PYTHONUTF8": "0"}
NAMES = [b"caf\xc3\xa9.bin", b"plain.bin", b"\xff\xfe.bin"]  # (the last is no UTF-8)


def snap_cmd(cwd: bytes, env: dict[str, str], *args: bytes | str) -> dict[str, object]:
    """``snap ARGS --json`` in a process of its own under the locale ``env`` gives."""
    full = {k: v for k, v in os.environ.items() if k not in ("LANG", "LC_CTYPE", "PYTHONUTF8")}
    res = subprocess.run(
        [sys.executable, "-m", "snapshot_cli", *args, "--json"],
        cwd=cwd, env={**full, **env}, capture_output=True, timeout=120, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr.decode(errors="replace")
    doc: dict[str, object] = json.loads(res.stdout)
    return doc


def made_in(tmp_path: Path) -> bytes:
    """A directory whose name is not ASCII, holding the pipeline and ``raw/`` inputs."""
    base = os.path.join(os.fsencode(tmp_path), b"d\xc3\xa9\xff")
    os.makedirs(os.path.join(base, b"raw"))
    with open(os.path.join(base, b"p.py"), "w") as f:
        f.write(PIPE)
    for i, name in enumerate(NAMES):
        with open(os.path.join(base, b"raw", name), "wb") as f:
            f.write(b"x" * (i + 1))
    return base


@pytest.mark.parametrize(
    ("first", "then"), [(UTF8, ASCII), (ASCII, UTF8)], ids=["utf8-c", "c-utf8"]
)
def test_a_snapshot_is_up_to_date_under_another_locale(
    tmp_path: Path, first: dict[str, str], then: dict[str, str]
) -> None:
    base = made_in(tmp_path)
    out = b"o\xff"
    create = ("create", os.path.join(base, b"p.py") + b":sizes", out, "--input", b"raw/*")
    made = snap_cmd(base, first, *create, "--workers", "1")
    assert made["num_records"] == 3 and not made["reused"]
    again = snap_cmd(base, then, *create, "--workers", "0", "--dry-run")
    assert (again["inputs_added"], again["inputs_removed"], again["inputs_changed"]) == (0, 0, 0)
    assert again["reused"], again
    assert snap_cmd(base, then, *create, "--workers", "0")["reused"]
    assert snap_cmd(base, first, *create, "--workers", "0")["reused"]  # (and back)
    inspected = snap_cmd(base, then, "inspect", out)  # the manifest is read under both
    assert inspected["fingerprint"] == made["fingerprint"]
    names = sorted(n for b in snap.open(os.fsdecode(os.path.join(base, out))).loader(3)
                   for n in b["name"])  # fmt: skip
    assert names == sorted(NAMES)


def test_a_changed_file_is_still_seen_under_another_locale(tmp_path: Path) -> None:
    base = made_in(tmp_path)
    create = ("create", "p.py:sizes", "s", "--input", b"raw/*", "--workers", "0")
    snap_cmd(base, UTF8, *create)
    with open(os.path.join(base, b"raw", NAMES[0]), "wb") as f:
        f.write(b"longer now")
    again = snap_cmd(base, ASCII, *create)
    assert (again["inputs_added"], again["inputs_removed"], again["inputs_changed"]) == (0, 0, 1)
    assert again["version"] == 2


def test_under_utf8_an_inputs_identity_is_the_path_snapshots_recorded(tmp_path: Path) -> None:
    """Snapshots made before names were compared by their bytes recorded the path as Python
    decodes it: under a UTF-8 locale that is the name still, so they stay up to date."""
    # (Python on Linux decodes names as UTF-8 unless told otherwise: the C locale is coerced)
    assert sys.getfilesystemencoding() == "utf-8", "run the suite under a UTF-8 locale"
    base = made_in(tmp_path)
    raw = os.fsdecode(os.path.join(base, b"raw"))
    found = inputs_mod.resolve(os.path.join(raw, "*"), None, None)
    files = found.files or []
    listed = sorted(os.path.join(raw, n) for n in os.listdir(raw))
    assert [f.name for f in files] == [f.url for f in files] == listed == found.items
    recorded = [[p, os.path.getsize(p), contents.hash_file(p)] for p in listed]
    assert inputs_mod.Identity("c" * 64, {}, found).full == fingerprint("c" * 64, {}, recorded)
    stats = [[p, os.path.getsize(p), f.version] for p, f in zip(listed, files, strict=True)]
    assert found.stat == sha256_text(canonical_json(stats))
