"""A glob that cannot list a directory it reaches fails, naming it (:mod:`snapshot_cli.globbing`):
fsspec's walk left such a directory out without a word (``on_error="omit"``), and
``snap create prep.py:f out --input 'data/**'`` as a user who may not list ``data/locked``
made a snapshot of half the records (a teammate's run of a shared snapshot committed it as a
new version, ``inputs_removed: 3``). Every OS error of a listing, for ``*``, ``**`` and
``[...]``, locally and on a filesystem that walks as fsspec's generic one does; a directory
gone between its parent's listing and its own is left out, as a listing a moment later
would; the filesystems that list all at once are asked as before. End to end as a user who
is not root (:mod:`tests.unprivileged`): a directory it may not list, or not enter."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest
from click.testing import CliRunner
from fsspec import AbstractFileSystem
from fsspec.implementations.local import LocalFileSystem
from fsspec.implementations.memory import MemoryFileSystem
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli import globbing, retry, storage
from snapshot_cli.cli import cli
from snapshot_cli.errors import StorageError
from tests.unprivileged import unprivileged

PIPE = "def f(path):\n    yield {'file': path}\n"
PATTERNS = ["data/**", "data/*/*.bin", "data/[lo]*/*.bin"]
# Every errno but those a gone directory gives (left out: see test_a_directory_gone_...)
FAILING = sorted(set(errno.errorcode) - {errno.ENOENT, errno.ENOTDIR})


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """data/open/{1,2,3}.bin and data/locked/{1,2,3}.bin under tmp_path, the working dir."""
    for d in ("open", "locked"):
        (tmp_path / "data" / d).mkdir(parents=True)
        for i in (1, 2, 3):
            (tmp_path / "data" / d / f"{i}.bin").write_bytes(b"x")
    (tmp_path / "prep.py").write_text(PIPE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(retry, "RETRY_BASE_S", 0.0)  # (transient errnos are tried again)
    return tmp_path


def failing_listing(monkeypatch: pytest.MonkeyPatch, code: int, name: str = "locked") -> None:
    """Local listings of a directory called ``name`` fail with ``code``."""
    real = LocalFileSystem.ls

    def ls(self: Any, path: str, detail: bool = False, **kwargs: Any) -> Any:
        if os.path.basename(str(path).rstrip("/")) == name:
            kind = PermissionError if code in (errno.EACCES, errno.EPERM) else OSError
            raise kind(code, os.strerror(code), str(path))
        return real(self, path, detail=detail, **kwargs)

    monkeypatch.setattr(LocalFileSystem, "ls", ls)


@pytest.mark.parametrize("code", FAILING, ids=[errno.errorcode[c] for c in FAILING])
def test_every_error_listing_a_directory_is_said(
    tree: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    failing_listing(monkeypatch, code)
    locked = str(tree / "data" / "locked")
    for pattern in PATTERNS:
        with pytest.raises(StorageError) as caught:
            snap.create(f"{tree}/prep.py:f", str(tree / "out"), inputs=pattern, workers=0,
                        progress=False)  # fmt: skip
        said = str(caught.value)
        assert locked in said and os.strerror(code) in said, (pattern, said)
        assert f"the glob {tree}/{pattern} reaches it, and its files would be left out" in said
        assert not (tree / "out" / "manifest.json").exists()


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("code", [errno.EACCES, errno.EIO, errno.ESTALE, errno.ELOOP])
def test_a_command_says_it_and_writes_nothing(
    tree: Path, monkeypatch: pytest.MonkeyPatch, pattern: str, code: int
) -> None:
    out = tree / "out"
    made = CliRunner().invoke(cli, ["create", "prep.py:f", str(out), "--input", pattern,
                                    "--workers", "0", "--quiet"])  # fmt: skip
    assert made.exit_code == 0, made.stderr
    before = (out / "manifest.json").read_bytes()
    failing_listing(monkeypatch, code)
    again = CliRunner().invoke(cli, ["create", "prep.py:f", str(out), "--input", pattern,
                                     "--workers", "0", "--quiet"])  # fmt: skip
    assert again.exit_code == 1 and again.stdout == ""
    assert again.stderr.startswith("snap: error: ") and "Traceback" not in again.stderr
    assert str(tree / "data" / "locked") in again.stderr and os.strerror(code) in again.stderr
    assert (out / "manifest.json").read_bytes() == before  # (no version of half of them)
    assert snap.open(str(out)).num_records == 6


def test_a_directory_gone_before_its_listing_is_left_out(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for code in (errno.ENOENT, errno.ENOTDIR):
        failing_listing(monkeypatch, code)
        fs, path = storage.resolve("data/**")
        found = sorted(p for p, i in storage.matching(fs, path).items() if i["type"] == "file")
        assert found == [str(tree / "data" / "open" / f"{i}.bin") for i in (1, 2, 3)]


def test_a_pattern_whose_root_is_missing_matches_nothing(tree: Path) -> None:
    fs, path = storage.resolve("nowhere/*/*.bin")
    assert storage.matching(fs, path) == {}


class Walked(MemoryFileSystem):
    """A filesystem that walks as fsspec's generic one does (WebHDFS, pyarrow's HDFS, S3 with
    a depth): a listing per directory; ``/w/locked`` may not be listed."""

    protocol = ("walked",)
    find = AbstractFileSystem.find
    glob = AbstractFileSystem.glob
    asked: list[str] = []

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> Any:
        if path.rstrip("/").endswith("/locked"):
            raise PermissionError(errno.EACCES, "Forbidden", path)
        return super().ls(path, detail=detail, **kwargs)


@pytest.fixture
def walked(monkeypatch: pytest.MonkeyPatch) -> Iterator[Walked]:
    monkeypatch.setattr(globbing, "WALKED_GLOB", globbing.WALKED_GLOB | {"walked"})
    fs = Walked()
    for d in ("open", "locked"):
        for i in (1, 2):
            fs.pipe(f"/w/{d}/{i}.bin", b"x")
    yield fs
    MemoryFileSystem().rm("/w", recursive=True)


@pytest.mark.parametrize("pattern", ["/w/**", "/w/*/*.bin", "/w/[lo]*/*.bin"])
def test_a_remote_walk_says_it_too(walked: Walked, pattern: str) -> None:
    assert len(walked.glob(pattern, detail=True)) >= 2  # (fsspec's own: 2 files, none said)
    with pytest.raises(StorageError, match=r"walked:///w/locked: check that you may read it"):
        storage.matching(walked, pattern)


def test_a_remote_walk_matches_as_fsspecs_glob(walked: Walked) -> None:
    walked.pipe("/v/a/1.bin", b"x")
    walked.pipe("/v/b/c/2.bin", b"x")
    for pattern in ("/v/**", "/v/*/*.bin", "/v/[ab]/*", "/v/*/", "/v/**/*.bin"):
        assert storage.matching(walked, pattern) == walked.glob(pattern, detail=True), pattern
    MemoryFileSystem().rm("/v", recursive=True)


def test_memory_globs_as_before(memfs: fsspec.AbstractFileSystem) -> None:
    for name in ("/m/a/1.bin", "/m/a/2.txt", "/m/b/c/3.bin"):
        memfs.pipe(name, b"x")
    for pattern in ("/m/**", "/m/*/*.bin", "/m/[ab]/*", "/m/**/*.bin"):
        assert storage.matching(memfs, pattern) == memfs.glob(pattern, detail=True), pattern
    files = snap.create(lambda p: [{"p": p}], "memory://snap-g", inputs="memory://m/**/*.bin",
                        workers=0, progress=False).num_records  # fmt: skip
    assert files == 2


@pytest.mark.parametrize("proto", ["s3", "gs", "http", "memory"])
def test_other_filesystems_glob_as_they_do(proto: str) -> None:
    """gcsfs and s3fs list a prefix in one request the server filters (a walk of
    ``train-*`` listed a whole prefix of a million objects: a thousand requests), HTTP has
    its own rules: their glob is asked as it is, for any pattern."""
    asked: list[str] = []

    class Other(Walked):
        protocol = (proto,)

        def glob(self, path: str, **kwargs: Any) -> Any:
            asked.append(path)
            return AbstractFileSystem.glob(self, path, **kwargs)

    fs = Other()
    fs.pipe("/b/open/1.bin", b"x")
    try:
        for pattern in ("/b/**", "/b/*/*.bin", "/b/open/1*"):
            assert list(globbing.glob(fs, pattern, storage.retrying)), pattern
        assert asked == ["/b/**", "/b/*/*.bin", "/b/open/1*"]
    finally:
        MemoryFileSystem().rm("/b", recursive=True)


def test_a_volumes_lost_and_found_is_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """mkfs makes ``lost+found`` at an ext4 volume's root, root's alone: ``/mnt/vol/**``
    failed on it for every user but root (a review's finding); any other such directory is
    said."""
    monkeypatch.setattr(globbing, "WALKED_GLOB", globbing.WALKED_GLOB | {"walked"})

    class Volume(Walked):
        def ls(self, path: str, detail: bool = True, **kwargs: Any) -> Any:
            if path.rstrip("/").endswith(("/lost+found", "/private")):
                raise PermissionError(errno.EACCES, "Permission denied", path)
            return MemoryFileSystem.ls(self, path, detail=detail, **kwargs)

    fs = Volume()
    for name in ("/vol/data/1.jpg", "/vol/lost+found/#123", "/vol/data/2.jpg"):
        fs.pipe(name, b"x")
    try:
        found = globbing.glob(fs, "/vol/**/*.jpg", storage.retrying)
        assert sorted(found) == ["/vol/data/1.jpg", "/vol/data/2.jpg"]
        fs.pipe("/vol/private/3.jpg", b"x")
        with pytest.raises(StorageError, match="/vol/private"):
            globbing.glob(fs, "/vol/**/*.jpg", storage.retrying)
    finally:
        MemoryFileSystem().rm("/vol", recursive=True)


