"""A create of a snapshot this user may not write is refused before it takes, or waits for,
the writer lease: it waited out another writer's whole run, then failed at the lease
(naming ``_runs/`` alone). As a user who is not root (:mod:`tests.unprivileged`), on its own
snapshot made read-only while a live writer holds it; another user's: test_run_of_another_user."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

from snapshot_cli.writers.lease import PID_NAMESPACE
from tests.unprivileged import unprivileged

CREATE = """
import sys
import snapshot_cli as snap

try:
    snap.create(lambda i: [{"x": i}], sys.argv[1], inputs=range(int(sys.argv[2])), workers=0,
                progress=False)
except snap.SnapError as err:
    sys.exit(f"snap: error: {err}")
"""


@contextlib.contextmanager
def live_process() -> Iterator[subprocess.Popen[bytes]]:
    """A process that lives until the test ends (its pid: a live writer's, to the lease),
    and is not the parent of the user's create (whose lease it would wait for forever)."""
    with subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                          stdin=subprocess.PIPE) as process:  # fmt: skip
        try:
            yield process
        finally:
            assert process.stdin is not None
            process.stdin.close()


def test_a_read_only_snapshot_a_live_writer_holds() -> None:
    with unprivileged() as user, live_process() as writer:
        s = user.home / "s"
        assert user.run(["-c", CREATE, str(s), "3"]).returncode == 0
        lease = s / "_runs" / "lease-00000001.json"  # a live writer's: its process lives
        holder = {"host": socket.gethostname(), "pid": writer.pid, "pidns": PID_NAMESPACE,
                  "id": "live", "ttl": 6, "heartbeat": time.time(), "run": None}  # fmt: skip
        lease.write_text(json.dumps(holder))
        user.own(lease)
        user.chmod(s, "-R a-w")
        try:
            done = user.run(["-c", CREATE, str(s), "4"])
        finally:
            user.chmod(s, "-R u+rwX")
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.strip() == (
            f"snap: error: cannot add to {s}: this user ({user.name}) may not write {s} (its "
            f"own, mode dr-xr-xr-x): restore its permission (chmod -R u+rwX {s})"
        )
        assert json.loads(lease.read_text()) == holder  # (not taken over)
