"""One ``cache_dir`` shared by the users of a group: real users (``useradd``), each loader a
process of its own user with its own umask, reading a snapshot on the GCS emulator.

Entries and locks follow the umask (a group-writable directory, setgid, umask 002 is what
sharing needs: README), a hit this user may read but not touch is read without refreshing
its LRU time, a lock file another user made locks read-only, an entry this user may not
delete (a sticky directory) is left to its owner, also when the disk is full (the shard is
then read without the cache), and an entry it may not read is named with its owner."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.infra.servers import GcsServer
from tests.infra.users import ROOT_ONLY, SOURCE, Users

pytestmark = [ROOT_ONLY, pytest.mark.slow]

SHARDS, PER_SHARD, VALUE_BYTES = 12, 4, 5_000
SHARD_BYTES = PER_SHARD * VALUE_BYTES  # (and a little more: schema, footer)

CREATE = f"""
import sys
import numpy as np
import snapshot_cli as snap

def records(i):
    for k in range({PER_SHARD}):
        n = i * {PER_SHARD} + k
        yield {{"n": np.int64(n), "x": np.full({VALUE_BYTES}, n % 251, np.uint8)}}

for url in sys.argv[1:]:
    snap.create(records, url, inputs=range({SHARDS}), workers=0, compression="none",
                progress=False)
"""

READ = """
import json, sys
import snapshot_cli as snap
from snapshot_cli.errors import SnapError

url, cache_dir, limit = sys.argv[1], sys.argv[2], sys.argv[3]
options = {"cache_dir": cache_dir}
if limit != "none":
    options["cache_limit"] = int(limit)
seen = []
try:
    with snap.open(url).loader(4, seed=1, **options) as loader:
        for batch in loader:
            assert (batch["x"] == (batch["n"] % 251)[:, None]).all()
            seen += batch["n"].tolist()
except SnapError as err:
    print(f"error: {err}", file=sys.stderr)
    sys.exit(1)
