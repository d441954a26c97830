"""The loader's advice, said by a command, names that command's flags or nothing.

``snap bench`` and ``snap head`` under a thread or open-files limit said "read with fewer
threads (a smaller num_parallel_reads, no processes=)" and "a loader holds its own until it
is closed (close(), with)": the Python API's words (a probe). Every message the loader's
limits make (snapshot_cli.shortages, made here as the loader makes them), for every command.
"""

from __future__ import annotations

import errno
import re

import pyarrow as pa
import pytest

from snapshot_cli import shortages
from snapshot_cli.cli import cli
from snapshot_cli.cli_words import in_command_words
from snapshot_cli.readers import memory

API_WORDS = re.compile(
    r"num_parallel_reads|shuffle_buffer|processes=|shuffle=False|close\(\)|columns=|batch_size"
)
# the flags each command has for what the advice lowers
FLAGS = {
    "bench": {
        "--num-parallel-reads",
        "--processes",
        "--shuffle-buffer",
        "--no-shuffle",
        "--batch-size",
        "--columns",
    },
    "verify": {"--threads"},
}


def _messages() -> list[str]:
    """Each message of a limit the loader meets, with all of its advice."""
    no_thread = pa.ArrowException("Unknown error: Failed to launch worker thread")
    oom = MemoryError("Unable to allocate 3.00 MiB")
    shortages.OpenShards.count = 30  # (what the message says of the loaders' own)
    try:
        return [
            str(shortages.out_of_memory("shard s/shards/a.arrow", no_thread)),
            str(shortages.out_of_memory("shard s/shards/a.arrow", oom)),
            str(
                shortages.thread_limit(
                    "the loader", RuntimeError("can't start new thread"), fewer=shortages.READ_FEWER
                )
            ),  # fmt: skip
            str(shortages.too_many_open_files("shard s/shards/a.arrow", errno.EMFILE, True)),
            str(shortages.too_many_open_files("shard s/shards/a.arrow", errno.EMFILE, False)),
            str(memory.failed(oom, "a loader window of 1 records of 33,554,432 bytes", 1 << 25,
                              shortages.WINDOW_FIX)),  # (snap bench said columns=[...], a probe)
        ]  # fmt: skip
    finally:
        shortages.OpenShards.count = 0


def test_every_message_names_the_loaders_keywords_in_python() -> None:
    """The words replaced are the loader's own: a message reworded without them here would
    leave a command saying the old ones."""
    said = " ".join(_messages())
    for phrase in (shortages.READ_FEWER, shortages.READ_LESS, shortages.UNSHUFFLED,
                   shortages.LOADERS_HELD, shortages.WINDOW_FIX):  # fmt: skip
        assert phrase in said
    assert in_command_words(said, None) == said  # (no command: the Python API's words)


@pytest.mark.parametrize("command", sorted(cli.commands))
def test_a_command_says_the_advice_in_its_flags_or_not_at_all(command: str) -> None:
    for message in _messages():
        said = in_command_words(message, command)
        assert not API_WORDS.search(said), (command, said)
        assert said.count("(") == said.count(")"), said  # (no parenthesis cut in half)
        assert not re.search(r"\(\s*\)|, or [;.,]|, or$|: \.", said), said  # nothing left hanging
        flags = set(re.findall(r"--[a-z-]+", said)) - {"--inputs-per-task"}
        assert flags <= FLAGS.get(command, set()), (command, said)
        if "ulimit" in message:  # the limit itself is always said, and how to raise it
            assert "ulimit" in said, said
