"""How a lease's holder is named in the messages of a writer waiting for it, gc and inspect."""

from __future__ import annotations

import time
from pathlib import Path

import fsspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from snapshot_cli.errors import LeaseError, StorageError
from snapshot_cli.writers import lease as lease_mod
from snapshot_cli.writers.lease_files import LeaseInfo


def holder(**fields: object) -> dict[str, object]:
    return {"host": "vm", "pid": 7, "heartbeat": time.time(), **fields}


def test_a_holder_with_no_run_yet_is_said_so() -> None:
    """A create holds the lease before its run starts (while it plans) and gc holds one with
    none: "(run -, heartbeat 0s ago)" was a new user's puzzle."""
    said = LeaseInfo(3, holder(run=None)).describe()
    assert said.startswith("vm:7 (no run started, heartbeat ") and "run -" not in said
    said = LeaseInfo(3, holder(run="6e206f9952")).describe()
    assert said.startswith("vm:7 (run 6e206f9952, heartbeat ")
    said = LeaseInfo(3, holder(run="", released=True)).describe()
    assert said == "vm:7 (no run started, released)"


FIELDS = st.sampled_from(["host", "pid", "run", "heartbeat", "released"])
JSON_VALUES = st.none() | st.booleans() | st.integers() | st.floats() | st.text()


@given(st.dictionaries(FIELDS, JSON_VALUES))
def test_any_holder_is_described_in_one_line(fields: dict[str, object]) -> None:
    """A hand-edited or damaged lease file (any field of any JSON type, or missing) is still
    described, in one line, never "None" for a missing run."""
    said = LeaseInfo(0, fields).describe()
    assert said and "\n" not in said and "run None" not in said


def test_a_heartbeat_failing_past_its_ttl_says_the_error_and_that_a_rerun_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It said "heartbeat failed for longer than the ttl: StorageError(\\"storage kept failing
    ...\\")", the error's repr, and not that the same command resumes the run."""
    held = lease_mod.try_acquire(fsspec.filesystem("file"), str(tmp_path), ttl=60.0)
    assert isinstance(held, lease_mod.Lease)
    try:
        down = StorageError("storage kept failing while listing gs://b/s/_runs (tried 6 times)")

        def unreachable(*args: object) -> None:
            raise down

        monkeypatch.setattr(lease_mod, "current", unreachable)  # (the storage stops answering)
        held.holder["heartbeat"] = time.time() - 61  # (for longer than the ttl)
        assert held.beat() is False
        with pytest.raises(LeaseError) as lost:
            held.stop_if_lost()
        assert str(lost.value) == (
            f"this writer lost the lease of {tmp_path}: its heartbeat failed for longer than the "
            "lease's ttl (60 s): storage kept failing while listing gs://b/s/_runs (tried 6 "
            "times); once the storage answers, the same command resumes the run; nothing was "
            "committed by it"
        )
    finally:
        held.release()
