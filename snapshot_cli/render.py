"""Terminal text of the inspection commands, from their JSON documents (pure).

Each function takes the document a command prints with ``--json`` and returns lines, so the
two outputs can never disagree. Colour is added with ``click.style`` by the caller's
``click.echo``, which drops it when stdout is not a terminal.
"""

from __future__ import annotations

import json
import re
import time
import unicodedata
from typing import Any

import click

from .progress import counted, human_bytes, human_count

# report and schema (numpy, pyarrow) are imported by the functions that use them: the CLI
# imports this module before parsing its arguments, and `snap --help` should not wait for them

INPUTS_SHOWN = 10  # inputs of a task named by snap inspect SHARD

# Keys longer than this are not padded to: one 300-character column name would push every
# other row's value 300 characters to the right
ALIGN_AT_MOST = 40


def table(rows: list[tuple[str, str]], indent: str = "") -> list[str]:
    """``key  value`` lines with keys padded to one width (that of the longest key of at
    most :data:`ALIGN_AT_MOST` characters; a longer key is followed by two spaces)."""
    widths = [shown_width(k) for k, _ in rows]
    width = max((w for w in widths if w <= ALIGN_AT_MOST), default=0)
    pads = [" " * max(0, width - w) for w in widths]
    return [f"{indent}{k}{pad}  {v}" for (k, v), pad in zip(rows, pads, strict=True)]


def shown_width(text: str) -> int:
    """The columns ``text`` takes on a terminal: 2 for a wide character (CJK, most emoji),
    0 for a combining or zero-width one (``名前🙂`` is 6; ``len`` said 3, and the values
    of such a row stood out of line)."""
    return sum(
        0 if unicodedata.combining(c) or unicodedata.category(c) == "Cf"
        else 2 if unicodedata.east_asian_width(c) in "WF" else 1
        for c in text
    )  # fmt: skip


def _count(n: int) -> str:
    short = human_count(n)
    return short if short == str(n) else f"{short} ({n})"


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def _readable_json(value: Any) -> str:
    """``value`` as JSON with its text as written (``café 日本``: it showed ``caf\\u00e9
    \\u65e5\\u672c``), but for the characters a terminal breaks a line at or hides."""
    return json.dumps(value, ensure_ascii=False).translate(_JSON_BREAKS)


# What JSON leaves as it is with ensure_ascii=False that a terminal or splitlines() breaks a
# line at or hides (C1 controls, U+2028 and U+2029), kept as JSON's escapes
_JSON_BREAKS = {c: f"\\u{c:04x}" for c in (*range(0x7F, 0xA0), 0x2028, 0x2029)}


def inspect_lines(doc: dict[str, Any]) -> list[str]:
    from .report import bars
    from .schema import format_type_doc

    comp = doc["compression"]
    level = comp.get("level")
    versions = ", ".join(f"{k} {v}" for k, v in doc["created_by"].items() if k != "host")
    bal = doc["balance"]
    rec, size = bal["records"], bal["bytes"]
    rows = [
        ("snapshot", doc["path"]),
        ("fingerprint", doc["fingerprint"][:16]),
        ("pipeline", str(doc["pipeline"].get("spec") or doc["pipeline"].get("function"))),
        ("params", _readable_json(doc["params"])),
        ("inputs", str(doc["num_inputs"])),
        ("version", str(doc.get("version", 1))),
        ("created", f"{doc['created']} ({versions})"),
        ("records", _count(doc["num_records"])),
        ("shards", f"{doc['num_shards']} ({doc['num_record_batches']} record batches)"),
        (
            "on disk",
            f"{human_bytes(doc['bytes'])} ({human_bytes(doc['uncompressed_bytes'])} "
            f"uncompressed, {doc['compression_ratio']:.2f}x)",
        ),
        ("compression", comp["codec"] + (f" level {level}" if level else "")),
        (
            "per shard",
            f"records min {human_count(rec['min'])} / median {human_count(rec['median'])} / "
            f"max {human_count(rec['max'])}; size min {human_bytes(size['min'])} / median "
            f"{human_bytes(size['median'])} / max {human_bytes(size['max'])}",
        ),
    ]
    lines = table(rows)
    lines.append("columns:")
    lines += table([(c["name"], format_type_doc(c)) for c in doc["schema"]], indent="  ")
    hist = bal["records_histogram"]
    if len(hist) > 1:
        lines.append("records per shard:")
        labels = [
            human_count(b["low"])
            if b["low"] == b["high"]
            else f"{human_count(b['low'])}-{human_count(b['high'])}"
            for b in hist
        ]
        width = max(len(label) for label in labels)
        for label, (b, bar) in zip(labels, bars(hist), strict=True):
            lines.append(f"  {label:>{width}}  {bar} {b['count']}")
    if "shards" in doc:
        lines.append("shards:")
        path_w = max((len(s["path"]) for s in doc["shards"]), default=0)
        for s in doc["shards"]:
            n, word = s["records"], "record " if s["records"] == 1 else "records"
            lines.append(f"  {s['path']:<{path_w}}  {n:>9} {word}  "
                         f"{human_bytes(s['bytes']):>10}  crc32c {s['crc32c']}")  # fmt: skip
    return lines


