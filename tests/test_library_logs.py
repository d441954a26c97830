"""The storage libraries' own log records, in a program that configured no logging: one
line each on stderr, no traceback. gcsfs logs a traceback as it gives up on a request
("... out of retries"): a loader's epoch over gs:// in an outage printed 32 of them, ~800
lines, before snap's one StorageError (a storage probe). A program that configured logging
gets them as it asked."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO

GIVE_UP = """
import logging, sys
import snapshot_cli  # (snap's handlers come with its import)
{configure}
try:
    raise ConnectionError("Cannot connect to host 127.0.0.1:4443")
except ConnectionError:
    logging.getLogger("{name}.core").exception("%s out of retries on exception: %s", "_call",
                                               "Cannot connect\\nto host")
print("done", flush=True)
"""


@pytest.mark.parametrize("name", ["gcsfs", "s3fs", "fsspec"])
def test_a_library_giving_up_is_one_line_where_nothing_is_configured(name: str) -> None:
    script = GIVE_UP.format(configure="", name=name)
    res = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                         text=True, timeout=60, check=True)  # fmt: skip
    assert res.stdout == "done\n"
    said = f"snap: {name}.core: _call out of retries on exception: Cannot connect to host\n"
    assert res.stderr == said, res.stderr


def test_a_program_that_configured_logging_gets_the_records_whole() -> None:
    script = GIVE_UP.format(configure="logging.basicConfig()", name="gcsfs")
    res = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                         text=True, timeout=60, check=True)  # fmt: skip
    assert "ERROR:gcsfs.core:_call out of retries" in res.stderr
    assert "Traceback" in res.stderr and "snap: " not in res.stderr


def test_snaps_own_warning_reads_as_the_clis_where_nothing_is_configured() -> None:
    """A library user's create with ``workers=0`` printed ``snap: a record's columns are all
    lists ...`` while a worker process (and the CLI) printed ``snap: warning: ...`` (a
    probe): one form, which a script looking for warnings finds."""
    script = (
        "import logging, snapshot_cli\n"
        "logging.getLogger('snapshot_cli.x').warning('it is %s', 'so')\n"
        "logging.getLogger('snapshot_cli').warning('note: only so')\n"
        "logging.getLogger('snapshot_cli').info('not shown')\n"
    )
    res = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                         text=True, timeout=60, check=True)  # fmt: skip
    assert res.stderr == "snap: warning: it is so\nsnap: note: only so\n", res.stderr
