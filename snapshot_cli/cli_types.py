"""The command line's own value types: a wrong value is a usage error (exit 2), said by click
before anything is opened."""

from __future__ import annotations

import math
import os
import sys
from typing import Any, NoReturn

import click

from .arg_text import is_unicode, not_text
from .errors import SnapError
from .units import UNITS_SAID, parse_duration, parse_size
from .writers.input_names import directories_only


class AutoOrCount(click.ParamType):
    """``auto`` or an integer >= 1; anything else is a usage error (exit 2)."""

    name = "auto|N"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and value.lower() == "auto":  # (any case, as --compression)
            value = "auto"
        if value == "auto" or (isinstance(value, int) and not isinstance(value, bool)):
            number = value
        else:
            try:
                number = int(value)
            except (TypeError, ValueError):
                self.fail(f"must be 'auto' or an integer, got {value!r}", param, ctx)
        if number != "auto" and number < 1:
            self.fail(f"must be 'auto' or an integer >= 1, got {value!r}", param, ctx)
        return number


class Window(AutoOrCount):
    """``--shuffle-buffer``: ``auto``, a number of records, or a size with its unit
    (``64MiB``: as many records as fit); anything else is a usage error."""

    name = "auto|N|size"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and any(c.isalpha() for c in value) and value.lower() != "auto":
            try:
                parse_size(value)
            except ValueError:  # (its "or 4096" would be a count here)
                self.fail(
                    f"must be 'auto', a number of records (4096) or a size below 8EiB (256MiB, "
                    f"1GB; {UNITS_SAID}), got {value!r:.60}",
                    param,
                    ctx,
                )
            return value
        return super().convert(value, param, ctx)


class Size(click.ParamType):
    """A size in bytes: ``256MiB``, ``1.5GB``, ``4096``; anything else is a usage error."""

    name = "size"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return parse_size(value)
        except ValueError as err:
            self.fail(str(err).replace("size ", "", 1), param, ctx)


class Duration(click.ParamType):
    """A duration: ``7d``, ``12h``, ``30m``, ``90s``, ``0``; anything else is a usage error."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return parse_duration(value)
        except ValueError as err:
            self.fail(str(err).replace("duration ", "", 1), param, ctx)


class Milliseconds(click.FloatRange):
    """``--step-ms``: a number of milliseconds from 0 to a minute (more is a typo); ``nan``,
    which every comparison lets through (it was "unexpected ValueError ... a bug in snap"
    from the replay's sleep), is a usage error as any other value outside the range."""

    def __init__(self) -> None:
        super().__init__(min=0, max=60_000)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if math.isnan(number):
            self.fail(f"{value!r} is not a number of milliseconds (0 to 60000)", param, ctx)
        return number


class Processes(click.IntRange):
    """``snap bench --processes``: 0 (threads) up to the most decode processes a loader
    starts (:func:`~snapshot_cli.readers.options.most_processes`, known when it is given:
    the bound counts this process's cores); more is a usage error, not a wait while
    thousands of interpreters start."""

    def __init__(self) -> None:
        super().__init__(min=0)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from .readers.options import most_processes

        number = super().convert(value, param, ctx)
        if number > (most := most_processes()):
            self.fail(
                f"{number} is more decode processes than snap starts: at most {most} here "
                "(4 per core, at most 64; beyond the cores they add memory, not speed)",
                param,
                ctx,
            )
        return number


class Columns(click.ParamType):
    """Comma-separated column names (``image,label``) as a list; text that names none (``''``,
    ``,``), where it read every column, or one twice is a usage error."""

    name = "a,b,..."

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, list):
            return value
        if not is_unicode(str(value)):  # (no column name can be: a snapshot's are UTF-8)
            self.fail(not_text(repr(value), "column names"), param, ctx)
        names = ColumnList(c.strip() for c in str(value).split(",") if c.strip())
        if not names:
            said = "give comma-separated names, such as image,label"
            self.fail(f"{value!r} names no column ({said})", param, ctx)
        if twice := sorted({n for n in names if names.count(n) > 1}):  # (exit 2: the loader's 1)
            self.fail(
                f"{value!r} names {', '.join(twice)} more than once: name each once", param, ctx
            )
        names.text = str(value)
        return names


class Location(click.ParamType):
    """A snapshot's directory or URL; an empty one (``snap inspect ''``, an unset shell
    variable) is a usage error naming the argument, not storage's nameless "empty path"."""

    name = "path|URL"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not str(value).strip():
            self.fail(
                f"{value!r} is empty: give the snapshot's directory or URL "
                "(an unset shell variable in the command?)",
                param,
                ctx,
            )
        return value


class ColumnList(list[str]):
    """:class:`Columns`' names, and the text they were read from."""

    text = ""


