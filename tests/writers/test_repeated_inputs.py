"""An item given more than once is that many inputs (a list of items may repeat one, to
weigh it): the changes against the last version count copies, so a third copy of an item is
one input added, not none (found by a new-user probe: "0 inputs added" while a task ran)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli.cli import cli
from snapshot_cli.writers.incremental import input_changes


def one_record(x: Any) -> Any:
    yield {"x": x}


def _records(counts: dict[str, int], contents: dict[str, str]) -> list[tuple[Any, ...]]:
    return [(n, None, None, contents[n]) for n, c in counts.items() for _ in range(c)]


@settings(max_examples=300, deadline=None)
@given(
    before=st.dictionaries(st.sampled_from("abcdefgh"), st.integers(1, 4), max_size=8),
    edits=st.dictionaries(
        st.sampled_from("abcdefgh"), st.tuples(st.integers(0, 4), st.booleans()), max_size=8
    ),
    data=st.data(),
)
def test_changes_count_the_copies_added_removed_and_changed(
    before: dict[str, int], edits: dict[str, tuple[int, bool]], data: Any
) -> None:
    old = {n: f"old-{n}" for n in before}
    now = dict(before)
    new = dict(old)
    added = removed = changed = 0
    for name, (count, rewritten) in edits.items():
        had = before.get(name, 0)
        now[name] = count
        added += max(0, count - had)
        removed += max(0, had - count)
        if rewritten and had and count:
            new[name] = f"new-{name}"
            changed += min(had, count)
        new.setdefault(name, f"old-{name}")
    now = {n: c for n, c in now.items() if c}
    was_records = _records(before, old)
    now_records = _records(now, new)
    order = data.draw(st.permutations(range(len(now_records))))  # (order does not count)
    got = input_changes(was_records, [now_records[i] for i in order])
    assert got == {"inputs_added": added, "inputs_removed": removed, "inputs_changed": changed}
    # (how many inputs there are now follows from the counts)
    assert len(now_records) == len(was_records) + added - removed


def test_a_further_copy_of_an_item_is_one_input_added_and_fewer_are_removed(
    tmp_path: Path,
) -> None:
    out = str(tmp_path / "snap")
    first = snap.create(one_record, out, inputs=[1, 1, 2, 3], workers=0)
    assert first.num_records == 4
    more = snap.create(one_record, out, inputs=[1, 1, 1, 2, 3], workers=0)
    assert (more.inputs_added, more.inputs_removed, more.inputs_changed) == (1, 0, 0)
    assert more.num_records == 5 and sorted(r["x"] for r in snap.open(out).head(10)) == [
        1, 1, 1, 2, 3
    ]  # fmt: skip
    fewer = snap.create(one_record, out, inputs=[1, 2, 3], workers=0)
    assert (fewer.inputs_added, fewer.inputs_removed, fewer.inputs_changed) == (0, 2, 0)
    assert fewer.num_records == 3


def test_the_cli_says_the_copy_added(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pipe.py").write_text("def run(x):\n    yield {'x': x}\n")
    (tmp_path / "its.py").write_text("def items():\n    return [1, 1, 2, 3]\n")
    runner = CliRunner()
    args = ["create", "pipe.py:run", "out", "--inputs-from", "its.py:items"]
    assert runner.invoke(cli, args).exit_code == 0
    (tmp_path / "its.py").write_text("def items():\n    return [1, 1, 1, 2, 3]\n")
    result = runner.invoke(cli, [*args, "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "inputs 1 added, 0 removed, 0 changed" in result.output