print(json.dumps(sorted(seen)))
"""

ALL = list(range(SHARDS * PER_SHARD))


@pytest.fixture(scope="module")
def server() -> Iterator[GcsServer]:
    with GcsServer() as gcs:
        gcs.make_bucket("shared")
        script = gcs.dir / "create.py"
        script.write_text(CREATE)
        subprocess.run([sys.executable, str(script), "gs://shared/one", "gs://shared/two"],
                       env={**os.environ, **gcs.client_env(), "PYTHONPATH": SOURCE}, check=True,
                       timeout=180)  # fmt: skip
        yield gcs


@pytest.fixture(scope="module")
def users() -> Iterator[Users]:
    with Users(["ana", "ben"]) as made:
        (made.dir / "read.py").write_text(READ)
        yield made


def read(
    users: Users, server: GcsServer, who: str, snapshot: str, cache: Path, umask: int = 0o002,
    limit: int | None = None,
) -> subprocess.CompletedProcess[str]:  # fmt: skip
    return users.run(who, [str(users.dir / "read.py"), f"gs://shared/{snapshot}", str(cache),
                           str(limit or "none")], umask=umask,
                     env=server.client_env())  # fmt: skip


def records(done: subprocess.CompletedProcess[str]) -> list[int]:
    assert done.returncode == 0, done.stderr[-3000:]
    return list(json.loads(done.stdout.splitlines()[-1]))


def team_dir(users: Users, name: str, mode: int = 0o2775, locks: bool = True) -> Path:
    """A directory of the team's group, as its lead would make it (``chmod 2775``), and its
    ``.locks`` made alike if ``locks``."""
    path = users.dir / name
    for made in (path, path / ".locks") if locks else (path,):
        made.mkdir()
        shutil.chown(made, "root", users.group)
        made.chmod(mode)
    return path


def entries(cache: Path) -> dict[str, os.stat_result]:
    return {p.name: p.stat() for p in cache.glob("*.arrow")}


def owner(st: os.stat_result) -> str:
    import pwd

    return pwd.getpwuid(st.st_uid).pw_name


def test_teammates_share_a_cache_dir(users: Users, server: GcsServer) -> None:
    """Both umask 002 in a setgid group directory: the second user's every hit failed
    ("Permission denied ... opening X.arrow": entries were made 0644 whatever the umask, and
    each hit touched the entry's mtime, which only its owner or a writer may)."""
    cache = team_dir(users, "both-002", locks=False)
    assert records(read(users, server, "ana", "one", cache)) == ALL
    filled = entries(cache)
    assert len(filled) == SHARDS
    assert records(read(users, server, "ben", "one", cache)) == ALL
    assert {(owner(st), st.st_mode & 0o777) for st in filled.values()} == {
        (users.user("ana"), 0o664)
    }  # the umask's mode: the group may write (and so touch) them
    after = entries(cache)
    assert {n: st.st_ino for n, st in after.items()} == {n: st.st_ino for n, st in filled.items()}
    assert max(st.st_mtime for st in after.values()) > max(st.st_mtime for st in filled.values())


def test_an_entry_this_user_may_read_but_not_touch_is_read(users: Users, server: GcsServer) -> None:
    """Entries filled under umask 022 (0644): another user of the group reads them as hits,
    without a word, leaving their LRU time (its owner's last use) as it is."""
    cache = team_dir(users, "ana-022")
    assert records(read(users, server, "ana", "one", cache, umask=0o022)) == ALL
    for path in cache.glob("*.arrow"):
        os.utime(path, (1_000_000, 1_000_000))
    filled = entries(cache)
    assert {st.st_mode & 0o777 for st in filled.values()} == {0o644}
    done = read(users, server, "ben", "one", cache)
    assert records(done) == ALL
    assert "cache_dir" not in done.stderr, done.stderr
    assert {n: (st.st_ino, st.st_mtime) for n, st in entries(cache).items()} == {
        n: (st.st_ino, 1_000_000) for n, st in filled.items()
    }


def test_lock_files_another_user_made_lock_for_this_one(users: Users, server: GcsServer) -> None:
    """Lock files made under umask 022 (0644) are locked read-only by the other users: they
    were opened O_RDWR, so refilling an evicted entry failed for everyone but their maker."""
    cache = team_dir(users, "locks-022")
    limit = 100 * SHARDS * SHARD_BYTES  # (an eviction pass: the .evict.lock, ana's too)
    assert records(read(users, server, "ana", "one", cache, umask=0o022, limit=limit)) == ALL
    locks = sorted(cache.glob(".locks/*.lock"))
    assert len(locks) == SHARDS and (cache / ".evict.lock").exists()
    assert {(owner(p.stat()), p.stat().st_mode & 0o777) for p in locks} == {
        (users.user("ana"), 0o644)
    }
    for path in cache.glob("*.arrow"):
        path.unlink()  # evicted (as a smaller cache_limit would): fetched again, under ana's locks
    assert records(read(users, server, "ben", "one", cache, limit=limit)) == ALL
    assert {owner(st) for st in entries(cache).values()} == {users.user("ben")}
    assert sorted(cache.glob(".locks/*.lock")) == locks


def test_entries_this_user_may_not_delete_are_left_to_their_owner(
    users: Users, server: GcsServer
) -> None:
    """A sticky directory (chmod 3775): ben's eviction may not delete ana's entries. It
    failed the loader ("Permission denied while caching ...: evicting entries"); it goes on,
    and says once why the directory stays over its cache_limit."""
    cache = team_dir(users, "sticky", mode=0o3775)
    assert records(read(users, server, "ana", "one", cache)) == ALL
    anas = entries(cache)
    limit = int(SHARDS * SHARD_BYTES * 1.5)  # ana's 12 and ben's 12 do not fit
    done = read(users, server, "ben", "two", cache, limit=limit)
    assert records(done) == ALL
    said = [line for line in done.stderr.splitlines() if "may not delete" in line]
    assert len(said) == 1, done.stderr
    assert said[0].startswith(f"snap: warning: cache_dir {cache} has no room for this loader's "
                              "shards in its cache_limit of "), said[0]  # fmt: skip
    assert "directory with the sticky bit" in said[0] and "chmod 2775" in said[0]
    assert "every other entry is in use" not in done.stderr  # (ana's are not)
    assert set(anas) <= set(entries(cache))  # ana's are all there: hers to delete


def test_a_full_disk_of_entries_this_user_may_not_delete_reads_without_the_cache(
    users: Users, server: GcsServer
) -> None:
    """The disk full of another user's entries, in a sticky directory: making room deleted
    nothing and failed the loader; the shards that do not fit are read without the cache,
    said once, as on a disk full of entries in use."""
    disk = users.dir / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=3775", "tmpfs", str(disk)],
                   check=True)  # fmt: skip
    try:
        shutil.chown(disk, "root", users.group)
        assert records(read(users, server, "ana", "one", disk)) == ALL
        anas = entries(disk)
        st = os.statvfs(disk)  # then the disk is made as small as ana's entries (and a page)
        used = (st.f_blocks - st.f_bfree) * st.f_frsize
        subprocess.run(["mount", "-o", f"remount,size={used + 4096}", str(disk)], check=True)
        done = read(users, server, "ben", "two", disk)
        assert records(done) == ALL
        said = [line for line in done.stderr.splitlines() if "without the cache" in line]
        assert len(said) == 1, done.stderr
        assert "No space left on device (ENOSPC)" in said[0]
        assert "this user may not delete (other users' entries" in said[0]
        assert set(anas) <= set(entries(disk))
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_an_entry_this_user_may_not_read_is_named_with_its_owner(
    users: Users, server: GcsServer
) -> None:
    """An entry filled under umask 077 (0600): reading it is what failed, not writing (the
    error said "this process may not write there"); it names the entry, its owner and what
    lets the group share."""
    cache = team_dir(users, "ana-077")
    assert records(read(users, server, "ana", "one", cache, umask=0o077)) == ALL
    done = read(users, server, "ben", "one", cache)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith(f"error: cache_dir {cache}: Permission denied (EACCES) while caching ")
    assert "for reading; this user (" in line
    assert f"may not read {cache}/" in line and f"({users.user('ana')}'s, mode -rw-------)" in line
    assert "umask 002" in line and f"chmod -R g+rX {cache}" in line
    assert "may not write" not in line


@pytest.mark.parametrize("processes", ["0", "2"])
def test_a_commands_entry_it_may_not_read_names_its_flag(
    users: Users, server: GcsServer, processes: str
) -> None:
    """The same fault met by ``snap bench --cache-dir``, in the loader's threads or in its
    decode processes (which ask nobody how the cache was given): the flag, not the keyword."""
    cache = team_dir(users, f"ana-077-cli-{processes}")
    assert records(read(users, server, "ana", "one", cache, umask=0o077)) == ALL
    done = users.run("ben", ["-m", "snapshot_cli", "bench", "gs://shared/one", "--epochs", "1",
                             "--cache-dir", str(cache), "--processes", processes],
                     env=server.client_env())  # fmt: skip
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    said = f"snap: error: --cache-dir {cache}: Permission denied (EACCES) while caching "
    assert line.startswith(said), line
    assert line.endswith(", or choose another --cache-dir (or none)"), line
    assert "cache_dir" not in line, line