def named(columns: list[str] | None, names: list[str]) -> list[str] | None:
    """``--columns`` against a snapshot's column ``names``: the text as given if a column
    has it for a name (``"a,b"``, ``" padded"``), else each part as given or stripped, as a
    column has it (the loader names the parts no column has)."""
    text = getattr(columns, "text", None)
    if columns is None or text is None:
        return columns
    if text in names:
        return [text]
    parts = [p for p in text.split(",") if p.strip()]
    return [p if p in names else p.strip() for p in parts]


class ShellGlobs(click.Command):
    """``snap create``: extra arguments that are files are an ``--input`` pattern the shell
    expanded (``--input data/*.bin`` unquoted gives ``--input`` the first file and leaves the
    rest over); the usage error says so, and to quote the pattern."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.allow_extra_args = True  # (checked here instead, to tell this case)
        given_args = list(args)  # (click's parser consumes the list)
        rest = super().parse_args(ctx, args)
        extra = ctx.args
        if not extra or ctx.resilient_parsing:
            return rest
        shown = " ".join(extra[:3]) + (f" ... ({len(extra)} in all)" if len(extra) > 3 else "")
        given = ctx.params.get("inputs") or ()
        if given and any(os.path.lexists(a) for a in extra):
            firsts = expanded_inputs(given_args, extra)
            named = f" ({', '.join(firsts)})" if firsts else ""
            each = " of each" if len(firsts) > 1 else ""
            ctx.fail(
                f"Got unexpected extra arguments ({shown}): your shell expanded an unquoted "
                f"--input pattern into files, and --input took only the first{each}{named}; "
                f"quote the pattern so that snap expands it: --input '{_pattern_of(firsts)}'"
            )
        ctx.fail(f"Got unexpected extra argument{'s' * (len(extra) > 1)} ({shown})")


def _pattern_of(firsts: list[str]) -> str:
    """A pattern like the one the shell expanded, from its first file: ``raw/*.txt``."""
    if not firsts:
        return "data/*.bin"
    directory, name = os.path.split(firsts[0])
    return os.path.join(directory, "*" + os.path.splitext(name)[1])


def expanded_inputs(args: list[str], extra: list[str]) -> list[str]:
    """The ``--input`` values in ``args`` that ``extra`` arguments (those no option or
    argument took) follow with no other option between: the first file of each pattern the
    shell expanded (the files after it may be taken as PIPELINE and OUTPUT first), not the
    last ``--input`` given (``--input a*.bin --input 'b*.bin'`` named ``b*.bin``). Pure."""
    found: list[str] = []
    left, value, i = list(extra), None, 0
    while i < len(args) and left:
        arg = args[i]
        if arg == "--":
            break
        if arg == "--input" and i + 1 < len(args):
            value, i = args[i + 1], i + 2
            continue
        if arg.startswith("--input="):
            value = arg.partition("=")[2]
        elif arg == left[0]:
            left.pop(0)
            if value is not None and value not in found:
                found.append(value)
        elif arg.startswith("-"):
            value = None  # (another option between: what follows is not that pattern's)
        i += 1
    return found


# Other tools' words for snap's commands (git, docker, gsutil, HF's datasets-cli, tf.data):
# an unknown command is told the one that does it, not a look-alike ('cat' is not 'create').
OTHER_NAMES = {
    **dict.fromkeys(("info", "show", "describe", "stat", "stats", "ls", "list", "status"),
                    "inspect"),
    **dict.fromkeys(("cat", "peek", "sample", "preview", "tail", "dump", "print"), "head"),
    **dict.fromkeys(("check", "validate", "fsck", "test", "checksum"), "verify"),
    **dict.fromkeys(("clean", "cleanup", "prune", "vacuum"), "gc"),
    **dict.fromkeys(("run", "build", "make", "materialize", "materialise", "write", "save",
                     "snapshot", "new", "init"), "create"),
    **dict.fromkeys(("benchmark", "perf", "speed", "replay"), "bench"),
}  # fmt: skip
# ... and those whose answer is not one command's summary
OTHER_ANSWERS = {
    **dict.fromkeys(("rm", "delete", "remove", "drop"), (
        "a snapshot is a directory: delete it with its storage's own tool (rm -r DIR, "
        "gsutil -m rm -r gs://bucket/dir, hdfs dfs -rm -r URL); snap gc removes only what "
        "no kept version of it uses"
    )),
    **dict.fromkeys(("update", "resume", "repair", "refresh", "append", "add"), (
        "run the same snap create again: it resumes an interrupted run, computes only the "
        "tasks of new, changed or lost inputs, and keeps the rest (--dry-run says which)"
    )),
}  # fmt: skip


class Commands(click.Group):
    """``snap``'s group: an unknown command that another tool uses for one of snap's says
    which (``snap info`` → ``snap inspect``); click's own look-alike guess otherwise. And
    ``--debug`` may come after the command too."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # --debug after the command (`snap inspect x --debug`, where errors say to add it)
        # is snap's own --debug, as before the command
        cut = args.index("--") if "--" in args else len(args)
        if "--debug" in args[1:cut]:
            args = ["--debug"] + [a for a in args[:cut] if a != "--debug"] + args[cut:]
        return super().parse_args(ctx, args)

    # A Ctrl-C while click reads snap's or the command's options (an option's type may read
    # the machine: PROCESSES' cores) was click's "Aborted!", exit 1: now as in a command's run
    # (cli_io.answer_errors, which answers the run's own).
    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)
        except KeyboardInterrupt as stop:
            _stopped(stop, debug="--debug" in sys.argv[1:])

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as stop:
            _stopped(stop, debug=bool((ctx.obj or {}).get("debug")))

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        known = self.get_command(ctx, name) is not None
        if not known and not ctx.resilient_parsing:
            if name.lower() in OTHER_ANSWERS:
                ctx.fail(f"No such command {name!r}; {OTHER_ANSWERS[name.lower()]}")
            command = self.get_command(ctx, OTHER_NAMES.get(name.lower(), ""))
            if command is not None:
                summary = command.get_short_help_str(80)
                ctx.fail(f"No such command {name!r}; snap {command.name} does that: {summary}")
        return super().resolve_command(ctx, args)


def _stopped(stop: KeyboardInterrupt, debug: bool) -> NoReturn:
    if debug:
        raise stop
    from .cli_io import stopped  # (it sets up click's output: not for every type here)

    stopped(stop)


AUTO_OR_COUNT, SIZE, DURATION, COLUMNS = AutoOrCount(), Size(), Duration(), Columns()
WINDOW, MILLISECONDS, PROCESSES = Window(), Milliseconds(), Processes()
LOCATION = Location()


def given_once(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> Any:
    """An option given at most once (click's ``multiple`` collects them to tell): a second
    silently replaced the first, as click keeps the last."""
    if len(values) > 1:
        said = ", ".join(repr(v) for v in values)
        raise click.BadParameter(
            f"given {len(values)} times ({said}): give it once (one function may return "
            "the inputs of both)",
            param=param,
        )
    return values[0] if values else None


def check_create_usage(
    pipeline: str,
    inputs: tuple[str, ...],
    inputs_from: str | None,
    executor: str,
    ray_address: str | None,
    output: str,
    program: Any,
    compression: str | None,
    level: int | None,
    workers: int | None = None,
) -> None:
    """Options of ``snap create`` that do not go together: a usage error (exit 2), as click's
    own are (the library's checks said them with exit 1, some by their Python names).
    ``program``: run as a command (not by click's CliRunner, in the caller's process)."""
    if level is not None and str(compression or "zstd").lower() != "zstd":
        raise click.UsageError(
            f"--level applies to --compression zstd only, not to {str(compression).lower()}: "
            "leave --level out (lz4 and none have no levels here), or use --compression zstd"
        )
    if program and output.startswith("memory://"):  # (it said "pass --workers 0", then lost it)
        raise click.BadParameter("memory:// is this process's memory: a snapshot a command "
                                 "writes there is gone when it exits; give a path or a bucket "
                                 "(memory:// is for Python: snap.create(..., workers=0))",
                                 param_hint="OUTPUT")  # fmt: skip
    if inputs and inputs_from:
        raise click.UsageError("use either --input or --inputs-from, not both")
    from .writers.importing import check_spec  # (a spec that names no function: usage too)

    for spec, what in ((pipeline, "PIPELINE"), (inputs_from, "--inputs-from")):
        try:
            if spec is not None:
                check_spec(spec, what)
        except SnapError as err:
            raise click.UsageError(str(err)) from None
    if "" in inputs:  # (an empty glob names nothing: as an empty OUTPUT is)
        raise click.UsageError("--input '' is an empty path: give a file, glob or URL")
    for said in filter(None, map(directories_only, inputs)):  # (the API's: an OptionError)
        raise click.UsageError(said)
    if workers == 0 and executor == "ray":  # (it was the library's OptionError: exit 1)
        from .writers.options import ray_not_in_process

        raise click.UsageError(ray_not_in_process())
    if ray_address is not None and executor != "ray":  # ('' too: it was exit 1, not 2)
        raise click.UsageError("--ray-address applies to --executor ray only")
    if ray_address is not None:  # (malformed: said before any work, exit 2)
        from .writers.options import address_problem

        if problem := address_problem(ray_address):
            raise click.UsageError(f"--ray-address {problem}")
