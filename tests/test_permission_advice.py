"""What a denied local read or write advises (:mod:`snapshot_cli.local_files`): a recursive
chmod only inside the snapshot (an OUTPUT in ``/`` was told ``chgrp -R GROUP /; chmod -R g+w
/``, a snapshot in a home directory of mode 700 ``chmod -R o+rX`` of the home), this user's
own files said to it (``chmod -R u+rwX``, not "ask <itself> to let the group write it"), and
the directory OUTPUT would be made in answered with another OUTPUT, or its owner making
OUTPUT this user's.

The words are pure functions of a :class:`Who` (the owner and mode a stat gives, this user
and its groups): every case below, whoever runs the suite. End to end, as a user who is not
root (:mod:`tests.unprivileged`), the cases one user can make: an OUTPUT in a directory of
root's, and its own snapshot it took the permissions from."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from snapshot_cli.local_files import (
    Who,
    inside,
    parent_advice,
    read_advice,
    snapshot_root,
    write_advice,
)
from tests.unprivileged import User, unprivileged

ANA = Who(me="ana", owner="ben", mode="drwxr-xr-x", own=False, group=False)
GROUP = Who(me="ana", owner="ben", mode="drwxrwsr-x", own=False, group=True)
ROOTS = Who(me="ana", owner="root", mode="drwxr-xr-x", own=False, group=False)
OWN = Who(me="ana", owner="ana", mode="dr-xr-xr-x", own=True, group=True)


def recursive_targets(text: str) -> list[str]:
    """The paths every ``chmod -R`` / ``chgrp -R`` of ``text`` names."""
    return re.findall(r"(?:chmod|chgrp) -R \S+ ([^;)\s]+)", text)


@pytest.mark.parametrize(
    ("path", "root"),
    [
        ("/s/manifest.json", "/s"),
        ("/s/.manifest.json.0123456789abcdef0123456789abcdef.tmp", "/s"),
        ("/s/shards", "/s"),
        ("/s/shards/0a1b2c3d4e-00001-0000-00000000.arrow", "/s"),
        ("/s/_runs", "/s"),
        ("/s/_runs/lease-00000003.json", "/s"),
        ("/s/_runs/0a1b2c3d4e", "/s"),
        ("/s/_runs/0a1b2c3d4e/tasks", "/s"),
        ("/s/_runs/0a1b2c3d4e/tasks/00001.json", "/s"),
        ("/s/_versions/v00000002.tasks.json", "/s"),
        ("/s", None),
        ("/", None),
        ("/data/img-0001.bin", None),
        ("/s/_runs/notarun/tasks", None),
    ],
)
def test_a_snapshots_own_paths_name_it(path: str, root: str | None) -> None:
    assert snapshot_root(path) == root


def test_inside_is_by_whole_names() -> None:
    assert inside("/s", "/s") and inside("/s/shards", "/s") and inside("/s/a/b", "/")
    assert not inside("/snap", "/s") and not inside("/", "/s") and not inside("/home", "/s/")


def test_the_directory_output_would_be_made_in_is_never_opened_to_others() -> None:
    """``snap create ... /snaproot`` as a user: it said "ask root to give it a group you
    share and let that group write it (chgrp -R GROUP /; chmod -R g+w /)"."""
    said = parent_advice("/", "/snaproot", ROOTS)
    assert said == (
        "this user (ana) may not write / (root's, mode drwxr-xr-x), where /snaproot would be "
        "made: choose an OUTPUT in a directory it may write, or ask root to make it this "
        "user's (mkdir /snaproot; chown ana /snaproot)"
    )
    nested = parent_advice("/srv", "/srv/team/a/snap", ROOTS)
    assert "(mkdir -p /srv/team/a/snap; chown ana /srv/team/a/snap)" in nested
    for text in (said, nested, parent_advice("/srv", "/srv/snap", GROUP)):
        assert "chmod" not in text and "chgrp" not in text
    own = parent_advice("/home/ana/ro", "/home/ana/ro/snap", OWN)
    assert own.endswith("or restore its permission (chmod u+w /home/ana/ro)")
    assert "ask" not in own and "-R" not in own