def test_as_a_user_who_may_not_list_or_enter_a_directory(tmp_path: Path) -> None:
    """A real directory, not an injected error: mode a-r (entered, not listed) and 000 (not
    entered); ``data/**``, ``data/*/*.bin`` and ``nolist/*``."""
    with unprivileged() as user:
        home = user.home
        for d in ("open", "locked"):
            (home / "data" / d).mkdir(parents=True)
            for i in (1, 2, 3):
                (home / "data" / d / f"{i}.bin").write_bytes(b"x")
        (home / "nolist").mkdir()
        (home / "nolist" / "a.bin").write_bytes(b"x")
        (home / "prep.py").write_text(PIPE)
        for path in (home / "data", home / "nolist", home / "prep.py"):
            user.own(path)
        cases = [("a-r", "data/**", home / "data" / "locked"),
                 ("000", "data/*/*.bin", home / "data" / "locked"),
                 ("a-r", "nolist/*", home / "nolist")]  # fmt: skip
        for mode, pattern, locked in cases:
            user.chmod(locked, mode)
            try:
                done = user.run(["-m", "snapshot_cli", "create", "prep.py:f", "out", "--input",
                                 pattern, "--workers", "0", "--quiet"])  # fmt: skip
            finally:
                user.chmod(locked, "u+rwx")
            assert done.returncode == 1, (pattern, done.stdout, done.stderr)
            assert done.stderr.startswith(f"snap: error: permission denied while listing {locked}")
            assert f"this user ({user.name}) may not" in done.stderr, done.stderr
            assert "Traceback" not in done.stderr and not (home / "out").exists()