def shard_lines(doc: dict[str, Any]) -> list[str]:
    """``snap inspect SHARD``: one shard, as the version that lists it describes it."""
    from .schema import format_type_doc

    comp, first, n = doc["compression"], doc["first_record"], doc["records"]
    runs = ", ".join(
        f"{human_count(rows)}" + (f" x {count}" if count > 1 else "")
        for rows, count in doc["batch_rows"]
    )
    ratio = doc["uncompressed_bytes"] / doc["bytes"] if doc["bytes"] else 0.0
    current = doc["current_version"]
    replaced = "" if current == doc["version"] else f"; the snapshot is at version {current} now"
    place = f"records {first:,} to {first + n - 1:,} of the version" if n else "no records"
    rows = [
        ("shard", doc["path"]),
        ("snapshot", f"{doc['snapshot']} (version {doc['version']}, shard index "
                     f"{doc['index']} of {doc['num_shards']}{replaced})"),
        ("records", f"{_count(n)} ({place}, in the order written)"),
        ("record batches", f"{doc['record_batches']} ({runs or 'no'} "
                           f"record{'' if runs == '1' else 's'})"),
        ("on disk", f"{human_bytes(doc['bytes'])} ({human_bytes(doc['uncompressed_bytes'])} "
                    f"uncompressed, {ratio:.2f}x), {comp['codec']}"
                    + (f" level {comp['level']}" if comp.get("level") else "")),
        ("crc32c", doc["crc32c"]),
    ]  # fmt: skip
    task = doc["task"]
    if task is not None:
        inputs = task["inputs"]
        shown = ", ".join(one_line(str(i)) for i in inputs[:INPUTS_SHOWN])
        more = f", ... ({len(inputs)} in all)" if len(inputs) > INPUTS_SHOWN else ""
        rows.append(("task", f"{task['key'][:16]}, {counted(len(task['shards']), 'shard')}"))
        rows.append(("inputs", f"{shown}{more}" if inputs else "none (the single call)"))
    lines = table(rows)
    lines.append("columns:")
    lines += table([(c["name"], format_type_doc(c)) for c in doc["schema"]], indent="  ")
    return lines


def versions_lines(doc: dict[str, Any]) -> list[str]:
    """``snap inspect --versions``: one line per kept version, oldest first."""
    lines = [f"{doc['path']}: {counted(len(doc['versions']), 'version')} kept"]
    for v in doc["versions"]:
        c = v["changes"]
        what = (
            "made before versions"
            if c is None
            else f"{'overwrite: ' if c['overwrite'] else ''}{counted(c['tasks_computed'], 'task')} "
            "computed, "
            f"{c['tasks_reused']} reused; inputs +{c['inputs_added']} -{c['inputs_removed']} "
            f"~{c['inputs_changed']}"
        )
        mark = " (current)" if v["current"] else ""
        records = "record " if v["records"] == 1 else "records"
        lines.append(
            f"  v{v['version']:<4} {v['created']}  {_count(v['records']):>10} {records}  "
            f"{human_bytes(v['bytes']):>10}  {what}{mark}"
        )
    return lines


def created_lines(info: dict[str, Any], hints: bool = True) -> list[str]:
    """``snap create``'s summary: what the snapshot holds and what was done (the plan only,
    for ``--dry-run``); ``hints``: False for none (``--quiet``)."""
    if info["dry_run"]:
        return plan_lines(info)
    ratio = info["uncompressed_bytes"] / info["bytes"] if info["bytes"] else 0.0
    verb = "up to date" if info["reused"] else "created"
    done = ""
    if info["tasks_resumed"]:
        done += f", {info['tasks_resumed']} of {info['tasks']} tasks resumed"
    if info["tasks_reused"]:
        done += f", {info['tasks_reused']} of {info['tasks']} tasks reused"
    lines = [
        f"{verb}: {info['path']} (version {info['version']}): "
        f"{counted(info['num_records'], 'record')} in {counted(info['num_shards'], 'shard')}, "
        f"{human_bytes(info['bytes'])} on disk ({human_bytes(info['uncompressed_bytes'])} "
        f"uncompressed, {ratio:.2f}x), {info['seconds']:.1f} s{done}"
    ]
    shards, extra = info["num_shards"], info["bytes"] - info["uncompressed_bytes"]
    batches = info.get("num_record_batches", 0)
    if hints and extra > info["uncompressed_bytes"] and not info["reused"]:  # (a first try)
        if batches >= 4 * shards:  # many small record batches (--batch-rows 1): each framed
            lines.append(
                f"  (larger on disk than its values: each of its "
                f"{counted(batches, 'record batch')} takes ~{human_bytes(extra // batches)} "
                "of layout and framing; larger --batch-rows (default 1,024) and --batch-bytes "
                "(default 1 MiB) make fewer)"
            )
        elif shards > 1:
            lines.append(
                f"  (larger on disk than its values: each shard's schema and footer take "
                f"~{human_bytes(extra // shards)}; fewer, larger tasks, --inputs-per-task, "
                "make fewer shards)"
            )
    return lines