def test_a_directory_of_the_snapshot_is_opened_whole_and_only_it() -> None:
    runs = write_advice("/s/_runs", ANA, "run as {owner}", tree="/s")
    assert runs == (
        "this user (ana) may not write /s/_runs (ben's, mode drwxr-xr-x): run as ben, or ask "
        "ben to give all of /s a group you share and let that group write all of /s (chgrp -R "
        "GROUP /s; chmod -R g+rwX /s)"
    )
    assert write_advice("/s", GROUP).endswith(
        "run it as ben, or ask ben to let the group write it (chmod -R g+rwX /s)"
    )
    assert recursive_targets(write_advice("/s/_runs/0a1b", GROUP)) == ["/s/_runs/0a1b"]


def test_this_users_own_files_are_said_to_it() -> None:
    """Its own snapshot, made read-only (``chmod -R a-w``): "run snap gc as ana, or ask ana
    to let the group write it", to ana."""
    said = write_advice("/home/ana/s", OWN, "run snap gc as {owner}")
    assert said == (
        "this user (ana) may not write /home/ana/s (its own, mode dr-xr-xr-x): restore its "
        "permission (chmod -R u+rwX /home/ana/s)"
    )
    mine = Who("ana", "ana", "----------", own=True, group=True)
    read = read_advice("/home/ana/s/manifest.json", "/home/ana/s/manifest.json", "read", mine,
                       "/home/ana/s")  # fmt: skip
    assert read == (
        "this user (ana) may not read it (its own, mode ----------): restore its permission "
        "(chmod -R u+rX /home/ana/s)"
    )


PRIVATE = Who(me="ana", owner="ben", mode="drwx------", own=False, group=False)
ROOTS_PRIVATE = Who(me="ana", owner="root", mode="drwx------", own=False, group=False)
FILE = Who(me="ana", owner="ben", mode="-rw-------", own=False, group=False)
GROUP_FILE = Who(me="ana", owner="ben", mode="-rw-------", own=False, group=True)
GROUP_DIR = Who(me="ana", owner="ben", mode="drwx--x---", own=False, group=True)


@pytest.mark.parametrize(
    ("path", "where", "verb", "who", "top", "chmod"),
    [
        # the snapshot, or a directory or file of it: all of that part, recursively
        ("/h/s/manifest.json", "/h/s", "enter", PRIVATE, "/h/s",
         "ask ben to let others read it (chmod -R o+rX /h/s)"),
        ("/h/s/shards/x.arrow", "/h/s/shards/x.arrow", "read", GROUP_FILE, "/h/s",
         "ask ben to let others read it (chmod -R g+rX /h/s/shards)"),
        # a directory above it (a home of mode 700): let through, nothing else
        ("/h/s/manifest.json", "/h", "enter", PRIVATE, "/h/s",
         "ask ben to let others through it (chmod o+x /h)"),
        ("/h/s/manifest.json", "/h", "enter", ROOTS_PRIVATE, None,
         "ask root to let others through it (chmod o+x /h)"),
        # a file or directory of no snapshot (an input): that one only
        ("/data/in.bin", "/data/in.bin", "read", FILE, None,
         "ask ben to let others read it (chmod o+r /data/in.bin)"),
        ("/data/dir", "/data/dir", "read", GROUP_DIR, None,
         "ask ben to let others read it (chmod g+rx /data/dir)"),
    ],
)  # fmt: skip
def test_a_read_opens_no_directory_above_the_snapshot(
    path: str, where: str, verb: str, who: Who, top: str | None, chmod: str
) -> None:
    """Another user's snapshot in a home directory of mode 700: it said "ask ben to let
    others read it (chmod -R o+rX /home/ben)", all of ben's files."""
    said = read_advice(path, where, verb, who, top)
    assert said.endswith(chmod) and ": run as a user who may, or " in said, said
    for target in recursive_targets(said):
        assert top is not None and inside(target, top), said


@pytest.fixture(scope="module")
def user() -> Iterator[User]:
    with unprivileged() as made:
        yield made


def snap(user: User, *args: str) -> subprocess.CompletedProcess[str]:
    return user.run(["-m", "snapshot_cli", *args])


def error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    (line,) = [s for s in done.stderr.splitlines() if s.startswith("snap: error: ")]
    return line


# A create of sys.argv[1] from range(sys.argv[2]), 3 by default
CREATE = """
import sys
import snapshot_cli as snap

n = int(sys.argv[2]) if len(sys.argv) > 2 else 3
try:
    snap.create(lambda i: [{"x": i}], sys.argv[1], inputs=range(n), workers=0, progress=False)
except snap.SnapError as err:
    sys.exit(f"snap: error: {err}")
"""


