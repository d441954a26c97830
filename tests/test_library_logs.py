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


CLI_LIKE = """
import logging, sys
import snapshot_cli
from snapshot_cli.cli_logs import route_library_logs
route_library_logs(debug={debug})
{configure}
for _ in range(3):  # (gcsfs says so of each request)
    try:
        raise ConnectionError("no route\\nto host")
    except ConnectionError:
        logging.getLogger("gcsfs").exception("_request out of retries on exception")
logging.getLogger("gcsfs").warning("another")
try:
    raise ConnectionError("no route\\nto host")
except ConnectionError:
    logging.getLogger("mine").exception("my own")
logging.getLogger("gcsfs").info("not shown: below WARNING")
"""


@pytest.mark.parametrize("debug", [False, True])
def test_in_a_command_a_library_record_is_one_line_unless_debug(debug: bool) -> None:
    """gcsfs logs an error with its traceback as it gives up on a request, before snap says
    what failed: in a command, without --debug, that is one line on stderr. A record of the
    pipeline's own logger is Python's: its message and its traceback."""
    script = CLI_LIKE.format(debug=debug, configure="")
    res = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                         text=True, timeout=60, check=True)  # fmt: skip
    said, mine = res.stderr.split("my own\n")
    if debug:  # (each, whole)
        assert said.startswith("snap: gcsfs: _request out of retries on exception\n")
        assert said.count("Traceback (most recent call last)") == 3 and "no route" in said
    else:  # (once)
        assert said == "snap: gcsfs: _request out of retries on exception\nsnap: gcsfs: another\n"
    assert mine.startswith("Traceback (most recent call last)") and "no route" in mine


def test_in_a_command_the_pipeline_s_basic_config_takes_effect() -> None:
    """A pipeline that calls ``logging.basicConfig`` gets its format and level, the storage
    libraries' records too, whole: a root handler of snap's made that call a no-op."""
    configure = (
        "logging.basicConfig(level=logging.INFO, format='%(levelname)s %(name)s %(message)s')"
    )
    script = CLI_LIKE.format(debug=False, configure=configure)
    res = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                         text=True, timeout=60, check=True)  # fmt: skip
    lines = res.stderr.splitlines()
    assert lines[0] == "ERROR gcsfs _request out of retries on exception"
    assert "ERROR mine my own" in lines and "INFO gcsfs not shown: below WARNING" in lines
    assert "snap: " not in res.stderr