def plan_lines(info: dict[str, Any]) -> list[str]:
    """``snap create --dry-run``: what a create would reuse and compute."""
    if info["reused"]:  # (no plan is made: the snapshot is up to date)
        return [
            f"dry run: {info['path']} is up to date (version {info['version']}): nothing "
            "would be computed (nothing done)"
        ]
    resumed = info.get("tasks_resumed") or 0  # (done by an interrupted run it resumes)
    return [
        f"dry run: {info['path']} would become version {info['version']}: "
        f"{info['tasks'] - info['tasks_reused'] - resumed} of {info['tasks']} tasks to "
        f"compute, {info['tasks_reused']} reused"
        f"{f', {resumed} done by the interrupted run it resumes' if resumed else ''}; inputs "
        f"{info['inputs_added']} added, "
        f"{info['inputs_removed']} removed, {info['inputs_changed']} changed (nothing done)"
    ]


def unfinished_lines(state: dict[str, Any]) -> list[str]:
    lines = [f"{state['path']}: unfinished snapshot (no manifest.json yet)"]
    now = time.time()
    for r in state["runs"]:
        started = f", started {_age(now - r['created'])} ago" if r.get("created") else ""
        lines.append(f"  run {r['run']}: {r['tasks_done']}/{r['tasks']} tasks done{started}")
    w = state.get("writer")
    if w and not w["alive"] and not w.get("run"):  # (a lease of no run is no writer's)
        lines.append(f"  last lease: {w['holder']}, of a snap gc or of a snap create that "
                     "stopped before its run began: no writer is at work")  # fmt: skip
    elif w:
        alive = click.style("writing", fg="green") if w["alive"] else "not running"
        lines.append(f"  writer: {w['holder']}, {alive}")
    if not state["runs"]:
        lines.append("  no run state left (snap gc removed it, or a writer is starting): "
                     "snap create starts it from the beginning")  # fmt: skip
    elif not w or not w["alive"]:
        lines.append("  run the same snap create again to resume it, or snap gc to remove it")
    return lines


def verify_lines(doc: dict[str, Any]) -> list[str]:
    """``snap verify``'s report: each damaged, unreadable (its answer: path, cause, what to
    do) and unloadable, then the verdict and what to do about the damaged."""
    checks = ", ".join(f"{n} {kind}" for kind, n in sorted(doc["checks"].items()))
    gone = doc.get("replaced_by")  # (replaced while verify ran: its lost shards gone with it)
    words = ("GONE" if gone else "DAMAGED", "UNREADABLE", "CANNOT BE LOADED")
    damaged, unreadable, cannot = (click.style(w, fg="red", bold=True) for w in words)
    lines = [f"{damaged}  {s['url']}: {s['problem']}" for s in doc["damaged"]]
    lines += [f"{unreadable}  {s['problem']}" for s in doc.get("unreadable", [])]
    lines += [f"{cannot}  {problem}" for problem in doc.get("unloadable", [])]  # (any bytes)
    lines += [f"{damaged}  {problem}" for problem in doc.get("problems", [])]  # (its files)
    said, of = [], f"of {doc['num_shards']} shards "
    if doc["num_damaged"]:
        kind = f"gone, replaced by version {gone} meanwhile" if gone else "damaged"
        said.append(f"{doc['num_damaged']} {of}{kind}")
    if doc.get("num_unreadable"):  # (the storage's failures: what to do is on stderr)
        said.append(f"{doc['num_unreadable']} {'' if said else of}could not be read")
    verdict = (
        click.style("ok", fg="green")
        if doc["ok"]
        else click.style(", ".join(said), fg="red")
        if said
        else click.style("cannot be loaded (see above)", fg="red")
        if doc.get("unloadable")
        else click.style("not ok (see above)", fg="red")
    )
    lines.append(
        f"{doc.get('shard') or doc['path']}: {verdict} ({counted(doc['num_shards'], 'shard')}; "
        f"checks: {checks or 'none'}; {human_bytes(doc['bytes_checked'])} read in "
        f"{doc['seconds']:.1f} s)"
    )
    lines += [f"  note: {note}" for note in doc.get("notes", [])]
    # (verify_files._own_copy: manifest.json is not the copy of its version kept beside it)
    edited = any("the copy written with it at the commit" in p for p in doc.get("problems", []))
    if doc["num_damaged"] and gone is None:  # (replaced: a note says so)
        lost = all(d["lost"] for d in doc["damaged"])  # what the same create computes again
        links = all(" outside the snapshot " in d["problem"] for d in doc["damaged"])
        lines.append(
            "  manifest.json was edited (above): put its copy back and run snap verify again "
            "before deleting anything; the shards it calls damaged may be intact"
            if edited
            else "  run the same snap create again: it computes the tasks of shards missing or "
            "of another size again (a new version)"
            if lost
            else "  do not delete them: the files they link to may be intact (see above)"
            if links
            else "  delete the damaged shards and run the same snap create again (it computes "
            "the tasks of missing shards again, a new version), or remake the snapshot with "
            "snap create --overwrite"
        )
    return lines


