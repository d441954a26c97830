"""The ``snap`` command line. The only place that maps errors to exit codes.

Exit codes: 0 ok, 1 a snap error (message on stderr, no traceback unless ``--debug``),
2 usage error (click), 130 interrupted.
"""

from __future__ import annotations

import functools
import json
import logging
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from . import __version__, storage
from .errors import ManifestError, SnapError
from .progress import human_bytes, human_count
from .readers.snapshot import open as open_snapshot
from .schema import describe, format_type
from .writers import commit as commit_mod
from .writers import lease as lease_mod
from .writers.create import create as create_snapshot
from .writers.pipeline import parse_params

F = TypeVar("F", bound=Callable[..., Any])


def _handle_errors(fn: F) -> F:
    """Run a command; SnapError → message on stderr and exit 1 (traceback with --debug)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        debug = bool((click.get_current_context().obj or {}).get("debug"))
        try:
            return fn(*args, **kwargs)
        except SnapError as err:
            if debug:
                raise
            click.echo(f"snap: error: {err}", err=True)
            sys.exit(err.exit_code)
        except KeyboardInterrupt:
            if debug:
                raise
            click.echo("snap: interrupted; run the same command again to resume", err=True)
            sys.exit(130)

    return wrapper  # type: ignore[return-value]


def _setup_logging(quiet: bool) -> None:
    logger = logging.getLogger("snapshot_cli")
    logger.handlers.clear()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("snap: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING if quiet else logging.INFO)
    logger.propagate = False


def _emit_json(doc: Any) -> None:
    click.echo(json.dumps(doc, indent=2, sort_keys=False))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="snap")
@click.option("--debug", is_flag=True, help="Show full tracebacks on errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """snap: materialise a preprocessing function once as an Arrow snapshot; replay it fast."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


