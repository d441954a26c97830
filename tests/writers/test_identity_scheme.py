"""A snapshot made by a newer snap, whose pipeline identity (code hash) is computed by a scheme
this snap does not know: a snap of 2026-11-28 said "made with different pipeline code ...
pass --overwrite" of a snapshot the current snap had made from byte-identical code (the
function's name counts since 2026-11-30), and both recorded ``created_by.snap`` 0.1.0. Every
create records ``created_by.identity_scheme`` now; a create that finds another code hash of a
newer scheme says the snapshot was made by a newer snap, to upgrade snap, and --overwrite only
to replace it. A snapshot without the key (an older snap's) or of this scheme or an older one
is compared as before."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import snapshot_cli as snap
from snapshot_cli.cli import cli
from snapshot_cli.fingerprint import canonical_json, sha256_text
from snapshot_cli.writers.pipeline import IDENTITY_SCHEME

PIPELINE = "import os\n\ndef f(path):\n    return [{'n': os.path.getsize(path)}]\n"
OTHER_CODE = "c" * 64


@pytest.fixture
def made(tmp_path: Path) -> Path:
    """A snapshot of ``pipe.py:f`` over three inputs, made by this snap."""
    (tmp_path / "pipe.py").write_text(PIPELINE)
    (tmp_path / "raw").mkdir()
    for i in range(3):
        (tmp_path / "raw" / f"{i}.bin").write_bytes(b"x" * i)
    code, out = create(tmp_path)
    assert code == 0, out
    return tmp_path / "out"


def create(tmp_path: Path, *more: str) -> tuple[int, str]:
    args = ["create", f"{tmp_path}/pipe.py:f", str(tmp_path / "out"), "--input",
            f"{tmp_path}/raw/*.bin", "--workers", "0", "--quiet", *more]  # fmt: skip
    result = CliRunner().invoke(cli, args)
    return result.exit_code, result.stdout + result.stderr


def rewrite(out: Path, scheme: int | None, code: str | None = None) -> bytes:
    """The committed manifest (and its kept copy) as a snap of identity ``scheme`` (None: a
    snap that records none) would have written it, with the code hash ``code``."""
    path = out / "manifest.json"
    doc = json.loads(path.read_text())
    doc["created_by"].pop("identity_scheme", None)
    if scheme is not None:
        doc["created_by"]["identity_scheme"] = scheme
    if code is not None:
        doc["fingerprint_parts"]["code"] = code
        doc["fingerprint"] = sha256_text(canonical_json(doc["fingerprint_parts"]))
    data = json.dumps(doc).encode()
    path.write_bytes(data)
    (out / "_versions" / f"v{doc['history']['version']:08d}.json").write_bytes(data)
    return data


def test_a_create_records_its_identity_scheme(made: Path) -> None:
    doc = json.loads((made / "manifest.json").read_text())
    assert doc["created_by"]["identity_scheme"] == IDENTITY_SCHEME
    assert snap.open(str(made)).manifest.created_by["identity_scheme"] == IDENTITY_SCHEME


@pytest.mark.parametrize("grown", [False, True], ids=["same inputs", "an input added"])
def test_other_code_of_a_newer_scheme_is_a_newer_snaps(made: Path, grown: bool) -> None:
    before = rewrite(made, IDENTITY_SCHEME + 1, OTHER_CODE)
    if grown:
        (made.parent / "raw" / "3.bin").write_bytes(b"new")
    code, out = create(made.parent)
    assert code == 1, out
    assert f"snap: error: {made} holds a snapshot made by a newer snap" in out, out
    assert f"scheme {IDENTITY_SCHEME + 1}; this snap computes scheme {IDENTITY_SCHEME}" in out
    assert "upgrade snap to grow or update it" in out, out
    assert "pass --overwrite only if you mean to replace it" in out, out
    assert "different pipeline code" not in out and "Traceback" not in out, out
    assert (made / "manifest.json").read_bytes() == before  # (nothing changed)
    assert sorted(p.name for p in (made / "_runs").iterdir()) == ["lease-00000000.json"]


def test_overwrite_replaces_a_newer_snaps_snapshot(made: Path) -> None:
    rewrite(made, IDENTITY_SCHEME + 1, OTHER_CODE)
    code, out = create(made.parent, "--overwrite")
    assert code == 0, out
    doc = json.loads((made / "manifest.json").read_text())
    assert doc["created_by"]["identity_scheme"] == IDENTITY_SCHEME
    assert doc["history"]["version"] == 2


def test_the_same_code_hash_of_a_newer_scheme_is_up_to_date(made: Path) -> None:
    before = rewrite(made, IDENTITY_SCHEME + 1)
    code, out = create(made.parent, "--json")
    assert code == 0 and json.loads(out)["reused"] is True, out
    assert (made / "manifest.json").read_bytes() == before


@pytest.mark.parametrize(
    "scheme", [None, 1, IDENTITY_SCHEME, "9", 9.5], ids=lambda s: f"scheme={s!r}"
)
def test_other_code_of_this_or_an_older_scheme_is_other_code(made: Path, scheme: Any) -> None:
    """None: an older snap's snapshot, whose behaviour must not change; "9", 9.5: not a
    scheme number (another writer's key), compared as before."""
    rewrite(made, None, OTHER_CODE)
    if scheme is not None:
        doc = json.loads((made / "manifest.json").read_text())
        doc["created_by"]["identity_scheme"] = scheme
        rewrite(made, None)  # (the kept copy too)
        (made / "manifest.json").write_text(json.dumps(doc))
    code, out = create(made.parent)
    assert code == 1, out
    assert "holds a snapshot made with different pipeline code" in out, out
    assert "--overwrite" in out and "newer snap" not in out, out


def records(n: int) -> Callable[[], Any]:
    def preprocess() -> Any:
        yield {"n": n}

    return preprocess


def test_python_api_and_a_function_sent_by_value(tmp_path: Path) -> None:
    out = tmp_path / "s"
    snap.create(records(1), str(out), workers=0)
    rewrite(out, IDENTITY_SCHEME + 1, OTHER_CODE)
    with pytest.raises(snap.SnapshotExistsError) as err:
        snap.create(records(1), str(out), workers=0)
    said = str(err.value)
    assert said.startswith(f"{out} holds a snapshot made by a newer snap"), said
    assert "pass overwrite=True only if you mean to replace it" in said, said
    info = snap.create(records(1), str(out), workers=0, overwrite=True)
    assert info.num_records == 1 and not info.reused