def head_lines(doc: dict[str, Any]) -> list[str]:
    """``snap head``'s records: the values quoted as Python does (``'a\\x00b'``, ``'a\\\\b'``;
    escaped before, their backslashes were doubled: a NUL looked like a backslash's text),
    the columns' names and the shard's path escaped (:func:`escaped`)."""
    from .report import format_summary

    lines = []
    for i, rec in enumerate(doc["records"]):
        lines.append(f"record {i}:")
        lines += table([(escaped(k), format_summary(v)) for k, v in rec.items()], indent="  ")
    of = f" of {escaped(doc['shard'])}" if doc.get("shard") else ""
    total = doc["num_records"]
    lines.append(f"({len(doc['records'])} of {human_count(total)} record{'s' * (total != 1)}{of})")
    return lines


def gc_lines(doc: dict[str, Any]) -> list[str]:
    """What ``snap gc`` removed (or would remove), one line each, then the total."""
    verb = "removed" if "removed" in doc else "would remove"
    garbage = doc.get("removed", doc.get("would_remove", []))
    lines = [f"{verb} {g['path']}  ({human_bytes(g['bytes'])}, {g['reason']})" for g in garbage]
    if doc["note"]:
        lines.append(f"note: {doc['note']}")
    why = "(--retention: how long a replaced version stays for its readers)"  # (its shards)
    lines += [f"kept version {k['version']}, replaced, until {k['until']} {why}"
              for k in doc.get("kept_versions", [])]  # fmt: skip
    total = f"{verb} {counted(len(garbage), 'item')}, {human_bytes(doc['bytes'])}"
    lines.append(f"{doc['path']}: {total if garbage else 'nothing to remove'}")
    return lines


# C0 and C1 control characters but newline and tab, as Python escapes them: a snapshot's
# metadata is anyone's text (a manifest's pipeline name carried OSC sequences that set the
# terminal's title and clipboard; click strips only colours, and only off a terminal)
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0)) if c not in (9, 10)}
# and the bidirectional controls ("Trojan Source"): a column named "abc\u202edef" turned the
# rest of its line around on a terminal (a probe); a zero-width joiner is an emoji's, kept
_CONTROLS.update({c: f"\\u{c:04x}" for c in (0x61C, 0x200E, 0x200F, *range(0x202A, 0x202F),
                                              *range(0x2066, 0x206A))})  # fmt: skip


_COLOUR = re.compile(r"(\x1b\[[0-9;]*m)")  # (SGR: colours, as click.style makes them)


def one_line(name: str) -> str:
    """A name (an input's path) on one line of a table: its newlines and tabs escaped too
    (:func:`printable` keeps them, for text of several lines)."""
    return name.replace("\n", "\\n").replace("\t", "\\t")


def escaped(value: Any) -> Any:
    """A command's document with the control characters of its text escaped, ``\x1b``,
    before its lines are styled: an input named ``a\x1b[31mred.txt`` was a colour code to
    :func:`printable`, which click dropped off a terminal (a path that does not exist was
    printed) and sent on to one. Newlines and tabs are left to :func:`one_line`."""
    if isinstance(value, str):
        return value.translate(_CONTROLS)
    if isinstance(value, dict):
        return {escaped(k): escaped(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [escaped(v) for v in value]
    return value


def plain(text: str) -> str:
    """``text`` that snap did not style (an error, a log line) with every control character
    but newline and tab escaped, ``\x1b``, colour codes too: they are the data's (a path
    holding ``\x1b[31m`` coloured the terminal)."""
    return text.translate(_CONTROLS)


def printable(text: str) -> str:
    """``text`` with its control characters (newline and tab kept, and colour codes) shown
    escaped, ``\x1b``."""
    if "\x1b" not in text:
        return text.translate(_CONTROLS)
    parts = _COLOUR.split(text)  # (odd places: the colour codes)
    return "".join(p if i % 2 else p.translate(_CONTROLS) for i, p in enumerate(parts))
