"""Whether a saved loader state fits the loader given it, and what to do when it does not.

A state is a position (epoch, batch) in an order that is a function of the loader's settings
and of the data it reads, so it fits only a loader with the same of both. The data differs
when the snapshot was written again since (``--overwrite``, new inputs): the state's batch
counts would then land elsewhere in other records, silently, so it is refused, naming the
version of the snapshot that still holds the data the state was saved on, if one is kept.
The same records written in other record batches (``--batch-rows``, ``--batch-bytes``,
``--inputs-per-task``) keep the fingerprint but not the order, which permutes record
batches: a state records their layout too (:func:`layout`, ``blocks``) and is refused alike.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import storage, versions
from ..errors import OptionError
from ..layout import MANIFEST_NAME
from ..units import integer
from .elastic import GlobalOptions, same_windows
from .plan import Blocks
from .resume_said import listed, settings_said

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
# Keys of a state's config no loader option sets: from the settings, data and snap's version.
DERIVED = ("window_rows", "first_window_rows", "order_version")

if TYPE_CHECKING:
    from ..manifest import Manifest
    from .plan import PlanOptions
    from .snapshot import Snapshot


def config(
    o: PlanOptions | GlobalOptions, fingerprints: list[str], layouts: list[str]
) -> dict[str, Any]:
    """What a state records of the loader that saved it: the settings and the data its
    order is a function of (a global order's the same on every rank, for every world size):
    each source's fingerprint and the :func:`layout` of its record batches (``blocks``)."""
    common = {"shuffle": o.shuffle, "seed": o.seed, "drop_last": o.drop_last,
              "window_rows": o.window_rows, "first_window_rows": o.first_window_rows,
              "order_version": ORDER_VERSION}  # fmt: skip
    if isinstance(o, GlobalOptions):
        return {
            "order": "global",
            "fingerprints": fingerprints,
            "blocks": layouts,
            "records_per_epoch": list(o.counts),
            "global_batch_size": o.global_batch_size,
            **common,
            "order_version": GLOBAL_ORDER_VERSION,
        }
    return {
        "fingerprint": fingerprints[0],
        "blocks": layouts[0],
        "batch_size": o.batch_size,
        "rank": o.rank,
        "world_size": o.world_size,
        **common,
    }


def layout(rows: np.ndarray) -> str:
    """A digest of a snapshot's record batches' records, in written order (``Blocks.rows``):
    the order permutes record batches, so others (``--batch-rows``) give another order."""
    data = np.ascontiguousarray(rows, dtype="<i8").tobytes()
    return hashlib.blake2b(data, digest_size=8).hexdigest()


def _layout_of(m: Manifest) -> str:
    return layout(Blocks.from_manifest(m).rows)


def plain(state: Any) -> Any:
    """``state`` as :meth:`state_dict` made it, from what a checkpoint library hands back:
    numpy's or torch's 0-d numbers as Python's, tuples as lists (a tree library's, msgpack)."""
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
    a config, and the epoch, batch and pass end it resumes at, the epoch at most the pass's
    end: one past it, edited to skip ahead, was loaded and the next pass yielded nothing)."""
    made = "(make it with state_dict())"
    if not isinstance(state, dict):
        return f"not a snap loader state: a {type(state).__name__}, not a dict {made}"
    if "version" not in state:
        return f"not a snap loader state: it has no 'version' {made}"
    if type(state["version"]) is not int or state["version"] != 1:  # (1.0: a JSON trip that
        return (  # made every number a float; a later snap's version: said as what it is)
            f"not a snap loader state of this snap: 'version' is {state['version']!r}, not 1 {made}"
        )
    if "config" not in state:
        return f"not a snap loader state: it has no 'config' {made}"
    if not isinstance(state["config"], dict):
        return f"not a snap loader state: 'config' is not a dict {made}"
    for key, may_be_none in (("epoch", False), ("batch", False), ("pass_end", True)):
        if key not in state:
            return f"not a snap loader state: it has no {key!r} {made}"
        value = state[key]
        if value is None and may_be_none:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return f"not a snap loader state: {key!r} is {value!r}, not an integer >= 0 {made}"
    epoch, end = state["epoch"], state["pass_end"]
    if end is not None and (epoch > end or (epoch == end and state["batch"])):  # (at its end,
        return (  # a state is taken after the pass's last batch: batch 0 of the next epoch)
            f"not a snap loader state: it resumes at batch {state['batch']} of epoch {epoch}, "
            f"past the end of its pass ('pass_end', {end}), which no state_dict() gives; to "
            "start at another epoch, use set_epoch(), not an edited state"
        )
    return ""


def past_the_end(state: dict[str, Any], batches: int) -> str:
    """Why ``state`` (well formed) names no place in an epoch of ``batches`` batches ("" if
    it does: at most its end, where a state taken after an epoch's last batch is). One past
    it resumed to an empty epoch without a word (a SnapshotDataset step given in items)."""
    if state["batch"] <= batches:
        return ""
    return (
        f"this state resumes at batch {state['batch']} of epoch {state['epoch']}, past the end "
        f"of an epoch, which has {batches} batches here: give the batches delivered since the "
        "epoch began (for a SnapshotDataset, step = items received // num_workers), or a "
        "state from state_dict() unchanged"
    )


def position(epoch: Any, step: Any) -> tuple[int, int]:
    """``SnapshotDataset.state_dict(epoch=, step=)`` as two ints >= 0 (numpy's and torch's
    integers taken; 1.5, True and -1 were floored, taken as 1 or saved to fail on loading)."""
    out = []
    for name, value in (("epoch", epoch), ("step", step)):
        value = integer(plain(value))
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise OptionError(f"state_dict({name}=...) must be an integer >= 0, got {value!r}")
        out.append(value)
    return out[0], out[1]


def mismatch(
    mine: dict[str, Any],
    theirs: dict[str, Any],
    sources: list[Snapshot],
    capped: int | None = None,
    world: int = 1,
) -> str:
    """Why a state with config ``theirs`` does not fit a loader with config ``mine`` reading
    ``sources`` ("" when it fits). ``capped``: the memory limit (bytes) for which this
    process made a per-rank ``shuffle_buffer="auto"`` window smaller (None: it did not).
    ``world``: the loader's world size (a global order's config has none)."""
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
    if "blocks" not in theirs:  # (a state of snap before 2026-11-30: layout not known)
        mine = {k: v for k, v in mine.items() if k != "blocks"}
    theirs = _same_window(mine, theirs, sources)
    diff = sorted(k for k in mine if mine[k] != theirs.get(k))
    if not diff:
        return ""
    key = "fingerprints" if "fingerprints" in mine else "fingerprint"
    saved, layouts = listed(theirs.get(key)), listed(theirs.get("blocks"))
    if "blocks" in diff and key not in diff and len(layouts) == len(sources):
        # the same data in other record batches (the windows' sizes follow from them)
        data = [_other_data(s, s.manifest.fingerprint, str(b))
                for s, b, now in zip(sources, layouts, listed(mine["blocks"]), strict=True)
                if b != now]  # fmt: skip
        diff = [k for k in diff if k not in (*DERIVED, "blocks")]
        settings = [settings_said(mine, theirs, diff, capped, world)] if diff else []
        return "; ".join([*data, *settings])
    if "order_version" in diff or diff == ["first_window_rows"]:  # (the ramp of windows)
        return (
            "the state was saved by another version of snap, which draws this loader's order "
            f"otherwise ({ {k: theirs.get(k) for k in diff} } vs { {k: mine[k] for k in diff} }): "
            "finish that epoch with the snap that saved the state, or start the next epoch "
            "without it (loader.set_epoch(state['epoch'] + 1))"
        )
    data = []
    now = [s.manifest.fingerprint for s in sources]
    if key in diff and sorted(map(str, saved)) == sorted(now) and saved != now:
        order = [sources[now.index(str(f))].url for f in saved]  # (the same data, reordered)
        return (
            f"the state was saved by a mixture of the same snapshots in another order: give "
            f"them as {order} (with their weights in that order)"
        )
    if key in diff and len(saved) != len(sources) and saved:  # (it listed 64-hex fingerprints)
        return _other_sources(saved, sources)
    if key in diff and len(saved) == len(sources):  # the same number of sources
        known = layouts if len(layouts) == len(saved) else [None] * len(saved)
        data = [_other_data(s, str(f), None if b is None else str(b))
                for s, f, b in zip(sources, saved, known, strict=True)
                if f != s.manifest.fingerprint]  # fmt: skip
        diff.remove(key)
    if data or key in diff:  # the windows' sizes, the layout, one source's records follow
        derived = (*DERIVED, "blocks", *["records_per_epoch"] * (len(sources) == 1 and bool(data)))
        diff = [k for k in diff if k not in derived]
    settings = [settings_said(mine, theirs, diff, capped, world)] if diff else []
    return "; ".join([*data, *settings])


def _other_sources(saved: list[Any], sources: list[Snapshot]) -> str:
    """A state saved reading one snapshot loaded into a mixture's loader, or the reverse, or
    a mixture of another number of snapshots: which of them, by URL where they are this
    loader's (by fingerprint where not)."""
    urls = {s.manifest.fingerprint: s.url for s in sources}

    def what(n: int) -> str:
        return "one snapshot" if n == 1 else f"a mixture of {n} snapshots"

    then = ", ".join(urls.get(str(f), f"other data, fingerprint {str(f)[:16]}") for f in saved)
    now = ", ".join(s.url for s in sources)
    return (
        f"the state was saved reading {what(len(saved))} ({then}), and this loader reads "
        f"{what(len(sources))} ({now}): load it into a loader of the snapshots it was saved "
        "with (a mixture's with its weights), or start without it"
    )


