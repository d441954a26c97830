"""How a lease's holder is named in the messages of a writer waiting for it, gc and inspect."""

from __future__ import annotations

import time

from hypothesis import given
from hypothesis import strategies as st

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
