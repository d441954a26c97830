"""A snapshot's own files beside its shards (readers/verify_files.py, versions.committed_after):

- ``manifest.json`` put back to an older copy (the damaged-manifest advice said "put back a
  copy", not which): ``snap gc`` deleted the newer, committed version at once, its shards with
  it, calling it "never committed", and a grow wrote over its copy; both now refuse, saying
  how to go back to it or drop it, and ``snap verify`` names it;
- ``snap verify`` said "ok" of a ``manifest.json`` edited after its commit (gc refused it and
  sent the user to verify), of a damaged task table (a grow then computed every task again)
  and of a damaged copy of an older version (``inspect --versions`` and gc failed on it).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli.errors import ManifestError, SnapError
from snapshot_cli.readers.verify import verify
from tests.commands.conftest import invoke


def cli(argv: list[str]) -> Result:
    return invoke(*argv)


def days(item: int) -> Iterator[dict[str, int]]:
    yield {"day": item}


def tree(path: Path) -> set[str]:
    """The snapshot's files but leases (gc and create take one)."""
    return {
        str(p.relative_to(path))
        for p in path.rglob("*")
        if p.is_file() and not p.name.startswith("lease-")
    }


@pytest.fixture
def two_versions(tmp_path: Path) -> Path:
    root = tmp_path / "s"
    for n in (3, 5):
        snap.create(days, str(root), inputs=list(range(n)), workers=0, progress=False)
    return root


def test_a_manifest_put_back_to_an_older_copy_keeps_the_newer_version(
    two_versions: Path,
) -> None:
    root, kept = two_versions, two_versions / "_versions"
    shutil.copyfile(kept / "v00000001.json", root / "manifest.json")
    before = tree(root)
    for argv in (
        ["gc", str(root)],
        ["gc", str(root), "--retention", "0"],
        ["gc", str(root), "--dry-run"],
    ):
        res = cli(argv)
        assert res.exit_code == 1, res.output
        assert "keeps version 2, committed after it" in res.stderr, res.stderr
        assert f"copy {kept / 'v00000002.json'} to {root / 'manifest.json'}" in res.stderr
        assert "Traceback" not in res.output
    with pytest.raises(ManifestError, match="keeps version 2, committed after it"):
        snap.create(days, str(root), inputs=list(range(7)), workers=0, progress=False)
    assert tree(root) == before  # (nothing removed, nothing written over)
    res = cli(["verify", str(root)])
    assert res.exit_code == 1 and "keeps version 2, committed after it" in res.stdout, res.output
    assert sorted(int(d) for b in snap.open(str(root)).iter_batches() for d in b["day"]) == [
        0,
        1,
        2,
    ]
    # the advice's first way: back to version 2, which is whole
    shutil.copyfile(kept / "v00000002.json", root / "manifest.json")
    assert cli(["verify", str(root)]).exit_code == 0
    assert snap.open(str(root)).num_records == 5
    assert cli(["gc", str(root)]).exit_code == 0


def test_dropping_the_newer_version_as_the_error_says_lets_gc_and_create_go_on(
    two_versions: Path,
) -> None:
    root, kept = two_versions, two_versions / "_versions"
    shutil.copyfile(kept / "v00000001.json", root / "manifest.json")
    v1 = {s["path"] for s in json.loads((root / "manifest.json").read_text())["shards"]}
    for name in ("v00000002.json", "v00000002.tasks.json"):
        (kept / name).unlink()
    res = cli(["gc", str(root), "--json"])
    assert res.exit_code == 0, res.output
    removed = {g["path"] for g in json.loads(res.stdout)["removed"]}
    assert removed and all(p.startswith("shards/") and p not in v1 for p in removed), removed
    info = snap.create(days, str(root), inputs=list(range(4)), workers=0, progress=False)
    assert info.num_records == 4 and snap.open(str(root)).version == 2


def test_a_copy_above_the_manifest_whose_run_is_still_there_is_a_failed_commit(
    two_versions: Path,
) -> None:
    """A commit writes its copy, then manifest.json, then removes its run: a copy above
    manifest.json whose run is in _runs/ was never committed, and gc removes it as before."""
    root, kept = two_versions, two_versions / "_versions"
    shutil.copyfile(kept / "v00000001.json", root / "manifest.json")
    run_name = json.loads((kept / "v00000002.json").read_text())["run"]
    (root / "_runs" / run_name).mkdir()
    res = cli(["gc", str(root), "--json"])
    assert res.exit_code == 0, res.output
    removed = {g["path"]: g["reason"] for g in json.loads(res.stdout)["removed"]}
    assert removed["_versions/v00000002.json"] == "a version that was never committed"
    assert f"_runs/{run_name}" in removed


def edited(root: Path, change: Any) -> None:
    doc = json.loads((root / "manifest.json").read_text())
    change(doc)
    (root / "manifest.json").write_text(json.dumps(doc))


