"""A lease file holds whatever a dying writer, a racing read (HDFS shows files while they are
written) or a hand edit left in it: any JSON at all is judged dead or alive and described
without an error, and never as ``None:None``."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from snapshot_cli import storage
from snapshot_cli.writers import lease

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=5,
)
holders = st.dictionaries(
    st.sampled_from(["host", "pid", "pidns", "id", "ttl", "heartbeat", "run", "released"]),
    json_values,
)


@settings(max_examples=300, deadline=None)
@given(holder=holders)
def test_any_holder_is_judged_and_described(holder: dict[str, object]) -> None:
    info = lease.LeaseInfo(3, holder)
    assert isinstance(lease.is_alive(info), bool)
    text = info.describe()
    assert "None:None" not in text and text
    # as if this process wrote it (it holds no such lease: dead, whatever its id's type)
    mine = {"host": socket.gethostname(), "pid": os.getpid(), "pidns": lease.PID_NAMESPACE}
    here = lease.LeaseInfo(3, {**holder, **mine})
    assert lease.is_alive(here) is False


@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
@given(content=st.binary(max_size=40) | json_values.map(lambda v: json.dumps(v).encode()))
def test_any_lease_file_is_read_and_a_new_writer_is_not_stuck(
    tmp_path_factory: object, content: bytes
) -> None:
    root = str(Path(tmp_path_factory.mktemp("lease")))  # type: ignore[attr-defined]
    fs, root = storage.resolve(root)
    storage.makedirs(fs, f"{root}/_runs")
    (Path(root) / "_runs" / "lease-00000004.json").write_bytes(content)
    found = lease.current(fs, root)
    assert found is not None and found.epoch == 4
    got = lease.try_acquire(fs, root)
    if isinstance(got, lease.Lease):  # the file's writer is dead: taken over, next epoch
        assert got.epoch == 5
        got.release()
    else:  # it names a live writer: that needs a host, a pid that lives, a fresh heartbeat
        assert lease.is_alive(got)