@cli.command()
@click.argument("pipeline")
@click.argument("output")
@click.option(
    "--input",
    "inputs",
    multiple=True,
    metavar="GLOB_OR_URL",
    help="Input files (globs expanded, sorted); each is one call of the function.",
)
@click.option(
    "--inputs-from",
    metavar="MODULE:FUNC",
    help="A function returning the list of inputs (JSON values), for non-file sources.",
)
@click.option(
    "--param",
    "params",
    multiple=True,
    metavar="KEY=VALUE",
    help="Keyword argument for the function; VALUE is parsed as JSON, else a string.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=0),
    default=None,
    help="Worker processes (default: CPU count; 0: run in this process).",
)
@click.option("--executor", type=click.Choice(["local"]), default="local", show_default=True)
@click.option(
    "--shard-size",
    default="256MiB",
    show_default=True,
    help="Close a shard once it holds this many bytes on disk.",
)
@click.option(
    "--compression", type=click.Choice(["zstd", "lz4", "none"]), default="zstd", show_default=True
)
@click.option("--level", type=int, default=None, help="zstd level (default 1).")
@click.option(
    "--inputs-per-task",
    type=click.IntRange(min=1),
    default=None,
    help="Inputs grouped into one task (default: chosen from the input count).",
)
@click.option(
    "--batch-rows",
    type=click.IntRange(min=1),
    default=None,
    help="Most records per Arrow record batch (default 1024; the unit of shuffle).",
)
@click.option(
    "--overwrite", is_flag=True, help="Replace a snapshot made from other code/params/inputs."
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary on stdout only.")
@click.option("--quiet", is_flag=True, help="No progress or messages on stderr.")
@_handle_errors
def create(
    pipeline: str,
    output: str,
    inputs: tuple[str, ...],
    inputs_from: str | None,
    params: tuple[str, ...],
    workers: int | None,
    executor: str,
    shard_size: str,
    compression: str,
    level: int | None,
    inputs_per_task: int | None,
    batch_rows: int | None,
    overwrite: bool,
    as_json: bool,
    quiet: bool,
) -> None:
    """Run PIPELINE (file.py:function or package.module:function) and snapshot it to OUTPUT.

    Re-running the same command reuses a finished snapshot and resumes an interrupted one.
    """  # noqa: D301
    _setup_logging(quiet)
    info = create_snapshot(
        pipeline,
        output,
        inputs=list(inputs) or None,
        inputs_from=inputs_from,
        params=parse_params(params),
        workers=workers,
        executor=executor,
        shard_size=shard_size,
        compression=compression,
        level=level,
        overwrite=overwrite,
        progress=not (quiet or as_json),
        inputs_per_task=inputs_per_task,
        batch_rows=batch_rows,
    )
    if as_json:
        _emit_json(info.to_json())
        return
    ratio = info.uncompressed_bytes / info.bytes if info.bytes else 0.0
    verb = "up to date" if info.reused else "created"
    resumed = f", {info.tasks_resumed} of {info.tasks} tasks resumed" if info.tasks_resumed else ""
    click.echo(
        f"{verb}: {info.path}: {human_count(info.num_records)} records in {info.num_shards} "
        f"shards, {human_bytes(info.bytes)} on disk ({human_bytes(info.uncompressed_bytes)} "
        f"uncompressed, {ratio:.2f}x), {info.seconds:.1f} s{resumed}"
    )


def _unfinished(url: str) -> dict[str, Any] | None:
    """State of an unfinished snapshot (no manifest, but writer state), or None."""
    fs, root = storage.resolve(url)
    runs = commit_mod.find_runs(fs, root)
    if not runs:
        return None
    holder = lease_mod.current(fs, root)
    state = []
    for info in runs:
        done = commit_mod.finished_tasks(fs, root, info["run"])
        state.append({"run": info["run"], "tasks_done": len(done), "tasks": len(info["plan"])})
    return {
        "path": storage.to_url(fs, root),
        "finished": False,
        "runs": state,
        "writer": None
        if holder is None
        else {
            "alive": lease_mod.is_alive(holder),
            "holder": holder.describe(),
        },
    }


@cli.command()
@click.argument("snapshot")
@click.option("--shards", "show_shards", is_flag=True, help="List every shard.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
@_handle_errors
def inspect(snapshot: str, show_shards: bool, as_json: bool) -> None:
    """Summarise SNAPSHOT from its manifest (no shard is read)."""
    try:
        snap = open_snapshot(snapshot)
    except ManifestError:
        state = _unfinished(snapshot)
        if state is None:
            raise
        if as_json:
            _emit_json(state)
        else:
            click.echo(f"{state['path']}: unfinished snapshot (no manifest.json yet)")
            for r in state["runs"]:
                click.echo(f"  run {r['run']}: {r['tasks_done']}/{r['tasks']} tasks done")
            if state["writer"]:
                alive = "writing" if state["writer"]["alive"] else "not running"
                click.echo(f"  writer: {state['writer']['holder']}, {alive}")
            click.echo("  run the same snap create again to resume it")
        return
    m = snap.manifest
    doc = {
        "path": snap.url,
        "finished": True,
        "fingerprint": m.fingerprint,
        "num_records": m.num_records,
        "num_shards": m.num_shards,
        "num_record_batches": m.num_record_batches,
        "bytes": m.bytes,
        "uncompressed_bytes": m.uncompressed_bytes,
        "compression": m.compression,
        "schema": describe(m.schema),
        "pipeline": m.pipeline,
        "created": m.created,
        "created_by": m.created_by,
    }
    if show_shards:
        doc["shards"] = [s.to_json() for s in m.shards]
    if as_json:
        _emit_json(doc)
        return
    ratio = m.uncompressed_bytes / m.bytes if m.bytes else 0.0
    level = m.compression.get("level")
    rows = [
        ("snapshot", snap.url),
        ("fingerprint", m.fingerprint[:16]),
        ("pipeline", f"{m.pipeline.get('spec') or m.pipeline.get('function')}"),
        ("params", json.dumps(m.pipeline.get("params", {}))),
        ("inputs", str(m.pipeline.get("inputs", {}).get("count", 0))),
        ("records", f"{human_count(m.num_records)} ({m.num_records})"),
        ("shards", f"{m.num_shards} ({m.num_record_batches} record batches)"),
        (
            "on disk",
            f"{human_bytes(m.bytes)} "
            f"({human_bytes(m.uncompressed_bytes)} uncompressed, {ratio:.2f}x)",
        ),
        ("compression", m.compression["codec"] + (f" level {level}" if level else "")),
        ("created", f"{m.created} by snap {m.created_by.get('snap')}"),
    ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        click.echo(f"{key:<{width}}  {value}")
    click.echo("columns:")
    name_w = max((len(f.name) for f in m.schema), default=0)
    for field in m.schema:
        click.echo(f"  {field.name:<{name_w}}  {format_type(field.type)}")
    if show_shards:
        click.echo("shards:")
        for s in m.shards:
            click.echo(
                f"  {s.path}  {s.records:>9} records  {human_bytes(s.bytes):>10}  crc32c {s.crc32c}"
            )


def main() -> None:
    cli(prog_name="snap")
