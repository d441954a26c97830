"""The ``snap`` command line: its commands and options; :mod:`.cli_io` answers errors.

Exit codes (README, "Exit codes"): 0 ok, 1 a snap error (message on stderr, no traceback
unless ``--debug``; an unexpected error too, named by its class), 2 usage error (click), 130
interrupted, 143 and 129 terminated (SIGTERM, SIGHUP), 141 when stdout's reader went away.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from . import __version__, cli_exit, cli_io, cli_types, render, render_bench
from .cli_io import answer_errors, configure_output, emit_json, setup_logging
from .cli_types import AUTO_OR_COUNT, COLUMNS, DURATION, SIZE, WINDOW, Commands, ShellGlobs, named
from .errors import ManifestError
from .history import MAX_COUNT
from .progress import Progress

if TYPE_CHECKING:
    from .readers.verify_report import ShardCheck

# Each command imports the readers or writers it runs when it runs: `snap --help` pays for none,
# nor for numpy, pyarrow or fsspec, `snap create` not for the loader (tests/test_cli.py).


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__)
@click.option("--debug", is_flag=True, help="Show full tracebacks on errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """snap: materialise a preprocessing function once as an Arrow snapshot; replay it fast."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    configure_output(debug)


@cli.command(cls=ShellGlobs)
@click.argument("pipeline")
@click.argument("output", type=cli_types.LOCATION)
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
    multiple=True,  # (to refuse a second: click kept the last, the first's inputs dropped)
    callback=cli_types.given_once,
    help="A function (module:func or file.py:func) returning the inputs (JSON values).",
)
@click.option(
    "--param",
    "params",
    multiple=True,
    metavar="KEY=VALUE",
    help="Keyword argument; VALUE is read as KEY's annotated type, else JSON, else text.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=0),
    default=None,
    help="Worker processes (default: the CPUs this job may use; 0: run in this process); "
    "with --executor ray, the most tasks in flight (default: 2 per cluster CPU).",
)
@click.option(
    "--executor",
    type=click.Choice(["local", "ray"], case_sensitive=False),
    default="local",
    show_default=True,
    help="local: worker processes here; ray: Ray tasks (see --ray-address).",
)
@click.option(
    "--ray-address",
    default=None,
    help="Ray cluster for --executor ray (default: RAY_ADDRESS, else a local Ray).",
)
@click.option(
    "--shard-size",
    type=SIZE,
    default="256MiB",
    show_default=True,
    help="Close a shard once it holds this many bytes on disk.",
)
@click.option(
    "--compression",
    type=click.Choice(["zstd", "lz4", "none"], case_sensitive=False),
    help="Shards' codec (default zstd; a grow keeps the snapshot's).",
)
@click.option("--level", type=click.IntRange(1, 22), default=None, help="zstd level (default 1).")
@click.option(
    "--inputs-per-task",
    type=click.IntRange(min=1, max=MAX_COUNT - 1),
    help="Inputs grouped into one task (default: chosen from the input count).",
)
@click.option(
    "--batch-rows",
    type=click.IntRange(min=1),
    help="Most records per Arrow record batch (default 1024; the unit of shuffle).",
)
@click.option(
    "--batch-bytes",
    type=SIZE,
    help="Target uncompressed bytes of a record batch (default 1MiB, more for records of "
    "many columns).",
)
@click.option(
    "--overwrite",
    is_flag=True,
    help="Write it again even if OUTPUT holds a snapshot (from other code/params/inputs, "
    "or to re-lay out a matching one).",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Say which tasks would be reused and which computed (and the inputs added, removed, "
    "changed); do nothing.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary on stdout.")
@click.option("--quiet", is_flag=True, help="No progress or information (warnings still).")
@answer_errors
def create(
    pipeline: str,
    output: str,
    inputs: tuple[str, ...],
    inputs_from: str | None,
    params: tuple[str, ...],
    workers: int | None,
    executor: str,
    ray_address: str | None,
    shard_size: str,
    compression: str | None,
    level: int | None,
    inputs_per_task: int | None,
    batch_rows: int | None,
    batch_bytes: str | None,
    overwrite: bool,
    dry_run: bool,
    as_json: bool,
    quiet: bool,
) -> None:
    """Run PIPELINE (file.py:function or package.module:function) and snapshot it to OUTPUT.

    Re-running the same command reuses a finished snapshot and resumes an interrupted one.
    """  # noqa: D301
    from .writers import create as create_mod
    from .writers.params import cli_params

    setup_logging(quiet)
    program = (click.get_current_context().obj or {}).get("program")  # (not CliRunner's)
    cli_types.check_create_usage(pipeline, inputs, inputs_from, executor, ray_address, output,
                                 program, compression, level, workers)  # fmt: skip
    with create_mod.start_dir.kept(), cli_io.stdout_to_stderr():  # (paths from here; prints: 2)
        info = create_mod.create(
            pipeline, output, inputs=list(inputs) or None, inputs_from=inputs_from,
            params=cli_params(params, pipeline, click.UsageError),  # (KEY=VALUE: exit 2)
            workers=workers, executor=executor, ray_address=ray_address, shard_size=shard_size,
            compression=compression or create_mod.DEFAULT_CODEC, level=level, overwrite=overwrite,
            progress=not (quiet or as_json),
            inputs_per_task=inputs_per_task, batch_rows=batch_rows, batch_bytes=batch_bytes,
            dry_run=dry_run,
        )  # fmt: skip
    _show(info.to_json(), lambda doc: render.created_lines(doc, hints=not quiet), as_json)


def _show(doc: dict[str, Any], lines: Callable[[dict[str, Any]], list[str]], as_json: bool) -> None:
    """A command's document: as JSON on stdout, or as the lines ``lines`` makes of it (of
    its text with controls escaped, but for head's, whose values are quoted as Python does)."""
    if as_json:
        emit_json(doc)
    else:
        cli_io.echo_lines(lines(doc if lines is render.head_lines else render.escaped(doc)))


@cli.command()
@click.argument("snapshot", type=cli_types.LOCATION)
@click.option("--shards", "show_shards", is_flag=True, help="List every shard.")
@click.option("--versions", "show_versions", is_flag=True, help="List the versions kept, and why.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
@answer_errors
def inspect(snapshot: str, show_shards: bool, show_versions: bool, as_json: bool) -> None:
    """Summarise SNAPSHOT, or one shard file of it, from the manifest (no shard is read).

    A shard is shown with its records, checksum and the inputs that made it."""
    if show_shards and show_versions:  # (--versions showed, --shards was left out silently)
        raise click.UsageError("--shards lists a version's shards, --versions versions: give one")
    from .readers import target as target_mod

    try:
        target = target_mod.open_target(snapshot)
    except ManifestError:
        from .writers import runs as runs_mod

        state = runs_mod.unfinished_state(snapshot)
        if state is None:
            raise
        _show(state, render.unfinished_lines, as_json)
        return
    snap = target.snapshot
    if show_versions:
        _show({"path": snap.url, "versions": snap.versions()}, render.versions_lines, as_json)
    elif target.shard is not None:
        _show(target_mod.shard_doc(target), render.shard_lines, as_json)
    else:
        from . import report

        doc = report.inspect_doc(snap.url, snap.manifest, show_shards)
        _show(doc, render.inspect_lines, as_json)


@cli.command()
@click.argument("snapshot", type=cli_types.LOCATION)
@click.option(
    "--fast",
    is_flag=True,
    help="Download no shard: compare sizes and the crc32c the storage reports (GCS).",
)
@click.option("--threads", type=click.IntRange(min=1), help="Shards at once (cores; 16 remote).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
@answer_errors
def verify(snapshot: str, fast: bool, threads: int | None, as_json: bool, quiet: bool) -> None:
    """Check every shard of SNAPSHOT (or one shard file): size, crc32c, that it decodes.

    Exits 1 if any shard is damaged or cannot be read, naming each one.
    """
    from .readers import verify as verify_mod
    from .readers.target import open_target

    target = open_target(snapshot)
    snap = target.snapshot
    progress = None if quiet or as_json else Progress(len(snap.shards), unit="shards")

    def on_shard(check: ShardCheck) -> None:  # (records and bytes of shards read only: one
        if progress is not None:  # that could not be was counted as checked; --fast: sizes)
            read = check.read
            progress.task_done(check.records * read, check.bytes * (read and check.check == "full"))

    try:
        result = verify_mod.verify(snap, fast, threads, on_shard, target.shard_url is None)
    finally:
        if progress is not None:
            progress.close()
    _show({**result.to_json(), "shard": target.shard_url}, render.verify_lines, as_json)
    if (unreadable := result.unreadable_error()) is not None:
        raise unreadable  # (one line on stderr, exit 1, after the report)
    if not result.ok:
        sys.exit(1)


@cli.command()
@click.argument("snapshot", type=cli_types.LOCATION)
@click.option("-n", "count", type=click.IntRange(min=0), default=5, show_default=True,
              help="Records to show.")  # fmt: skip
@click.option("--columns", type=COLUMNS, default=None, help="Comma-separated columns to show.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
@answer_errors
def head(snapshot: str, count: int, columns: list[str] | None, as_json: bool) -> None:
    """Show the first records of SNAPSHOT (or of one shard file), arrays summarised."""
    from . import report
    from .readers.target import open_target

    target = open_target(snapshot)
    snap = target.snapshot
    utc = report.zoned(snap.schema)  # (replayed in UTC: each value marked Z)
    records = [
        {k: report.summarise_value(v, k in utc) for k, v in rec.items()}
        for rec in snap.head(count, columns=named(columns, snap.schema.names))
    ]
    doc = {"path": snap.url, "shard": target.shard_url, "num_records": snap.num_records,
           "records": records}  # fmt: skip
    _show(doc, render.head_lines, as_json)


@cli.command()
@click.argument("snapshot", type=cli_types.LOCATION)
@click.option("--batch-size", type=click.IntRange(min=1), default=256, show_default=True,
              help="Records per batch, as a training loop's loader would take.")  # fmt: skip
@click.option("--epochs", type=click.IntRange(min=1), default=2, show_default=True,
              help="Passes over the snapshot (the first also verifies checksums).")  # fmt: skip
@click.option("--shuffle/--no-shuffle", default=True, show_default=True,
              help="Shuffle, as training does, or read in written order.")  # fmt: skip
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Seed of the shuffle (the same seed, the same order).")  # fmt: skip
@click.option("--columns", type=COLUMNS, default=None, help="Comma-separated columns to read.")
@click.option("--shuffle-buffer", type=WINDOW, default="auto", show_default=True,
              help="Shuffle window: records, a size (64MiB), or auto.")  # fmt: skip
@click.option("--num-parallel-reads", type=AUTO_OR_COUNT, default="auto", show_default=True,
              help="Decoding threads: a number, or auto.")  # fmt: skip
@click.option("--prefetch", type=AUTO_OR_COUNT, default="auto", show_default=True,
              help="Batches made ahead of the consumer, or auto.")  # fmt: skip
@click.option(
    "--step-ms",
    type=cli_types.MILLISECONDS,  # a minute a step at most: any more is a typo
    default=0.0,
    show_default=True,
    help="Simulated training step per batch; shows whether the loader keeps up.",
)
@click.option(
    "--processes",
    type=cli_types.PROCESSES,
    default=0,
    show_default=True,
    help="Decode in this many processes instead of threads (Linux, fixed-width columns).",
)
@click.option("--no-verify", is_flag=True, help="Skip the shards' checksums in epoch 1.")
@click.option(
    "--trace",
    metavar="FILE",
    default=None,  # (checked by bench.checked_trace: one exit code, 1, for every fault)
    help="Write a Chrome trace-event JSON of the loader's stages (Perfetto, chrome://tracing).",
)
@click.option(
    "--cache-dir",
    metavar="DIR",
    default=None,
    help="Remote snapshots: keep fetched shards in this local directory (shared by processes).",
)
@click.option("--cache-limit", type=SIZE, help="Most bytes in --cache-dir, e.g. 50GiB.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
@answer_errors
def bench(
    snapshot: str,
    batch_size: int,
    epochs: int,
    shuffle: bool,
    seed: int,
    columns: list[str] | None,
    shuffle_buffer: str,
    num_parallel_reads: str,
    prefetch: str,
    step_ms: float,
    processes: int,
    no_verify: bool,
    trace: str | None,
    cache_dir: str | None,
    cache_limit: int | None,
    as_json: bool,
) -> None:
    """Replay SNAPSHOT with the loader; print records/s, MB/s, input-bound % and stage times."""
    from .readers import bench as bench_mod
    from .readers.snapshot import open as open_snapshot

    if cache_limit is not None and cache_dir is None:
        raise click.UsageError("--cache-limit needs --cache-dir (the directory it bounds)")
    if cache_dir and (scheme := cache_dir.partition("://"))[1] and scheme[0] != "file":
        said = f"the cache is this machine's disk: give a local directory, not {cache_dir!r}"
        raise click.BadParameter(said, param_hint="'--cache-dir'")
    if as_json and trace is not None and bench_mod.is_stdout(trace):  # (two documents)
        said = f"--trace {trace} is stdout, where --json prints its one document"
        raise click.UsageError(f"{said}: give --trace a file, or leave out --json")
    snap = open_snapshot(snapshot)
    options: dict[str, Any] = {
        "shuffle": shuffle,
        "seed": seed,
        "shuffle_buffer": shuffle_buffer,
        "num_parallel_reads": num_parallel_reads,
        "prefetch": prefetch,
        "verify": not no_verify,
        "cache_dir": cache_dir,
        "cache_limit": cache_limit,
        "processes": processes,
    }
    if columns is not None:
        options["columns"] = named(columns, snap.schema.names)
    doc = bench_mod.bench(
        snap, batch_size=batch_size, epochs=epochs, step_ms=step_ms, trace=trace, **options
    )
    _show(doc, render_bench.bench_lines, as_json)


@cli.command()
@click.argument("snapshot", type=cli_types.LOCATION)
@click.option("--dry-run", is_flag=True, help="List what would be removed; remove nothing.")
@click.option(
    "--retention",
    type=DURATION,
    default="7d",
    show_default=True,
    help="Keep a replaced version this long after it was replaced (2w, 7d, 12h, 30m, 90s, 0).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
@answer_errors
def gc(snapshot: str, dry_run: bool, retention: float, as_json: bool) -> None:
    """Remove what no kept version of SNAPSHOT and no live writer uses: files of dead runs, and
    versions replaced more than --retention ago, with the shards only they had."""
    from .writers import gc as gc_mod

    result = gc_mod.gc(snapshot, dry_run=dry_run, retention=retention)
    _show(result.to_json(), render.gc_lines, as_json)


def main() -> None:
    cli_exit.run(cli)