@pytest.fixture
def linked(tmp_path: Path) -> Path:
    """data/dogs/{1,2}.jpg, data/cats -> ../elsewhere/cats ({1,2}.jpg, deep/3.jpg), and
    data/dogs/also -> data/dogs' neighbour data/birds (a link within the tree)."""
    for d, names in {"data/dogs": ["1", "2"], "elsewhere/cats": ["1", "2"],
                     "elsewhere/cats/deep": ["3"], "data/birds": ["4"]}.items():  # fmt: skip
        (tmp_path / d).mkdir(parents=True, exist_ok=True)
        for n in names:
            (tmp_path / d / f"{n}.jpg").write_text(f"{d}/{n}")
    (tmp_path / "data/cats").symlink_to("../elsewhere/cats")
    (tmp_path / "data/dogs/also").symlink_to("../birds")
    return tmp_path


@pytest.mark.parametrize("pattern", ["data/*/*.jpg", "data/**/*.jpg", "data/**", "data/c*/**"])
def test_links_to_directories_are_followed_as_pythons_glob_does(linked: Path, pattern: str) -> None:
    """fsspec lists a link to a directory as "other", which its walk takes for a file:
    data/*/*.jpg left out every file of data/cats -> ../elsewhere/cats without a word."""
    import glob as pyglob

    fs, _ = storage.resolve(str(linked))
    ours = globbing.glob(fs, str(linked / pattern), storage.retrying)
    files = sorted(p for p in ours if os.path.isfile(p))
    expected = sorted(p for p in pyglob.glob(str(linked / pattern), recursive=True)
                      if os.path.isfile(p))  # fmt: skip
    assert files == expected
    assert any("/cats/" in p for p in files), files


