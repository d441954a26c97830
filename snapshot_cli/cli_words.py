"""An error a command met, in that command's words.

What the loader advises names its Python keywords (``num_parallel_reads``, ``shuffle=False``,
``close()``): it is said in the threads that read, where no ``snap`` command is known
(:func:`.console.named` asks the thread's context). A command says it once more with its
own flags: ``snap bench`` has one for each, ``snap verify`` its ``--threads``, and where a
command has none for what the advice would lower (``snap head``, ``snap inspect``), that
part is left out rather than name what cannot be given. Pure text: no click here.
"""

from __future__ import annotations

from .shortages import LOADERS_HELD, READ_FEWER, READ_LESS, UNSHUFFLED, WINDOW_FIX

# the loader's advice, by command: (as the loader says it, as the command says it; "": left out)
_BENCH = [
    (READ_FEWER, "read with fewer threads (a smaller --num-parallel-reads, no --processes)"),
    (READ_LESS, "read less at once (a smaller --shuffle-buffer, fewer --num-parallel-reads)"),
    (UNSHUFFLED, UNSHUFFLED.replace("shuffle=False", "--no-shuffle").replace(
        "shuffle_buffer", "--shuffle-buffer")),
    (LOADERS_HELD, ""),  # (the command closes its own loader: nothing else holds any)
    (WINDOW_FIX, "a window holds the larger of --batch-size and --shuffle-buffer in records "
     "(at most an epoch's): lower them, read fewer columns (--columns), or free memory"),
]  # fmt: skip
_WINDOW_NONE = (WINDOW_FIX, "free memory")  # (a command with no flag for a window's size)
_NOT_SHUFFLED = [(f"; an unshuffled pass {UNSHUFFLED}", ""), (LOADERS_HELD, "")]  # (in order)
_VERIFY = [
    (READ_FEWER, "check fewer shards at once (--threads)"),
    (READ_LESS, "check fewer shards at once (--threads)"),
    *_NOT_SHUFFLED,
    _WINDOW_NONE,
]
_NONE = [(f", or {READ_FEWER}", ""), (f", or {READ_LESS}", ""), *_NOT_SHUFFLED, _WINDOW_NONE]
_WORDS = {"bench": _BENCH, "verify": _VERIFY}


def in_command_words(text: str, command: str | None) -> str:
    """``text`` (an error's message) with the loader's advice in the words of ``command``
    (click's name for it: ``bench``; None: no command, said as is)."""
    if command is None:
        return text
    for api, flags in _WORDS.get(command, _NONE):
        text = text.replace(api, flags)
    return text