def test_an_output_in_a_directory_of_roots(user: User) -> None:
    """End to end, as a user who is not root: OUTPUT in ``/``, and below a missing
    directory in ``/``."""
    for output, mkdir in (("/snap-advice-test", "mkdir"), ("/snap-advice-test/a/s", "mkdir -p")):
        line = error_line(user.run(["-c", CREATE, output]))
        assert line.startswith(f"snap: error: permission denied while creating directory {output}")
        assert "may not write / (root's, mode d" in line
        assert f"or ask root to make it this user's ({mkdir} {output}; chown {user.name} " in line
        assert "chmod" not in line and "chgrp" not in line
        assert not Path(output).exists()


def test_its_own_snapshot_it_took_the_permissions_from(user: User) -> None:
    """End to end: its own manifest made unreadable, then its snapshot made read-only."""
    s = user.home / "own"
    assert user.run(["-c", CREATE, str(s)]).returncode == 0
    user.chmod(s / "manifest.json", "000")
    line = error_line(snap(user, "inspect", str(s)))
    assert (
        f"may not read it (its own, mode ----------): restore its permission (chmod -R u+rX {s})"
        in line
    )
    assert "ask" not in line
    user.chmod(s / "manifest.json", "644")
    user.chmod(s, "-R a-w")
    try:
        for command in (["gc", str(s), "--retention", "0"], ["-c", CREATE, str(s), "4"]):
            done = snap(user, *command) if command[0] == "gc" else user.run(command)
            line = error_line(done)
            assert f"may not write {s} (its own, mode dr-xr-xr-x): restore its permission " \
                f"(chmod -R u+rwX {s})" in line  # fmt: skip
            assert f"ask {user.name}" not in line and f"as {user.name}" not in line
        assert "cannot add to" in line  # (the create: refused before its lease)
    finally:
        user.chmod(s, "-R u+rwX")
    assert json.loads(snap(user, "inspect", str(s), "--json").stdout)["num_records"] == 3


LOADER = """
import sys
import snapshot_cli as snap

try:
    next(iter(snap.open(sys.argv[1]).loader(2, cache_dir=sys.argv[2])))
except snap.SnapError as err:
    sys.exit(f"snap: error: {err}")
"""


def test_a_cache_dir_in_a_directory_of_roots(user: User) -> None:
    """End to end: a cache_dir to be made in ``/`` was told "ask root to run chmod -R g+w
    /"-like advice of the directory above it; now another cache_dir, or root making it."""
    s = user.home / "s"
    assert user.run(["-c", CREATE, str(s)]).returncode == 0
    for cache, mkdir in (
        ("/snap-cache-advice-test", "mkdir"),
        ("/snap-cache-advice-test/a/c", "mkdir -p"),
    ):
        line = error_line(user.run(["-c", LOADER, str(s), cache]))
        assert f"cannot use cache_dir {cache!r}" in line, line
        assert "may not write / (root's, mode d" in line, line
        assert f"or ask root to make it this user's ({mkdir} {cache}; chown {user.name} " in line
        assert "chmod" not in line and "chgrp" not in line, line
        assert not Path(cache).exists()


KILLED = """
import os, signal, sys
import snapshot_cli as snap

def f(i):
    if i == 2 and sys.argv[2] == "die":
        os.kill(os.getpid(), signal.SIGKILL)  # (tasks 0 and 1 recorded: a run left)
    return [{"x": i}]

try:
    snap.create(f, sys.argv[1], inputs=range(4), workers=0, inputs_per_task=1, progress=False)
except snap.SnapError as err:
    sys.exit(f"snap: error: {err}")
"""


def test_its_own_unfinished_run_it_may_not_write(user: User) -> None:
    """Its own run made read-only: "or have <itself> remove that run" was said to it."""
    s = user.home / "killed"
    assert user.run(["-c", KILLED, str(s), "die"]).returncode == -9
    (run,) = [p for p in (s / "_runs").iterdir() if p.is_dir()]
    user.chmod(run, "-R a-w")
    try:
        line = error_line(user.run(["-c", KILLED, str(s), "live"]))
    finally:
        user.chmod(run, "-R u+w")
    assert f"cannot resume the unfinished run {run.name} of {s} (2 of its tasks done)" in line
    assert f"or remove that run (snap gc {s}), which starts it over" in line, line
    assert f"have {user.name}" not in line and f"ask {user.name}" not in line, line


