"""Whether a saved loader state fits the loader given it, and what to do when it does not.

A state is a position (epoch, batch) in an order that is a function of the loader's settings
and of the data it reads, so it fits only a loader with the same of both. The data differs
when the snapshot was written again since (``--overwrite``, new inputs): the state's batch
counts would then land elsewhere in other records, silently, so it is refused, naming the
version of the snapshot that still holds the data the state was saved on, if one is kept.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import storage
from .. import versions as versions_mod
from ..layout import MANIFEST_NAME
from .elastic import GlobalOptions

# How the order is drawn from the settings. A state without it was saved by snap before
# 2026-11-30, whose order is version 1 (since 2026-11-25, d68a307: states of the unreleased
# snap of 2026-11-23 to 25 resume in another order; 0.1.0's are refused for first_window_rows).
# Bump it with any change to the order a state's settings give (to which records a step
# holds: the order within a rank's slice of a global batch is not a state's concern, and
# changed on 2026-11-30 without a bump).
ORDER_VERSION = 1
# The global order's: 2 since 2026-11-30, its fill-up all in the last global batch (it was
# spread over the last window's batches, and a batch could hold a record twice).
GLOBAL_ORDER_VERSION = 2
# Keys of a state's config that no loader option sets: they follow from the settings, the
# data and snap's own version.
DERIVED = ("window_rows", "first_window_rows", "order_version")

if TYPE_CHECKING:
    from .plan import PlanOptions
    from .snapshot import Snapshot


def config(o: PlanOptions | GlobalOptions, fingerprints: list[str]) -> dict[str, Any]:
    """What a state records of the loader that saved it: the settings and the data its
    order is a function of (a global order's the same on every rank, for every world size)."""
    common = {"shuffle": o.shuffle, "seed": o.seed, "drop_last": o.drop_last,
              "window_rows": o.window_rows, "first_window_rows": o.first_window_rows,
              "order_version": ORDER_VERSION}  # fmt: skip
    if isinstance(o, GlobalOptions):
        return {
            "order": "global",
            "fingerprints": fingerprints,
            "records_per_epoch": list(o.counts),
            "global_batch_size": o.global_batch_size,
            **common,
            "order_version": GLOBAL_ORDER_VERSION,
        }
    return {
        "fingerprint": fingerprints[0],
        "batch_size": o.batch_size,
        "rank": o.rank,
        "world_size": o.world_size,
        **common,
    }


def plain(state: Any) -> Any:
    """``state`` as :meth:`state_dict` made it, from what a checkpoint library hands back:
    numpy's or torch's 0-d numbers as Python's (a JAX or numpy tree of the state), tuples as
    lists (a tree library's, or msgpack's)."""
    if isinstance(state, dict):
        return {k: plain(v) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return [plain(v) for v in state]
    if not isinstance(state, (bool, int, float, str)) and getattr(state, "ndim", None) == 0:
        return state.item()  # (np.int64(3), torch.tensor(3))
    return state


def keeps_position(epoch: int, at: tuple[int, int, int | None], epochs: int | None) -> bool:
    """Whether ``set_epoch(epoch)`` keeps the position ``at`` (epoch, batch, pass end) a
    state just loaded gave (no pass begun since), as a DistributedSampler's user calls it at
    each epoch's start, resumed or not: a state within ``epoch`` goes on from its batch; one
    taken after its pass's last batch (its epoch is its pass's end) ends that pass at once
    when ``epoch`` is the pass's, and starts the next when it is the next epoch."""
    state_epoch, _, pass_end = at
    if pass_end is None or state_epoch < pass_end:
        return epoch == state_epoch
    return epochs is not None and state_epoch - epochs <= epoch < state_epoch


def malformed(state: Any) -> str:
    """What is wrong with ``state`` as a loader's state ("" when it has its parts: a version,
    a config, and the epoch, batch and pass end it resumes at)."""
    if (
        not isinstance(state, dict)
        or type(state.get("version")) is not int
        or state["version"] != 1
    ):
        return "not a snap loader state (missing or unknown 'version')"
    if not isinstance(state.get("config"), dict):
        return "not a snap loader state: 'config' is not a dict (make it with state_dict())"
    for key, may_be_none in (("epoch", False), ("batch", False), ("pass_end", True)):
        value = state.get(key)
        if value is None and may_be_none and key in state:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return (
                f"not a snap loader state: {key!r} is {value!r}, not an integer >= 0 "
                "(make it with state_dict())"
            )
    return ""


def mismatch(mine: dict[str, Any], theirs: dict[str, Any], sources: list[Snapshot]) -> str:
    """Why a state with config ``theirs`` does not fit a loader with config ``mine`` reading
    ``sources`` ("" when it fits)."""
    if (theirs.get("order") == "global") != (mine.get("order") == "global"):
        if theirs.get("order") == "global":
            return (
                "the state was saved by a loader of the global order (global_batch_size="
                f"{theirs.get('global_batch_size')!r}): load it into a loader made with "
                "global_batch_size= as it was, not batch_size="
            )
        return (
            "the state was saved by a loader of each rank's own order (batch_size="
            f"{theirs.get('batch_size')!r}, rank {theirs.get('rank')!r} of "
            f"{theirs.get('world_size')!r}): load it into a loader made with batch_size= as "
            "it was, not global_batch_size="
        )
    theirs = {"order_version": 1, **theirs}
    diff = sorted(k for k in mine if mine[k] != theirs.get(k))
    if not diff:
        return ""
    if "order_version" in diff or diff == ["first_window_rows"]:  # (the ramp of windows)
        return (
            "the state was saved by another version of snap, which draws this loader's order "
            f"otherwise ({ {k: theirs.get(k) for k in diff} } vs { {k: mine[k] for k in diff} }): "
            "finish that epoch with the snap that saved the state, or start the next epoch "
            "without it (loader.set_epoch(state['epoch'] + 1))"
        )
    data = []
    key = next((k for k in ("fingerprint", "fingerprints") if k in diff), "")
    saved = theirs.get(key) if key else None
    saved = [saved] if isinstance(saved, str) else saved
    now = [s.manifest.fingerprint for s in sources]
    if isinstance(saved, list) and sorted(map(str, saved)) == sorted(now) and saved != now:
        order = [sources[now.index(str(f))].url for f in saved]  # (the same data, reordered)
        return (
            f"the state was saved by a mixture of the same snapshots in another order: give "
            f"them as {order} (with their weights in that order)"
        )
    if isinstance(saved, list) and len(saved) == len(sources):  # the same number of sources
        data = [_other_data(s, str(f)) for s, f in zip(sources, saved, strict=True)
                if f != s.manifest.fingerprint]  # fmt: skip
        diff.remove(key)
    if data or key in diff:  # the windows' sizes follow from the data (and the options)
        diff = [k for k in diff if k not in DERIVED]
    settings = (
        f"the state was saved by a loader with other {', '.join(diff)}: "
        f"{ {k: theirs.get(k) for k in diff} } vs { {k: mine[k] for k in diff} }"
    )
    if "rank" in diff or "world_size" in diff:
        settings += (
            " (a state of each rank's own order, batch_size=, is that rank's place in its own "
            "part of the epoch: load into each rank the state it saved, on as many ranks as "
            "saved them; or make the loaders with global_batch_size=, whose states any rank "
            "loads, on any world size that divides it)"
        )
    if "window_rows" in diff:
        settings += (
            " (window_rows, the shuffle window in records, follows from shuffle_buffer and, "
            "where that is a size or auto, from the columns read: resume with the same "
            "columns= and shuffle_buffer=, or give shuffle_buffer as a number of records)"
        )
    return "; ".join([*data, *([settings] if diff else [])])


def _other_data(source: Snapshot, saved: str) -> str:
    """The state was saved on other data than ``source`` holds now: which version has it."""
    now = source.manifest
    head = (
        f"the state was saved reading other data than {source.url} (version {now.version}) "
        f"holds: its fingerprint was {saved[:12]} then and is {now.fingerprint[:12]} now (it "
        "was written again since, or it is another snapshot), so the state's batch counts "
        "would land on other records"
    )
    current = versions_mod.read(source.fs, storage.join(source.root, MANIFEST_NAME)) or now
    for m in reversed(versions_mod.history(source.fs, source.root, current)):
        if m.fingerprint == saved:
            return (
                f"{head}; version {m.version}, kept, has the state's data: resume from "
                f"snap.open({source.url!r}, version={m.version}), or start without the state"
            )
    return f"{head}; no version it keeps has that data: start without the state"


# A SnapshotDataset's state under DataLoader workers (:mod:`.torch`): each worker reads a part
# of its rank's records in an order of its own, so a per-rank state's step (batches of one
# loader) names no place in them; a global order's step is one global batch, whichever parts
# make it. An epoch's start (step 0) is the same place in every split.
_WHAT_WORKS = (
    "make the dataset with global_batch_size= (SnapshotDataset(..., global_batch_size=...)), "
    "whose states resume with any num_workers and world size, or iterate it with "
    "num_workers=0 both where the state is saved and where it is resumed"
)


def unsaveable(epoch: int, step: int, workers: int | None) -> str:
    """Why a per-rank :class:`~.torch.SnapshotDataset` state at ``step`` of ``epoch``, its
    latest DataLoader iteration run in ``workers`` workers, cannot be saved ("" if it can)."""
    if not step or not workers or workers <= 1:  # (one worker reads as the process does)
        return ""
    return (
        f"state_dict(epoch={epoch}, step={step}): this SnapshotDataset is in the per-rank "
        f"order (no global_batch_size) and its latest DataLoader iteration had "
        f"num_workers={workers}, whose workers each read a part of the rank's records in an "
        "order of their own: a state within an epoch resumes in no DataLoader (only step=0, "
        f"an epoch's start, does); {_WHAT_WORKS}"
    )


def is_global(state: dict[str, Any]) -> bool:
    """Whether ``state`` is of the global order (its config says so)."""
    return bool(state["config"].get("order") == "global")


def split_mismatch(state: dict[str, Any], workers: int) -> str:
    """Why a :class:`~.torch.SnapshotDataset` ``state`` does not resume in a DataLoader of
    ``workers`` worker processes ("" when it does). ``state["workers"]`` is the split it was
    saved under (none in states of snap before 2026-11-30: taken as 0)."""
    if is_global(state):
        return ""
    saved = state.get("workers", 0)
    if isinstance(saved, bool) or not isinstance(saved, int) or saved < 0:
        return f"not a snap dataset state: 'workers' is {saved!r}, not an integer >= 0"
    epoch, step = state["epoch"], state["batch"]
    if not step:  # an epoch's start: the same in every split
        return ""
    if saved > 1:
        return (
            f"this dataset's state is of the per-rank order (no global_batch_size) and was "
            f"saved at step {step} of epoch {epoch} by a DataLoader with num_workers={saved}, "
            "whose workers each read a part of the rank's records in an order of their own: "
            "no DataLoader resumes it (one without workers would repeat records and skip "
            f"others): start epoch {epoch} over (dataset.set_epoch({epoch})), and from now on "
            f"{_WHAT_WORKS}"
        )
    if workers > 1:  # (one worker reads the rank's part as the process itself does)
        return (
            "this dataset's state is of the per-rank order (no global_batch_size), which "
            "resumes without DataLoader workers only, and this DataLoader has "
            f"num_workers={workers}: resume with num_workers=0, or save states of "
            "SnapshotDataset(..., global_batch_size=...), which resume with any num_workers "
            "and world size"
        )
    return ""
