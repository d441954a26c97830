"""Each command's ``--json`` top-level keys are those CHANGELOG's "`--json` output" contract
lists, and README's lists say the same: read from the two files themselves, so none can
drift from the others (README's key list for ``snap bench`` had lost four keys the output
and the contract had)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import REPO

from .conftest import run_json


def documented() -> dict[str, tuple[set[str], set[str]]]:
    """Command → (keys always there, keys with an option: "with `--x` also `key`")."""
    text = (REPO / "CHANGELOG.md").read_text()
    section = text.split("### `--json` output", 1)[1].split("\n### ", 1)[0]
    out = {}
    for bullet in re.split(r"\n- ", section)[1:]:
        m = re.match(r"`snap (\w+) --json`", bullet)
        assert m, bullet[:60]
        body = bullet[m.end() :].split("With `--versions`", 1)[0]  # (inspect: committed)
        out[m.group(1)] = _keys(body)
    return out


def _keys(body: str) -> tuple[set[str], set[str]]:
    conditional = r"with `--[\w-]+` also `(\w+)`|`(\w+)` with `--[\w-]+`"
    optional = {a or b for a, b in re.findall(conditional, body)}
    body = re.sub(conditional, "", body)
    while re.search(r"\([^()]*\)", body):  # (what a key holds: not a top-level key)
        body = re.sub(r"\([^()]*\)", "", body)
    return set(re.findall(r"`([a-z_]+)`", body)) - optional, optional


def test_readme_lists_the_keys_the_contract_lists() -> None:
    """README's "`--json` keys:" sentences of inspect, verify, bench and gc, in that order."""
    text = (REPO / "README.md").read_text()
    parts = text.split("`--json` keys: ")[1:]
    assert len(parts) == 4
    docs = documented()
    for command, part in zip(("inspect", "verify", "bench", "gc"), parts, strict=True):
        depth, end = 0, len(part)
        for i, ch in enumerate(part):  # the sentence: up to a full stop outside brackets
            depth += (ch == "(") - (ch == ")")
            if depth == 0 and part.startswith((". ", ".\n"), i):
                end = i
                break
        body = part[:end].split("For an unfinished snapshot", 1)[0]
        assert _keys(body) == docs[command], (command, _keys(body), docs[command])


def test_every_command_prints_the_keys_its_contract_lists(tmp_path: Path) -> None:
    (tmp_path / "pipe.py").write_text("def make(i):\n    yield {'x': i, 'y': [1.0, 2.0]}\n")
    (tmp_path / "in").mkdir()
    for i in range(3):
        (tmp_path / "in" / f"{i}.txt").write_text(str(i))
    out = str(tmp_path / "s")
    docs = documented()
    assert set(docs) == {"create", "inspect", "verify", "head", "bench", "gc"}
    spec = f"{tmp_path}/pipe.py:make"
    got = {
        "create": run_json("create", spec, out, "--input", f"{tmp_path}/in/*", "--workers", "0"),
        "inspect": run_json("inspect", out),
        "verify": run_json("verify", out, "--quiet"),
        "head": run_json("head", out, "-n", "2"),
        "bench": run_json("bench", out, "--epochs", "1", "--batch-size", "2"),
        "gc": run_json("gc", out),
    }
    for command, doc in got.items():
        always, optional = docs[command]
        assert set(doc) - optional == always, (command, set(doc) ^ always)
    trace = str(tmp_path / "t.json")
    doc = run_json("bench", out, "--epochs", "1", "--trace", trace)
    assert set(doc) == docs["bench"][0] | docs["bench"][1]
    doc = run_json("inspect", out, "--shards")
    assert set(doc) == docs["inspect"][0] | docs["inspect"][1]
