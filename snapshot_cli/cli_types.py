"""The command line's own value types: a wrong value is a usage error (exit 2), said by click
before anything is opened."""

from __future__ import annotations

import os
from typing import Any

import click

from .units import parse_duration, parse_size


class AutoOrCount(click.ParamType):
    """``auto`` or an integer >= 1; anything else is a usage error (exit 2)."""

    name = "auto|N"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
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


class Columns(click.ParamType):
    """Comma-separated column names (``image,label``) as a list; text that names none (``''``,
    ``,``) is a usage error, where it read every column."""

    name = "a,b,..."

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, list):
            return value
        names = [c.strip() for c in str(value).split(",") if c.strip()]
        if not names:
            self.fail(f"{value!r} names no column (comma-separated names: image,label)", param, ctx)
        return names


class ShellGlobs(click.Command):
    """``snap create``: extra arguments that are files are an ``--input`` pattern the shell
    expanded (``--input data/*.bin`` unquoted gives ``--input`` the first file and leaves the
    rest over); the usage error says so, and to quote the pattern."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.allow_extra_args = True  # (checked here instead, to tell this case)
        rest = super().parse_args(ctx, args)
        extra = ctx.args
        if not extra or ctx.resilient_parsing:
            return rest
        shown = " ".join(extra[:3]) + (f" ... ({len(extra)} in all)" if len(extra) > 3 else "")
        given = ctx.params.get("inputs") or ()
        if given and any(os.path.lexists(a) for a in extra):
            ctx.fail(
                f"Got unexpected extra arguments ({shown}): your shell expanded an unquoted "
                f"--input pattern into files, and --input took only the first ({given[-1]}); "
                "quote the pattern so that snap expands it: --input 'data/*.bin'"
            )
        ctx.fail(f"Got unexpected extra argument{'s' * (len(extra) > 1)} ({shown})")


AUTO_OR_COUNT, SIZE, DURATION, COLUMNS = AutoOrCount(), Size(), Duration(), Columns()
