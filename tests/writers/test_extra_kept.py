"""A manifest's ``extra`` (a writer's own data, docs/format.md §3.8) across new versions: a
grow and a rerun of the same snapshot carry it forward, an overwrite does not."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import snapshot_cli as snap


def days(item: dict[str, int]) -> Iterator[dict[str, int]]:
    yield {"day": item["day"]}


def _set_extra(root: Path, extra: dict[str, Any]) -> None:
    """What another tool of the team does: extra in the manifest and in its version's copy."""
    m = json.loads((root / "manifest.json").read_text())
    m["extra"] = extra
    text = json.dumps(m, indent=1) + "\n"
    (root / "manifest.json").write_text(text)
    (root / "_versions" / f"v{m['history']['version']:08d}.json").write_text(text)


def _create(root: Path, items: list[dict[str, int]], **kw: Any) -> snap.Snapshot:
    snap.create(days, str(root), inputs=items, workers=0, progress=False, **kw)
    return snap.open(str(root))


ITEMS = [{"day": d} for d in range(3)]


def test_a_grow_keeps_extra(tmp_path: Path) -> None:
    root = tmp_path / "s"
    _create(root, ITEMS)
    _set_extra(root, {"owner": "team-a"})
    s = _create(root, [*ITEMS, {"day": 7}])
    assert s.version == 2 and s.manifest.extra == {"owner": "team-a"}
    kept = json.loads((root / "_versions" / "v00000002.json").read_text())
    assert kept["extra"] == {"owner": "team-a"}  # (the copy: the same bytes)
    assert (root / "_versions" / "v00000002.json").read_bytes() == (
        root / "manifest.json"
    ).read_bytes()


def test_a_rerun_that_computes_lost_shards_keeps_extra(tmp_path: Path) -> None:
    root = tmp_path / "s"
    s = _create(root, ITEMS)
    _set_extra(root, {"owner": "team-a", "n": [1, 2]})
    (root / s.shards[0].path).unlink()  # lost: the same create computes its task again
    s = _create(root, ITEMS)
    assert s.version == 2 and s.manifest.extra == {"owner": "team-a", "n": [1, 2]}


def test_an_overwrite_starts_without_extra(tmp_path: Path) -> None:
    root = tmp_path / "s"
    _create(root, ITEMS)
    _set_extra(root, {"owner": "team-a"})
    s = _create(root, ITEMS, overwrite=True)
    assert s.version == 2 and s.manifest.extra == {}
    assert "extra" not in json.loads((root / "manifest.json").read_text())
    assert snap.open(str(root), version=1).manifest.extra == {"owner": "team-a"}
