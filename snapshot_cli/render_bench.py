"""Terminal text of ``snap bench``, from its JSON document (pure; see :mod:`.render`)."""

from __future__ import annotations

from typing import Any

from .progress import counted, human_bytes, human_count
from .render import table


def compiled_text(found: dict[str, bool]) -> str:
    """``snap bench``'s "compiled" row: the parts this install has, and what it lacks."""
    parts = [p for p in ("gather", "shuffle", "ragged", "decode") if found.get(p)]
    native = [k.replace("_", " ") for k in ("lz4", "zstd", "crc32c_instruction") if found.get(k)]
    text = ", ".join(parts) + (f" ({', '.join(native)})" if "decode" in parts else "")
    missing = [k.replace("_", " ") for k, v in found.items() if not v]
    if not missing:
        return text
    return (
        f"{text or 'none'}; missing {', '.join(missing)}: slower pure-Python paths, the same "
        "batches (README, Development: a C compiler at install, the system's liblz4 and libzstd)"
    )


def settings_text(doc: dict[str, Any]) -> str:
    """The loader's settings in use, each marked "auto" where auto chose it."""
    settings, given = doc["settings"], doc["options"]

    def auto(option: str) -> str:
        return " (auto)" if given.get(option, "auto") == "auto" else ""

    return (
        f"num_parallel_reads={settings['parallel_reads']}{auto('num_parallel_reads')}, "
        f"prefetch={settings['prefetch']} batches{auto('prefetch')}, shuffle window "
        f"{human_count(settings['window_rows'])} records{auto('shuffle_buffer')}"
    )


def bench_lines(doc: dict[str, Any]) -> list[str]:
    st = doc["stage_seconds"]
    rows = [
        ("snapshot", doc["path"]),
        (
            "replayed",
            f"{counted(doc['records'], 'record')} in {counted(doc['batches'], 'batch')} of "
            # (partial ones: "3 records in 3 batches of 1000000" read as 3 million records)
            + ("" if doc["records"] == doc["batches"] * doc["batch_size"] else "up to ")
            + f"{doc['batch_size']}, {counted(doc['epochs'], 'epoch')}, {doc['seconds']:.2f} s",
        ),
        (
            "throughput",
            f"{human_count(doc['records_per_s'])} records/s, {doc['mb_per_s']:.1f} MB/s",
        ),
        (
            "first batch",
            (
                "none: no records were replayed"  # (it said "0 ms after iter()")
                if doc["first_batch_seconds"] is None
                else f"{doc['first_batch_seconds'] * 1000:.0f} ms after iter()"
            )
            + f" (the loader's set-up before it {doc.get('setup_seconds', 0) * 1000:.0f} ms)",
        ),
        (
            "input-bound",
            f"{doc['input_bound_pct']:.1f}% of the time the consumer waited for data"
            + (f" (simulated step {doc['step_ms']:g} ms)" if doc["step_ms"] else ""),
        ),
        (
            "stage time",
            f"read+decode {st['read_decode']:.2f} s (window loads, wall), gather "
            f"{st['gather']:.2f} s, map {st['map']:.2f} s",
        ),
        ("settings", settings_text(doc)),
    ]
    if procs := doc["options"].get("processes"):
        cpu = st.get("decode_process_cpu", 0.0)
        rows.append(
            (
                "processes",
                f"{procs} decode processes, {cpu:.2f} CPU-s of decoding"
                + (" (threads decoded while they started: a longer replay uses them)" * (not cpu)),
            )
        )
    rows.append(("compiled", compiled_text(doc.get("compiled") or {})))
    cache = doc.get("cache")
    if cache:
        rows.append(
            (
                "cache",
                f"{cache['dir']}: {counted(cache['fills'], 'shard')} fetched "
                f"({human_bytes(cache['fill_bytes'])}), {cache['hits']} reused, "
                f"{cache['evicted']} evicted",
            )
        )
    lines = table(rows)
    for e in doc["per_epoch"]:
        lines.append(
            f"  epoch {e['epoch']}: {e['seconds']:.2f} s, "
            f"{human_count(e['records_per_s'])} records/s, {e['mb_per_s']:.1f} MB/s"
        )
    if doc.get("trace"):
        lines.append(
            f"trace: {doc['trace']} ({doc.get('trace_events', 0)} events; open it in "
            "https://ui.perfetto.dev or chrome://tracing)"
        )
    return lines