def drop_last_shard(doc: dict[str, Any]) -> None:
    """A shard's entry dropped by hand, the totals made to agree."""
    gone, totals = doc["shards"].pop(), doc["totals"]
    totals["records"] -= gone["records"]
    totals["shards"] -= 1
    totals["bytes"] -= gone["bytes"]
    totals["uncompressed_bytes"] -= gone["uncompressed_bytes"]
    totals["record_batches"] -= gone["record_batches"]


def test_verify_names_a_manifest_edited_after_its_commit(two_versions: Path) -> None:
    root = two_versions
    edited(root, drop_last_shard)
    assert snap.open(str(root)).num_records == 4  # (the readers take it: it is valid)
    res = cli(["verify", str(root)])
    assert res.exit_code == 1, res.output
    said = f"{root / 'manifest.json'} differs from {root / '_versions' / 'v00000002.json'}"
    assert said in res.stdout and "not ok" in res.stdout, res.stdout
    doc = json.loads(cli(["verify", str(root), "--json"]).stdout)
    assert not doc["ok"] and len(doc["problems"]) == 1 and doc["num_damaged"] == 0
    gc = cli(["gc", str(root)])
    assert gc.exit_code == 1 and "run snap verify" in gc.stderr  # (which now says why)


def test_verify_of_a_reformatted_manifest_is_ok(two_versions: Path) -> None:
    """The copy holds the same JSON: whitespace is no edit."""
    doc = json.loads((two_versions / "manifest.json").read_text())
    (two_versions / "manifest.json").write_text(json.dumps(doc, indent=4) + "\n")
    res = cli(["verify", str(two_versions), "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["problems"] == [], res.output


def test_verify_names_damaged_files_of_its_versions(two_versions: Path) -> None:
    kept = two_versions / "_versions"
    with open(kept / "v00000002.tasks.json", "ab") as f:
        f.write(b" ")
    (kept / "v00000001.json").write_text("garbage")
    res = cli(["verify", str(two_versions), "--json"])
    assert res.exit_code == 1, res.output
    problems = json.loads(res.stdout)["problems"]
    assert len(problems) == 2, problems
    assert "v00000002.tasks.json does not have the crc32c the manifest gives" in problems[0]
    assert "computes every one again" in problems[0]
    assert "v00000001.json is not valid JSON" in problems[1] and "delete it" in problems[1]


def test_the_current_version_s_copy_damaged_is_written_again_as_said(two_versions: Path) -> None:
    """Its kept copy emptied: the advice said to delete it "to stop keeping that version",
    the one in use (a probe). Deleted as said, gc writes it again from manifest.json."""
    copy = two_versions / "_versions" / "v00000002.json"
    copy.write_text("")
    res = cli(["verify", str(two_versions), "--json"])
    assert res.exit_code == 1, res.output
    (problem,) = json.loads(res.stdout)["problems"]
    assert "snap gc writes the current version's again" in problem, problem
    assert "stop keeping" not in problem
    copy.unlink()
    assert cli(["gc", str(two_versions)]).exit_code == 0
    assert json.loads(copy.read_text())["history"]["version"] == 2
    assert cli(["verify", str(two_versions)]).exit_code == 0


def test_a_copy_without_its_versions_is_ok_with_a_note(two_versions: Path, tmp_path: Path) -> None:
    """README: a snapshot copied without ``_versions/`` is supported (gc writes the current
    copy again); verify called its missing task table DAMAGED and exited 1, after gc too."""
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copy(two_versions / "manifest.json", copy)
    shutil.copytree(two_versions / "shards", copy / "shards")
    for _ in range(2):  # (as copied, then after gc wrote the current version's copy)
        res = cli(["verify", str(copy), "--json"])
        assert res.exit_code == 0, res.output
        doc = json.loads(res.stdout)
        assert doc["ok"] and doc["problems"] == [], doc["problems"]
        [note] = doc["notes"]
        assert "v00000002.tasks.json is missing (a copy made without _versions/?" in note, note
        assert "computes every one again" in note, note
        text = cli(["verify", str(copy)]).stdout
        assert f"{copy}: ok (" in text and f"  note: {note}" in text, text
        assert cli(["gc", str(copy)]).exit_code == 0
    (copy / "_versions" / "v00000002.tasks.json").write_text("{}")  # (there, and damaged)
    res = cli(["verify", str(copy), "--json"])
    assert res.exit_code == 1 and json.loads(res.stdout)["notes"] == [], res.output


def test_verify_names_a_copy_of_another_version(tmp_path: Path) -> None:
    root = tmp_path / "s"
    for n in (2, 3, 4):
        snap.create(days, str(root), inputs=list(range(n)), workers=0, progress=False)
    kept = root / "_versions"
    shutil.copyfile(kept / "v00000002.json", kept / "v00000001.json")
    report = verify(snap.open(str(root)))
    assert [p.split(": ")[0] for p in report.problems] == [
        f"{kept / 'v00000001.json'} holds the manifest of version 2, not 1"
    ]


@pytest.mark.parametrize("dry_run", [True, False])
def test_gc_names_a_copy_of_another_version_and_what_to_do(tmp_path: Path, dry_run: bool) -> None:
    """gc said "removed nothing: the listing ... shows version 1, not read (a listing that
    failed or is stale, or a copy not of its version); run snap gc again, and if it says the
    same, snap verify", of a copy it had read and could name; and "removed" of a dry run."""
    root = tmp_path / "s"
    for n in (2, 3, 4):
        snap.create(days, str(root), inputs=list(range(n)), workers=0, progress=False)
    kept = root / "_versions"
    shutil.copyfile(kept / "v00000002.json", kept / "v00000001.json")
    before = tree(root)
    result = cli(["gc", str(root), "--retention", "0", *(["--dry-run"] * dry_run)])
    assert result.exit_code == 1 and tree(root) == before
    said = "snap gc --dry-run: none would be removed" if dry_run else "snap gc removed nothing"
    assert result.output.strip() == (
        f"snap: error: {said}: {kept / 'v00000001.json'} holds the manifest of version 2, not "
        "1, so which shards version 1 holds is not known; delete it, or put version 1's "
        "manifest there, and run snap gc again"
    )
    (kept / "v00000001.json").unlink()  # as it says
    assert cli(["gc", str(root), "--retention", "0"]).exit_code == 0
    assert [b["day"].tolist() for b in snap.open(str(root)).loader(8, shuffle=False)] == [
        [0, 1, 2, 3]
    ]


def test_verify_of_an_older_version_checks_its_own_task_table(two_versions: Path) -> None:
    older = snap.open(str(two_versions), version=1)
    assert verify(older).ok
    with open(two_versions / "_versions" / "v00000001.tasks.json", "ab") as f:
        f.write(b" ")
    assert ["does not have the crc32c" in p for p in verify(older).problems] == [True]
    assert verify(snap.open(str(two_versions))).ok  # (version 2's files are whole)


def test_verify_of_one_shard_checks_its_bytes_only(two_versions: Path) -> None:
    edited(two_versions, drop_last_shard)
    shard = sorted((two_versions / "shards").iterdir())[0]
    assert cli(["verify", str(shard)]).exit_code == 0


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(value, list) and value:
        for i, v in enumerate(value):
            yield from _leaves(v, (*path, i))
    else:
        yield path


def _changed(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "0" if value else "x"
    return [0] if value == [] else {"x": 1} if value == {} else 1


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pristine") / "s"
    for n in (2, 4):
        snap.create(days, str(root), inputs=list(range(n)), workers=0, progress=False)
    return root


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_no_edit_of_the_manifest_is_called_ok(
    pristine: Path, tmp_path: Path, data: st.DataObject
) -> None:
    """Every value of manifest.json, at any depth, changed after the commit: snap refuses
    to open it, or verify reports it (a kind, not a sample of keys)."""
    doc = json.loads((pristine / "manifest.json").read_text())
    path = data.draw(st.sampled_from(sorted(_leaves(doc), key=repr)))
    root = tmp_path / f"s{abs(hash(path))}"
    shutil.copytree(pristine, root)

    def change(d: Any) -> None:
        for key in path[:-1]:
            d = d[key]
        d[path[-1]] = _changed(d[path[-1]])

    edited(root, change)
    try:
        report = verify(snap.open(str(root)))
    except SnapError:
        return  # (refused when opened or read: said, not "ok")
    assert not report.ok, path


@pytest.mark.parametrize("name", ["v00000001.json", "v00000001.tasks.json"])
def test_a_kept_copy_given_as_the_snapshot_names_it_and_how_to_read_that_version(
    two_versions: Path, name: str
) -> None:
    """It said "is a file, not a snapshot" and no more; the CLI reads a snapshot's current
    version, and Python any version kept."""
    copy = two_versions / "_versions" / name
    what = "manifest" if name == "v00000001.json" else "task table"
    said = (
        f"{copy} is the kept copy of version 1's {what} of the snapshot {two_versions}: give "
        f"the snapshot (snap inspect {two_versions} --versions lists the versions it keeps; in "
        f"Python, snap.open('{two_versions}', version=1) reads version 1)"
    )
    for command in ("inspect", "head", "verify"):
        result = cli([command, str(copy)])
        assert result.exit_code == 1 and result.output.strip() == f"snap: error: {said}"
    with pytest.raises(ManifestError) as refused:
        snap.open(str(copy))
    assert str(refused.value) == said
    assert snap.open(str(two_versions), version=1).num_records == 3
