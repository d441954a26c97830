"""The loader in the global order (global_batch_size) and mixtures, on real snapshots: the
same global batches on every world size, exact resume on another, proportions, bad input."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import snapshot_cli as snap
from snapshot_cli.errors import OptionError

G = 12
TAGS = {"a": 1, "b": 2, "c": 3}
SIZES = {"a": 3000, "b": 1100, "c": 530}


def records(tag: int, n: int) -> Iterator[snap.Batch]:
    """``id``: tag * 10**7 + index; ``x``: a float32[3] per record; ``cls``: index // 100."""
    for s in range(0, n, 97):
        k = min(97, n - s)
        ids = np.arange(s, s + k, dtype=np.int64)
        yield snap.Batch(
            id=tag * 10**7 + ids,
            x=np.stack([ids, ids, ids], axis=1).astype(np.float32),
            cls=ids // 100,
        )


def numbered(tag: int, n: int) -> Iterator[snap.Batch]:
    for s in range(0, n, 5000):
        yield snap.Batch(id=tag * 10**7 + np.arange(s, min(n, s + 5000)))


@pytest.fixture(scope="module")
def snaps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, snap.Snapshot]:
    root = tmp_path_factory.mktemp("global")
    out = {}
    for name, tag in TAGS.items():
        n = SIZES[name]
        snap.create(lambda tag=tag, n=n: records(tag, n), str(root / name), workers=0,
                    batch_rows=40, shard_size="16KiB")  # fmt: skip
        out[name] = snap.open(str(root / name))
    return out


def ids_by_step(src: Any, w: int, r: int, steps: int | None = None, **kw: Any) -> list[np.ndarray]:
    loader = src.loader(global_batch_size=G, rank=r, world_size=w, shuffle_buffer=120, **kw)
    out = []
    for batch in loader:
        out.append(batch["id"].copy())
        if steps is not None and len(out) == steps:
            break
    loader.close()
    return out


def same_records(ranks_slices: np.ndarray, batch: np.ndarray) -> bool:
    """The ranks' slices of a step hold the records of the global batch (each rank's slice
    is in an order of its own)."""
    return np.array_equal(np.sort(ranks_slices), np.sort(batch))