@contextlib.contextmanager
def immutable(path: Path) -> Iterator[None]:
    """``chattr +i path`` (root, on ext4 here: the suite runs as root in CI) until the end."""
    subprocess.run(["chattr", "+i", str(path)], check=True)
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


@pytest.mark.parametrize("where", ["OUTPUT's parent", "the snapshot"])
def test_an_immutable_directory_is_said_so_not_chmod(tmp_path: Path, where: str) -> None:
    """root's create in a ``chattr +i`` directory was told "restore its permission (chmod -R
    u+w ...)" of a directory whose mode already let it write."""
    (tmp_path / "p.py").write_text("def f(x):\n    return [{'x': x}]\n")
    (tmp_path / "in.txt").write_text("1")
    held = tmp_path / "held"
    held.mkdir()
    out = held / "out" if where == "OUTPUT's parent" else held
    args = [sys.executable, "-m", "snapshot_cli", "create", f"{tmp_path}/p.py:f", str(out),
            "--input", str(tmp_path / "in.txt")]  # fmt: skip
    with immutable(held):
        res = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 1, res.stderr
    assert f"no user may write {held}, whatever its mode: it is immutable or append-only" in (
        res.stderr
    )
    assert f"chattr -i -a {held}" in res.stderr and "chmod" not in res.stderr, res.stderr
    assert list(held.iterdir()) == []


def test_an_immutable_cache_dir_is_said_so_not_chmod(tmp_path: Path) -> None:
    import snapshot_cli as snap

    snap.create(lambda x: [{"x": x}], str(tmp_path / "s"), inputs=[1, 2], workers=0)
    held = tmp_path / "held"
    held.mkdir()
    with immutable(held), pytest.raises(snap.OptionError) as caught:
        list(snap.open(tmp_path / "s").loader(2, cache_dir=held / "cache"))
    said = str(caught.value)
    assert f"no user may write {held}, whatever its mode" in said and "chmod" not in said, said
    assert said.endswith("or choose another cache_dir (or none)"), said


# Made, one of its directories given ``mode``, then created again with each chmod the error
# advises run as said, up to 3 times: in one process of the user's (a process and its snap
# import for each create and each chmod took 40 s of the suite's CPU for the 24 cases).
FOLLOW = """
import json, re, subprocess, sys
import snapshot_cli as snap

s, directory, mode = sys.argv[1:4]

def create(n):
    snap.create(lambda i: [{"x": i}], s, inputs=range(n), workers=0, progress=False)

create(3)
subprocess.run(["chmod", mode, f"{s}/{directory}"], check=True)
said, done = [], False
try:
    for _ in range(3):
        try:
            create(4)
        except snap.SnapError as err:
            said.append(f"snap: error: {err}")
            advice = re.findall(r"\\(chmod (-R )?(\\S+) ([^)]+)\\)", said[-1])
            if not advice:
                break
            recursive, change, where = advice[0]
            subprocess.run(["chmod", *recursive.split(), change, where], check=True)
        else:
            done = True
            break
finally:
    subprocess.run(["chmod", "-R", "u+rwX", s], check=True)
print(json.dumps({"said": said, "done": done, "records": snap.open(s).num_records}))
"""


@pytest.mark.parametrize("mode", ["000", "100", "200", "300", "400", "500"])
@pytest.mark.parametrize("directory", ["shards", "_runs", "_versions", "."])
def test_following_the_advice_for_its_own_directory_lets_the_create_run(
    user: User, mode: str, directory: str
) -> None:
    """Any mode of one of its own snapshot's directories: the chmod said, run as said, lets
    the next create run (``chmod -R u+w``, said for a ``shards/`` of ``d---------``, left
    it ``d-w-------``, which the next create refused with the same advice: a probe)."""
    ran = user.run(["-c", FOLLOW, str(user.home / f"own-{directory}-{mode}"), directory, mode])
    assert ran.returncode == 0 and "Traceback" not in ran.stderr, ran.stderr
    report = json.loads(ran.stdout)
    advised = [re.findall(r"\(chmod (-R )?(\S+) ([^)]+)\)", line) for line in report["said"]]
    assert all(advised), report["said"]  # every refusal said what to run
    firsts = [a[0] for a in advised]
    assert len(set(firsts)) == len(firsts), report["said"]  # (none said twice)
    assert report["done"], report["said"]
    assert report["records"] == 4