def _same_window(
    mine: dict[str, Any], theirs: dict[str, Any], sources: list[Snapshot]
) -> dict[str, Any]:
    """``theirs`` with ``mine``'s windows where both make the same plan: both windows of the
    per-rank order hold the rank's whole part of an epoch (its batches, whole), or neither
    shuffles; the global order's cut the epoch alike (test_resume_identity.py). "auto" makes
    a window of at most a quarter of the memory the process may use, and of other columns
    another (a state records the window as made, not cut to the epoch)."""
    windows = {**theirs, **{k: mine[k] for k in ("window_rows", "first_window_rows")}}
    if mine.get("order") == "global":
        return windows if same_windows(mine, theirs) else theirs
    if mine.get("fingerprint") != theirs.get("fingerprint"):
        return theirs
    if mine["shuffle"] is False and theirs.get("shuffle") is False:  # (written order)
        return windows
    n = sum(s.manifest.num_records for s in sources)
    world, batch = mine["world_size"], mine["batch_size"]
    part = n // world if mine["drop_last"] else -(-n // world)
    whole = -(-part // batch) * batch  # (windows are whole batches: this one holds it all)
    w = theirs.get("window_rows")
    if isinstance(w, int) and not isinstance(w, bool) and min(w, mine["window_rows"]) >= whole:
        return {**theirs, "window_rows": mine["window_rows"]}
    return theirs


def _other_data(source: Snapshot, saved: str, blocks: str | None) -> str:
    """The state was saved on other data than ``source`` holds now, of fingerprint
    ``saved`` in record batches of :func:`layout` ``blocks`` (None: not known, a state of
    snap before 2026-11-30): which kept version has it."""
    now = source.manifest
    if saved == now.fingerprint:  # the same records, in other record batches
        head = (
            f"the state was saved reading the same data as {source.url} (version "
            f"{now.version}) holds, but written in other record batches (their layout was "
            f"{blocks} then and is {_layout_of(now)} now: it was written again since with "
            "other --batch-rows, --batch-bytes or --inputs-per-task, or it is another copy "
            "of it), so the state's batch counts would land on other records"
        )
    else:
        head = (
            f"the state was saved reading other data than {source.url} (version "
            f"{now.version}) holds: its fingerprint was {saved[:16]} then and is "
            f"{now.fingerprint[:16]} now (it was written again since, or it is another "
            "snapshot), so the state's batch counts would land on other records"
        )
    current = versions.read(source.fs, storage.join(source.root, MANIFEST_NAME)) or now
    for m in reversed(versions.history(source.fs, source.root, current)):
        if m.fingerprint == saved and (blocks is None or _layout_of(m) == blocks):
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


def unsaveable(state: dict[str, Any], batches: int, workers: int | None) -> str:
    """Why a :class:`~.torch.SnapshotDataset` ``state`` (its step as ``batch``) in epochs of
    ``batches`` steps, its latest DataLoader iteration run in ``workers`` workers, cannot be
    saved ("" if it can): a step past the epoch's end, or a per-rank one within an epoch."""
    if problem := past_the_end(state, batches):
        return problem
    epoch, step = state["epoch"], state["batch"]
    if is_global(state) or not step or not workers or workers <= 1:  # (one worker: as none)
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