def test_links_in_a_loop_are_not_followed_round_it(linked: Path) -> None:
    """A link to a directory above it, and two links to each other's directories: each
    file is reached (through each way in that is no loop), and the walk ends."""
    (linked / "data/dogs/up").symlink_to("..")
    (linked / "data/root").symlink_to("/")
    (linked / "elsewhere/cats/back").symlink_to(linked / "data")  # (data/cats/back -> data)
    fs, _ = storage.resolve(str(linked))
    found = globbing.glob(fs, str(linked / "data/**"), storage.retrying)
    files = sorted(str(Path(p).relative_to(linked)) for p in found if os.path.isfile(p))
    assert files == ["data/birds/4.jpg", "data/cats/1.jpg", "data/cats/2.jpg",
                     "data/cats/deep/3.jpg", "data/dogs/1.jpg", "data/dogs/2.jpg",
                     "data/dogs/also/4.jpg"]  # fmt: skip


def test_a_pattern_matching_only_round_a_loop_says_so(tmp_path: Path) -> None:
    """``loop/*/*/*/*.txt`` with ``loop/x/up -> ..``: "matched no files", though the shell
    lists ``loop/x/up/x/f.txt`` (a probe). Left out, as a loop is, and said."""
    (tmp_path / "loop/x").mkdir(parents=True)
    (tmp_path / "loop/x/f.txt").write_text("l")
    (tmp_path / "loop/x/up").symlink_to("..")
    (tmp_path / "p.py").write_text(PIPE)
    args = ["create", f"{tmp_path}/p.py:f", str(tmp_path / "out"), "--workers", "0", "--input"]
    result = CliRunner().invoke(cli, [*args, f"{tmp_path}/loop/*/*/*/*.txt"])
    assert result.exit_code == 1, result.output
    assert "matched no files (the shell's glob matches " in result.output
    assert f"{tmp_path}/loop/x/up/x/f.txt, through a link to a directory that" in result.output
    result = CliRunner().invoke(cli, [*args, f"{tmp_path}/loop/*/*.jpg"])  # (none there)
    assert result.exit_code == 1 and "matched no files" in result.output
    assert "shell's glob" not in result.output, result.output


def test_a_create_reads_the_files_of_a_linked_directory(linked: Path) -> None:
    (linked / "p.py").write_text(PIPE)
    out = linked / "out"
    result = CliRunner().invoke(cli, ["create", f"{linked}/p.py:f", str(out), "--input",
                                      f"{linked}/data/*/*.jpg", "--workers", "0"])  # fmt: skip
    assert result.exit_code == 0, result.output
    got = sorted(Path(f).name for b in snap.open(out).loader(10) for f in b["file"].tolist())
    assert got == ["1.jpg", "1.jpg", "2.jpg", "2.jpg", "4.jpg"]