@pytest.mark.parametrize("source", ["a", "mix"])
def test_every_world_size_sees_the_same_global_batches(
    snaps: dict[str, snap.Snapshot], source: str
) -> None:
    src: Any = snaps["a"] if source == "a" else snap.mix([snaps["a"], snaps["b"]], [3, 1])
    whole = ids_by_step(src, 1, 0)
    n = src.num_records
    assert len(whole) == math.ceil(n / G)
    for w in (2, 3, 4, 6, 12):
        ranks = [ids_by_step(src, w, r) for r in range(w)]
        for t, batch in enumerate(whole):  # the same records (each rank's in its own order)
            assert same_records(np.concatenate([rk[t] for rk in ranks]), batch), (w, t)
            assert all(len(rk[t]) == G // w for rk in ranks)
    ids = Counter(np.concatenate(whole).tolist())
    assert sum(ids.values()) == len(whole) * G
    if source == "a":  # every record once, and fewer than G of them twice (the padding)
        assert set(ids) == {10**7 + i for i in range(SIZES["a"])}
        assert sum(v - 1 for v in ids.values()) == len(whole) * G - n


@pytest.mark.parametrize("source", ["a", "mix"])
def test_the_global_order_shuffles_like_a_random_sample(
    snaps: dict[str, snap.Snapshot], source: str
) -> None:
    """The snapshot is written in class order (30 classes of 100); a global batch of 12 holds
    about as many distinct classes as 12 records drawn at random would (10.0 on average), and
    in a random order: neighbours share a class about as often as at random (1/30; in the
    order of its atoms, neighbouring stretches of the window, 0.5 did)."""
    src: Any = snaps["a"] if source == "a" else snap.mix([snaps["a"], snaps["b"]], [3, 1])
    distinct = [len(set(b["cls"].tolist())) for b in src.loader(global_batch_size=G,
                                                                 shuffle_buffer=1200)]  # fmt: skip
    assert np.mean(distinct) > 9.0, np.mean(distinct)
    for w in (1, 2):
        loader = src.loader(global_batch_size=60, world_size=w, rank=w - 1, shuffle_buffer=1200)
        batches = [(b["id"] // 10**7 * 100 + b["cls"]).copy() for b in loader]
        same = np.mean([np.mean(b[1:] == b[:-1]) for b in batches])
        assert same < 0.1, (w, same)


@pytest.mark.parametrize(("old", "new"), [(4, 2), (4, 3), (2, 6), (12, 1)])
def test_a_state_saved_on_one_world_size_resumes_on_another(
    snaps: dict[str, snap.Snapshot], old: int, new: int
) -> None:
    s = snaps["a"]
    whole = ids_by_step(s, 1, 0, epochs=2)
    cut = 37  # steps: mid window, mid epoch
    loaders = [s.loader(global_batch_size=G, rank=r, world_size=old, shuffle_buffer=120,
                        epochs=2) for r in range(old)]  # fmt: skip
    seen = []
    for loader in loaders:
        it = iter(loader)
        seen.append([next(it)["id"].copy() for _ in range(cut)])
    states = [loader.state_dict() for loader in loaders]
    assert all(st == states[0] for st in states)  # the state is global: the same on every rank
    for loader in loaders:
        loader.close()
    rest = []
    for r in range(new):
        loader = s.loader(global_batch_size=G, rank=r, world_size=new, shuffle_buffer=120,
                          epochs=2)  # fmt: skip
        loader.load_state_dict(states[0])
        rest.append([b["id"].copy() for b in loader])
    for t in range(cut):
        assert same_records(np.concatenate([rk[t] for rk in seen]), whole[t])
    assert {len(rk) for rk in rest} == {len(whole) - cut}
    for t in range(len(whole) - cut):  # the rest of this epoch, then the next as a new job's
        assert same_records(np.concatenate([rk[t] for rk in rest]), whole[cut + t])


def test_a_mixture_keeps_its_proportions_resumes_and_counts_sources(tmp_path: Path) -> None:
    """Three snapshots of 60k, 25k and 8k records mixed 0.5 / 0.3 / 0.2 over an epoch of
    120,000 records (the third repeated 3x): each source's share of the epoch within 1 %
    of its weight (in every stretch of 200 batches too), exact resume, per-source stats."""
    sizes = [60_000, 25_000, 8_000]
    paths = []
    for tag, n in enumerate(sizes, start=1):
        path = tmp_path / f"s{tag}"
        snap.create(lambda tag=tag, n=n: numbered(tag, n), str(path), workers=0)
        paths.append(str(path))
    weights = [0.5, 0.3, 0.2]
    m = snap.mix(paths, weights, epoch_records=120_000, names=["big", "mid", "small"])
    assert m.counts == [60_000, 36_000, 24_000]
    loader = m.loader(global_batch_size=256, seed=7)
    batches = [b["id"].copy() for b in loader]
    tags = np.concatenate(batches) // 10**7
    share = np.bincount(tags, minlength=4)[1:] / len(tags)
    assert np.allclose(share, weights, atol=0.01), share
    for k in range(0, len(batches) - 200, 200):
        part = np.concatenate(batches[k : k + 200]) // 10**7
        assert np.allclose(np.bincount(part, minlength=4)[1:] / len(part), weights, atol=0.01)
    small = Counter(np.concatenate(batches)[tags == 3].tolist())
    assert set(small.values()) <= {3, 4} and len(small) == sizes[2]  # upsampled 3x
    big = Counter(np.concatenate(batches)[tags == 1].tolist())  # all 60,000, once each
    assert len(big) == sizes[0] and sum(v - 1 for v in big.values()) < 256  # (and padding)
    stats = loader.stats()["sources"]
    assert stats == {"big": int((tags == 1).sum()), "mid": int((tags == 2).sum()),
                     "small": int((tags == 3).sum())}  # fmt: skip
    # exact resume, mid epoch, on another world size
    first = m.loader(global_batch_size=256, seed=7, rank=1, world_size=2)
    it = iter(first)
    for _ in range(100):
        next(it)
    state = first.state_dict()
    first.close()
    again = [m.loader(global_batch_size=256, seed=7, rank=r, world_size=4) for r in range(4)]
    for loader in again:
        loader.load_state_dict(state)
    rest = [[b["id"].copy() for b in loader] for loader in again]
    assert len(rest[0]) == len(batches) - 100
    for t, batch in enumerate(batches[100:]):
        assert same_records(np.concatenate([rk[t] for rk in rest]), batch)


def test_sample_downsamples_and_upsamples(snaps: dict[str, snap.Snapshot]) -> None:
    s = snaps["a"]
    for records in (700, 7000):
        loader = s.sample(records=records).loader(global_batch_size=10)
        ids = np.concatenate([b["id"] for b in loader])
        assert len(ids) == records  # 700 and 7000 are multiples of 10: no padding
        counts = Counter(ids.tolist())
        if records < s.num_records:
            assert max(counts.values()) == 1  # a subset
        else:
            assert set(counts.values()) <= {2, 3} and len(counts) == s.num_records
    half = s.sample(fraction=0.5)
    assert half.epoch_records == s.num_records // 2
    two = [set(np.concatenate([b["id"] for b in half.loader(12, epochs=1, seed=0)]).tolist())]
    loader = half.loader(12, seed=0, epochs=2)
    both = [b["id"] for b in loader]
    per = len(both) // 2
    assert set(np.concatenate(both[:per]).tolist()) == two[0]
    assert set(np.concatenate(both[per:]).tolist()) != two[0]  # another subset next epoch


def test_mixture_columns(snaps: dict[str, snap.Snapshot], tmp_path: Path) -> None:
    other, third = tmp_path / "other", tmp_path / "third"
    snap.create(lambda: iter([snap.Batch(id=np.arange(50, dtype=np.int32), y=np.ones(50))]),
                str(other), workers=0)  # fmt: skip
    snap.create(lambda: iter([snap.Batch(z=np.ones(50))]), str(third), workers=0)
    a = snaps["a"]
    with pytest.raises(OptionError, match=r"column 'id' has different types.*int64.*int32"):
        snap.mix([a, str(other)]).loader(4)
    with pytest.raises(
        OptionError, match=r"column 'x' is missing from the mixed snapshot '.*other'"
    ):
        snap.mix([a, str(other)]).loader(4, columns=["x"])
    with pytest.raises(OptionError, match="no column in common"):
        snap.mix([a, str(third)]).loader(4)
    both = snap.mix([a, snaps["b"]]).loader(4, columns=["x"])
    assert set(next(iter(both))) == {"x"}


@pytest.mark.parametrize(
    ("weights", "match"),
    [
        ([1, -1, 1], "weight 1 is -1"),
        ([0, 0, 0], "every weight is 0"),
        ([1, float("nan"), 1], "weight 1 is nan"),
        ([1, float("inf"), 1], "weight 1 is inf"),
        ([1, 1], "2 weights for 3 snapshots"),
        ([True, 1, 1], "weight 0 is True"),
        ("abc", "weights must be a list"),
        ([1, 10**400, 1], r"weight 1 is 1000.*\.\.\..*0 \(beyond a float's range\): weights"),
        ([Fraction(10**400), 1, 1], r"weight 0 is Fraction\(1000.*\(beyond a float's range\)"),
        ([1, 1, Fraction(-1, 3)], r"weight 2 is Fraction\(-1, 3\): weights"),
    ],
)
def test_bad_weights(snaps: dict[str, snap.Snapshot], weights: Any, match: str) -> None:
    with pytest.raises(OptionError, match=match):
        snap.mix(list(snaps.values()), weights)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.one_of(
            st.integers(min_value=-(10**400), max_value=10**400),
            st.fractions(),
            st.floats(),
            st.booleans(),
            st.text(max_size=3),
            st.none(),
        ),
        min_size=3,
        max_size=3,
    )
)
def test_any_weight_is_taken_or_refused_as_an_option(
    snaps: dict[str, snap.Snapshot], weights: list[Any]
) -> None:
    """Every weight is a mix or an OptionError: an int or Fraction beyond a float's range
    raised OverflowError from the float conversion."""
    try:
        mixed = snap.mix(list(snaps.values()), weights)
    except OptionError as err:
        assert "weight" in str(err) and len(str(err)) < 300  # (not a 400-digit number)
    else:
        assert all(
            isinstance(w, (int, float, Fraction)) and not isinstance(w, bool) for w in weights
        )
        assert len(mixed.loader(4)) > 0


def test_an_empty_snapshot_has_nothing_to_mix_sample_or_batch_globally(tmp_path: Path) -> None:
    snap.create(lambda: iter(()), str(tmp_path / "empty"), workers=0)  # a pipeline that yields none
    empty = snap.open(tmp_path / "empty")
    assert list(empty.loader(4)) == []  # the per-rank order: no batch
    one = f"the snapshot {empty.url} holds"  # (not a list's repr: "['/…'] hold")
    for make, said in (
        (lambda: empty.sample(fraction=0.5), one),  # was a ZeroDivisionError
        (lambda: empty.sample(records=3), one),
        (lambda: snap.mix([empty, empty], names=["a", "b"]), "none of the snapshots a, b holds"),
    ):
        with pytest.raises(OptionError) as refused:
            make()
        assert str(refused.value) == f"{said} records: there is nothing to mix or sample"
    with pytest.raises(OptionError, match=r"an epoch of 0 records \(nothing to read\) holds no"):
        empty.loader(global_batch_size=4)  # was "records per epoch must be >= 0 and not all 0"


def test_bad_global_options_say_what_to_change(snaps: dict[str, snap.Snapshot]) -> None:
    s = snaps["c"]
    with pytest.raises(OptionError, match=r"global_batch_size=12 is not divisible by world_size"
                                          r"=5.* among 1, 2, 3, 4, 6, 12, or"):  # fmt: skip
        s.loader(global_batch_size=12, world_size=5, rank=0)
    with pytest.raises(OptionError, match="not both"):
        s.loader(16, global_batch_size=32)
    for drop_last in (True, False):
        with pytest.raises(OptionError, match=r"holds no global batch of 1024: with drop_last"):
            s.loader(global_batch_size=1024, drop_last=drop_last)
    with pytest.raises(OptionError, match=r"no global batch of 2048 \(batch_size 1024 x 2 ranks"):
        s.sample(fraction=0.5).loader(1024, world_size=2)  # a sample reads in the global order
    with pytest.raises(
        OptionError, match=r"no global batch of 256 \(the default batch_size, 256\)"
    ):
        s.sample(records=50).loader()  # ("batch_size 256 x 1", which no one wrote)
    with pytest.raises(OptionError, match="epoch_records must be an integer >= 1"):
        snap.mix([s], epoch_records=0)
    with pytest.raises(OptionError, match="sample needs records=N or fraction=F"):
        s.sample()
    for bad in (0, -3, 2.5, True):  # 0 said "epoch_records must be ...", a name not given
        with pytest.raises(OptionError, match=rf"^records must be an integer >= 1, got {bad!r}$"):
            s.sample(records=bad)
    assert s.sample(records=np.int64(5)).loader(5).batches_per_epoch() == 1
    with pytest.raises(OptionError, match="fraction must be a number > 0"):
        s.sample(fraction=-0.5)


def test_a_state_from_elsewhere_is_refused(snaps: dict[str, snap.Snapshot]) -> None:
    def state(src: Any, **kw: Any) -> dict[str, Any]:
        loader = src.loader(global_batch_size=G, **kw)
        next(iter(loader))
        out = loader.state_dict()
        loader.close()
        return out

    a, b = snaps["a"], snaps["b"]
    target = a.loader(global_batch_size=G, seed=1)
    for other, keys in [
        (state(b, seed=1), f"saved reading other data than {a.url}"),
        (state(b, seed=2), "other data than .*; .* loader with other seed: "),
        (state(a, seed=2), "seed"),
        (  # (it listed both settings' values: three 64-hex fingerprints)
            state(snap.mix([a, b], [1, 1]), seed=1),
            rf"saved reading a mixture of 2 snapshots \({a.url}, other data, fingerprint "
            rf"{b.manifest.fingerprint[:16]}\), and this loader reads one snapshot "
            rf"\({a.url}\): load it into a loader of the snapshots",
        ),
        (state(a, seed=1, shuffle=False), "shuffle"),
        (a.loader(G, seed=1).state_dict(), "drop_last|order"),
    ]:
        with pytest.raises(OptionError, match=keys) as refused:
            target.load_state_dict(other)
        if "other data" in keys:  # (one snapshot's records follow from its data: not said)
            assert "records_per_epoch" not in str(refused.value), str(refused.value)
    mixed = snap.mix([a, b], [1, 1]).loader(global_batch_size=G, seed=1)
    with pytest.raises(OptionError, match="records_per_epoch") as refused:
        mixed.load_state_dict(state(snap.mix([a, b], [1, 2]), seed=1))
    assert str(refused.value).endswith(  # (of weights, which it did not name)
        "(a mixture's records per epoch, from each snapshot, follow from its weights= and "
        "epoch_records=: give those the state was saved with)"
    )


def test_a_global_batch_of_per_rank_batches_resumed_on_other_ranks_says_what_to_give(
    snaps: dict[str, snap.Snapshot],
) -> None:
    """batch_size=6 on 2 ranks saved global_batch_size=12, and on 3 ranks the refusal named
    only global_batch_size, 12 against 18, a setting the user never gave."""
    mixture = snap.mix([snaps["a"], snaps["b"]], weights=[0.7, 0.3])
    loader = mixture.loader(6, rank=0, world_size=2)
    next(iter(loader))
    saved = loader.state_dict()
    with pytest.raises(OptionError, match="the state's global_batch_size=12") as refused:
        mixture.loader(6, rank=0, world_size=3).load_state_dict(saved)
    assert str(refused.value).endswith(
        "(a loader given batch_size=, per rank, reads global batches of batch_size x world_size:"
        " on 3 ranks, batch_size=4 or global_batch_size=12 resumes it)"
    )
    mixture.loader(4, rank=0, world_size=3).load_state_dict(saved)  # as it says
    with pytest.raises(OptionError, match="resume on a world size that divides 12, with that"):
        mixture.loader(6, rank=0, world_size=5).load_state_dict(saved)


def test_stats_count_every_source_of_any_mixture(snaps: dict[str, snap.Snapshot]) -> None:
    """A snapshot mixed with itself counted as one source (the second's count), and a
    sample or a mixture of one counted 0 records."""
    a = snaps["a"]
    for mixture, want in [
        (snap.mix([a, a], weights=[0.75, 0.25], epoch_records=400), [300, 100]),
        (a.sample(fraction=0.5), [a.num_records // 2]),
        (snap.mix([a]), [a.num_records]),
        (snap.mix([a], epoch_records=3 * a.num_records), [3 * a.num_records]),
    ]:
        loader = mixture.loader(global_batch_size=50)
        delivered = sum(len(b["id"]) for b in loader)
        counted = loader.stats()["sources"]
        assert list(counted.values()) == want and sum(want) == delivered, counted
        assert len(counted) == len(want)  # (one key each: "url", "url#2")


def test_a_mixture_given_where_a_snapshot_goes_says_how_to_read_it(
    snaps: dict[str, snap.Snapshot],
) -> None:
    """SnapshotDataset(snap.mix(...)): "TypeError: expected str, bytes or os.PathLike
    object, not Mixture"."""
    from snapshot_cli.readers.torch import SnapshotDataset

    mixture = snap.mix([snaps["a"], snaps["a"]])
    with pytest.raises(snap.OptionError, match=r"not a Mixture; .*mixture.loader\(...\)"):
        SnapshotDataset(mixture, global_batch_size=64)
    with pytest.raises(snap.OptionError, match="not an int"):
        snap.open(3)  # type: ignore[arg-type]


def test_a_state_refused_for_its_order_or_its_columns_says_what_to_give(
    snaps: dict[str, snap.Snapshot],
) -> None:
    """A mixture's state loaded with its sources in another order was blamed on each
    snapshot's data being rewritten; a resume reading fewer columns was "other window_rows",
    an option no user sets."""
    a, b = snaps["a"], snaps["b"]
    loader = snap.mix([a, b], weights=[0.7, 0.3]).loader(global_batch_size=20)
    next(iter(loader))
    swapped = snap.mix([b, a], weights=[0.3, 0.7]).loader(global_batch_size=20)
    with pytest.raises(snap.OptionError, match=r"same snapshots in another order: give them as"):
        swapped.load_state_dict(loader.state_dict())
    kw = {"global_batch_size": 20, "seed": 0, "shuffle_buffer": "2KiB"}  # (not the epoch:
    loader = a.loader(**kw)  # where both windows hold it, the order is the same, and a state
    next(iter(loader))  # resumes: test_resume_identity.py)
    fewer = a.loader(**kw, columns=["id"])  # (a window of more records)
    assert fewer.state_dict()["config"]["window_rows"] < a.manifest.num_records
    with pytest.raises(snap.OptionError, match=r"resume with the same columns= and shuffle"):
        fewer.load_state_dict(loader.state_dict())


@pytest.mark.parametrize("weights", [[0, 1], None])
@pytest.mark.parametrize("columns", [None, ["id"]])
def test_an_empty_snapshot_with_no_weight_is_left_out_of_a_mixture(
    snaps: dict[str, snap.Snapshot], tmp_path: Path, weights: list[int] | None, columns: Any
) -> None:
    """An empty snapshot, switched off with the weight 0 its refusal asked for, was refused
    again for the columns it has not ("hold no records, so no columns"; with columns=,
    "column 'id' is missing from the mixed snapshot"): it gives no records, so its columns
    do not count."""

    def nothing(i: int) -> Iterator[dict[str, Any]]:
        return iter(())

    snap.create(nothing, str(tmp_path / "empty"), inputs=[0], workers=0)
    mixed = snap.mix([str(tmp_path / "empty"), snaps["a"].url], weights=weights)
    assert mixed.schema.names == snaps["a"].schema.names
    batches = list(mixed.loader(global_batch_size=G, columns=columns, drop_last=True))
    assert {tuple(b) for b in batches} == {tuple(columns or snaps["a"].schema.names)}
    ids = np.concatenate([b["id"] for b in batches])
    assert np.array_equal(np.sort(ids), 10**7 + np.arange(SIZES["a"]))  # (3,000: 12 divides)
    with pytest.raises(OptionError, match="holds no records but a weight above 0: give it"):
        snap.mix([str(tmp_path / "empty"), snaps["a"].url], weights=[1, 1])
