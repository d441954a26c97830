"""What a saved loader state's settings that differ from the loader's say: both values, and
how to resume (see :func:`.resume.mismatch`). Pure: text from two configs."""

from __future__ import annotations

from typing import Any

from ..progress import human_bytes


def settings_said(
    mine: dict[str, Any], theirs: dict[str, Any], diff: list[str], capped: int | None, world: int
) -> str:
    """The settings ``diff`` of two configs that differ, with both values and what to do."""
    said = (
        f"the state was saved by a loader with other {', '.join(diff)}: the state's "
        f"{_said(theirs, diff)}, this loader's {_said(mine, diff)}"
    )
    if not {"rank", "world_size", "window_rows"} & set(diff):
        said += "; make the loader with the state's to resume it exactly, or start without it"
    if "rank" in diff or "world_size" in diff:
        said += (
            " (a state of each rank's own order, batch_size=, is that rank's place in its own "
            "part of the epoch: load into each rank the state it saved, on as many ranks as "
            "saved them; or make the loaders with global_batch_size=, whose states any rank "
            "loads, on any world size that divides it)"
        )
    if "window_rows" in diff and capped is not None:
        said += (
            ' (window_rows, the shuffle window in records: shuffle_buffer="auto" made it '
            f"{mine['window_rows']:,} here, a quarter of the {human_bytes(capped)} of memory "
            "this process may use (its cgroup's limit, or the machine's), as it does under "
            f"1 GiB: resume with shuffle_buffer={theirs.get('window_rows')!r}, the state's "
            "number of records, where two windows of them fit, or start without the state)"
        )
    elif "window_rows" in diff:
        said += (
            " (window_rows, the shuffle window in records, follows from shuffle_buffer and, "
            "where that is a size or auto, from the columns read (auto, under a memory limit "
            "below 1 GiB, from that limit too): resume with the same columns= and "
            "shuffle_buffer=, or give shuffle_buffer as the state's number of records)"
        )
    if "global_batch_size" in diff:
        g = theirs.get("global_batch_size")
        said += (
            " (a loader given batch_size=, per rank, reads global batches of batch_size x "
            + (f"world_size: on {world} ranks, batch_size={g // world} or global_batch_size={g}"
               " resumes it)" if isinstance(g, int) and g > 0 and g % world == 0 else
               f"world_size: resume on a world size that divides {g!r}, with that "
               "global_batch_size=)")
        )  # fmt: skip
    if "records_per_epoch" in diff and len(listed(mine.get("records_per_epoch"))) > 1:
        said += (
            " (a mixture's records per epoch, from each snapshot, follow from its weights= "
            "and epoch_records=: give those the state was saved with)"
        )
    return said


def listed(value: Any) -> list[Any]:
    """A config's per-source value as a list (a per-rank state's is one string)."""
    return [value] if isinstance(value, str) else value if isinstance(value, list) else []


def _said(config: dict[str, Any], keys: list[str]) -> str:
    """``batch_size=64, seed=0``: the settings ``keys`` of ``config``, as a loader takes them."""
    return ", ".join(f"{k}={config.get(k)!r}" for k in keys)
