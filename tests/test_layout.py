"""``layout.own_file`` tells a snapshot's own files by their paths (what ``--input 'data/**'``
over a directory holding another snapshot must leave out), and nothing else."""

from __future__ import annotations

import posixpath

from hypothesis import given
from hypothesis import strategies as st

from snapshot_cli import layout

SEGMENT = st.from_regex(r"[A-Za-z0-9_.-]{1,12}", fullmatch=True).filter(
    lambda s: s not in (".", "..")
)
ROOTS = st.builds(
    lambda scheme, parts: scheme + "/".join(parts),
    st.sampled_from(["/", "gs://", "hdfs://nn:8020/", "memory://"]),
    st.lists(SEGMENT, min_size=1, max_size=4),
)
RUNS = st.from_regex(r"[0-9a-f]{10}", fullmatch=True)
# Past the widths the names are padded to (5-digit tasks, 4-digit shards of a task, 8-digit
# epochs and versions): a task's 10,000th shard was no snapshot's file, so an input glob took
# it in and gc never removed it (a scale probe's finding).
N = st.integers(0, 99_999) | st.integers(10**5, 10**9)
SEQ = st.integers(0, 9_999) | st.integers(10**4, 10**7)
WIDE = st.integers(0, 10**8 - 1) | st.integers(10**8, 10**12)


@st.composite
def own_files(draw: st.DrawFn) -> tuple[str, str, str]:
    """A file snap writes under ``root``: (root, part, path)."""
    root, run, n, seq, wide = draw(ROOTS), draw(RUNS), draw(N), draw(SEQ), draw(WIDE)
    writer = draw(st.none() | WIDE)  # (None: names before the writer's)
    made = draw(st.sampled_from([
        ("shards", posixpath.join(root, layout.shard_path(run, n, seq, writer))),
        ("_runs", layout.run_file(root, run)),
        ("_runs", layout.result_path(root, run, n)),
        ("_runs", layout.lease_path(root, wide)),
        ("_versions", layout.version_path(root, wide + 1)),
        ("_versions", posixpath.join(root, layout.tasks_table(wide + 1))),
    ]))  # fmt: skip
    path = layout.temporary_path(made[1]) if draw(st.booleans()) else made[1]
    return root, made[0], path


@given(own_files())
def test_every_file_snap_writes_is_told_with_its_root(case: tuple[str, str, str]) -> None:
    root, part, path = case
    assert layout.own_file(path) == (root, part)


@given(run=RUNS, task=N, seq=SEQ, writer=st.none() | WIDE, version=WIDE, temporary=st.booleans())
def test_each_name_snap_gives_is_its_own_whatever_its_numbers(
    run: str, task: int, seq: int, writer: int | None, version: int, temporary: bool
) -> None:
    """What gc removes in ``shards/``, ``_runs/`` and ``_versions/`` it knows by these."""
    name = posixpath.basename(layout.shard_path(run, task, seq, writer))
    if temporary:  # (the file a shard is written to before its rename)
        name = posixpath.basename(layout.temporary_path(name))
    assert layout.is_own_shard(name)
    assert layout.version_of(posixpath.basename(layout.version_path("r", version + 1))) == (
        version + 1,
        "manifest",
    )
    assert layout.version_of(posixpath.basename(layout.tasks_table(version + 1))) == (
        version + 1,
        "tasks",
    )
    assert layout.lease_epoch(posixpath.basename(layout.lease_path("r", version))) == version


@given(
    root=ROOTS,
    dirs=st.lists(SEGMENT | st.sampled_from(["shards", "_runs", "_versions"]), max_size=3),
    name=SEGMENT,
    suffix=st.sampled_from([".jpg", ".txt", ".npy", ".parquet", ".json", ".arrow", ""]),
)
def test_a_users_files_are_not_even_in_directories_named_like_snaps(
    root: str, dirs: list[str], name: str, suffix: str
) -> None:
    """A user's files (a name of its own, even in ``shards/`` or ``_runs/``) are no
    snapshot's: only a name snap gives (a 10-hex run, a 5-digit task, ...) is."""
    assert layout.own_file(posixpath.join(root, *dirs, f"img-{name}{suffix}")) is None
    assert layout.own_file(posixpath.join(root, *dirs, "manifest.json")) is None