@pytest.mark.parametrize(
    ("given", "taken"),
    [
        ("f[1].txt", ["f[1].txt"]),  # (a file of that name: it, not f1.txt)
        ("q?.txt", ["q?.txt"]),  # (not qq.txt too)
        ("f[0-9].txt", ["f1.txt"]),  # (no such file: the glob)
        ("q*.txt", ["q?.txt", "qq.txt"]),
    ],
)
def test_a_file_named_exactly_as_a_pattern_is_that_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str, taken: list[str]
) -> None:
    """``inputs=sorted(Path(d).iterdir())`` holding ``f[1].txt`` and ``f1.txt`` made a
    snapshot of f1.txt alone: each name was globbed, and f[1].txt's glob matched f1.txt."""
    from snapshot_cli.writers import inputs as inputs_mod

    monkeypatch.chdir(tmp_path)
    for name in ("f[1].txt", "f1.txt", "q?.txt", "qq.txt"):
        Path(name).write_text(name)
    for value in (given, [given]):
        got = inputs_mod.resolve(value, None, None).files
        assert sorted(Path(f.url).name for f in got) == taken, value


def test_a_list_of_a_directorys_files_is_each_of_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe's case end to end: ``inputs=sorted(Path(".").iterdir())``."""
    monkeypatch.chdir(tmp_path)
    for name in ("f[1].txt", "f1.txt", "q?.txt", "qq.txt", "p.py"):
        Path(name).write_text(PIPE if name == "p.py" else name)
    files = sorted(Path(".").iterdir())
    snap.create("p.py:f", "out", inputs=files, workers=0)
    got = sorted(Path(f).name for b in snap.open("out").loader(10) for f in b["file"].tolist())
    assert got == sorted(p.name for p in files)


NAMES = st.sampled_from(["a", "b.jpg", ".h", "._a.jpg", ".d", "ab.jpg", "c"])
COMPONENTS = st.sampled_from(["*", "**", ".*", "*.jpg", "[!a]*", "[^a]*", "a*", "?", ".d", "c",
                              "a", "b.jpg"])  # fmt: skip


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    tree=st.lists(st.lists(NAMES, min_size=1, max_size=3), min_size=1, max_size=8),
    parts=st.lists(COMPONENTS, min_size=1, max_size=3).filter(
        lambda p: p.count("**") <= 1 and any(set("*?[") & set(c) for c in p)  # (a glob)
    ),
)
def test_a_local_glob_matches_the_files_pythons_glob_does(
    tmp_path_factory: pytest.TempPathFactory, tree: list[list[str]], parts: list[str]
) -> None:
    """Hidden names (``*`` and ``**`` do not match a leading dot: fsspec's took ``._a.jpg``,
    ``.ipynb_checkpoints/`` and ``.git/`` in) and ``[^a]`` (negation, as the shell says it;
    Python's ``[!a]``), over any tree and pattern of one ``**`` at most."""
    import glob as pyglob

    root = tmp_path_factory.mktemp("tree")
    for names in tree:
        *dirs, leaf = names
        where = root.joinpath(*dirs) if dirs else root
        try:
            where.mkdir(parents=True, exist_ok=True)
            (where / leaf).write_text("x")
        except (NotADirectoryError, FileExistsError, IsADirectoryError):
            continue  # (a name both a file and a directory: not a tree)
    pattern = str(root / "/".join(parts))
    fs, _ = storage.resolve(str(root))
    ours = sorted(p for p in storage.matching(fs, pattern) if os.path.isfile(p))
    python = pyglob.glob(pattern.replace("[^", "[!"), recursive=True)
    assert ours == sorted(p for p in python if os.path.isfile(p)), pattern


def test_a_double_star_inside_a_name_is_a_usage_error(tree: Path) -> None:
    said = r"inputs='data/\*\*\.bin' is not a glob: .*\(a/\*\*/\*\.txt for every"
    with pytest.raises(snap.OptionError, match=said):
        snap.create(lambda p: [{"p": p}], "out", inputs="data/**.bin", workers=0)


def test_braces_are_told_to_be_the_shells(tree: Path) -> None:
    result = CliRunner().invoke(cli, ["create", "prep.py:f", "out", "--input", "data/{open,x}/*"])
    assert result.exit_code == 1 and "matched no files" in result.output, result.output
    assert "braces, {a,b}, are the shell's expansion, not a glob's: give --input a pattern " in (
        result.output
    )
