"""``loader.to_tf()``: elements for Keras, known cardinality, exact resume, fresh shuffles.

TensorFlow runs in one subprocess (as in test_adapters.py: loaded beside torch and a JVM in
the test process its threads slowed later tests and could crash the interpreter at exit).
The script below runs every check there and prints what it saw as JSON; the tests here
compare that with what plain numpy loaders give for the same settings. Column validation
needs no TensorFlow and is tested in this process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

import snapshot_cli as snap
from snapshot_cli.errors import OptionError
from tests.readers.conftest import numbered_snapshot

RECORDS = 240
BATCH = 32  # 7 full batches and one of 16 per epoch
PER_EPOCH = -(-RECORDS // BATCH)


@pytest.fixture(scope="module")
def snapshot_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    record = (
        '{"id": np.int64(n), "label": np.int64(n % 3), '
        '"image": n + np.arange(6, dtype=np.float32).reshape(2, 3) / 8, '
        '"tokens": np.arange(n % 5 + 1, dtype=np.int32), "name": f"r{n}"}'
    )
    return numbered_snapshot(tmp_path_factory.mktemp("tf"), RECORDS, record, "8KiB")


# --- what TensorFlow saw (one subprocess for every check) ----------------------------------

TF_CHECKS = r'''
import json, sys, traceback
import numpy as np
import tensorflow as tf
import snapshot_cli as snap
from snapshot_cli.errors import OptionError

s = snap.open(sys.argv[1])
BATCH = int(sys.argv[2])


def ids(x):
    """Record ids of a batch: from the "id" column, or from the image (its [0, 0] is the id)."""
    if isinstance(x, dict):
        x = x["id"] if "id" in x else x["image"]
    x = x.numpy()
    return (x[:, 0, 0] if x.ndim == 3 else x).astype(np.int64).tolist()


def first_batch_ids(ds):
    return ids(next(iter(ds))[0])


def check_elements():
    out = {}
    ds = s.loader(BATCH, seed=3).to_tf(features="image", label="label")
    x_spec, y_spec = ds.element_spec
    out["spec"] = [x_spec.shape.as_list(), x_spec.dtype.name, y_spec.shape.as_list(),
                   y_spec.dtype.name]
    out["image"] = [x.numpy().tolist() for x, _ in ds]
    ds = s.loader(BATCH, seed=3).to_tf(features="image", label="label")
    out["label"] = [y.numpy().tolist() for _, y in ds]
    # features=None with a label: every other column, ragged and strings included
    ds = s.loader(BATCH, seed=3).to_tf(label="label")
    x, y = next(iter(ds))
    out["none_label_keys"] = sorted(x)
    out["none_label"] = {"id": x["id"].numpy().tolist(), "label": y.numpy().tolist(),
                         "tokens": x["tokens"].to_list(),
                         "name": [v.decode() for v in x["name"].numpy()],
                         "ragged": isinstance(x["tokens"], tf.RaggedTensor)}
    ds = s.loader(BATCH, seed=3).to_tf(features=["id", "image"], label="label")
    x, y = next(iter(ds))
    out["list_label"] = [sorted(x), x["id"].numpy().tolist(), y.numpy().tolist()]
    ds = s.loader(BATCH, seed=3).to_tf(features="id")
    x = next(iter(ds))
    out["str_only"] = [isinstance(x, tf.Tensor), x.numpy().tolist()]
    ds = s.loader(BATCH, seed=3).to_tf()
    x = next(iter(ds))
    out["all_only"] = [sorted(x), x["id"].numpy().tolist(), x["name"].numpy()[0].decode()]
    ds = s.loader(BATCH, seed=3, columns=["id", "tokens"]).to_tf(features=["tokens"])
    out["columns_subset"] = sorted(next(iter(ds)))
    try:
        s.loader(BATCH).to_tf(features="nope", label="label")
    except OptionError as err:
        out["error"] = str(err)
    return out


def check_cardinality():
    out = {}
    for name, options in {"epochs1": {}, "epochs2": {"epochs": 2},
                          "drop_last": {"drop_last": True}}.items():
        loader = s.loader(BATCH, **options)
        ds = loader.to_tf(features="image", label="label")
        out[name] = [int(ds.cardinality()), len(ds), len(loader), len(list(ds))]
    ds = s.loader(BATCH, epochs=None).to_tf(features="image")
    out["endless"] = [int(ds.cardinality()), int(tf.data.INFINITE_CARDINALITY),
                      len(list(ds.take(3 * 8 + 2)))]
    return out


def check_no_read_ahead():
    """Batches the loader has handed to TensorFlow after the consumer received k."""
    out = {"ours": [], "bare": [], "default_from_generator": []}
    ds = s.loader(BATCH, seed=1).to_tf(features="image", label="label")
    options = ds.options()
    out["options"] = [options.experimental_optimization.inject_prefetch,
                      options.autotune.enabled]
    it = iter(ds)
    out["loader"] = []
    for _ in range(5):
        next(it)
        out["ours"].append(ds.state_dict()["batch"])
        out["bare"].append(ds.loader.state_dict()["batch"])  # the loader says the consumer's
        ahead = ds.loader._position()  # where the loader itself is
        out["loader"].append(ahead["epoch"] * len(ds.loader) + ahead["batch"])
    # what tf.data does with its default options: the reason to_tf turns inject_prefetch off
    loader = s.loader(BATCH, seed=1)
    spec = {"id": tf.TensorSpec((None,), tf.int64)}
    plain = tf.data.Dataset.from_generator(lambda: ({"id": b["id"]} for b in loader),
                                           output_signature=spec)
    it = iter(plain)
    for _ in range(5):
        next(it)
        out["default_from_generator"].append(loader.state_dict()["batch"])
    return out


def check_resume():
    """3 passes uninterrupted vs. 1 + 3 batches, state saved, 3 passes of a new loader."""
    options = dict(seed=11)
    full = s.loader(BATCH, **options).to_tf(features="image", label="label")
    uninterrupted = [[ids(x) for x, _ in full] for _ in range(3)]
    ds = s.loader(BATCH, **options).to_tf(features="image", label="label")
    got = [[ids(x) for x, _ in ds]]
    part = []
    for x, _ in ds:
        part.append(ids(x))
        if len(part) == 3:
            state = ds.state_dict()
            break
    got.append(part)
    state = json.loads(json.dumps(state))  # as saved to disk
    resumed = s.loader(BATCH, **options).to_tf(features="image", label="label")
    resumed.load_state_dict(state)
    passes = [[ids(x) for x, _ in resumed] for _ in range(3)]
    return {"uninterrupted": uninterrupted, "before": got, "state": state,
            "resumed": passes, "cardinality": int(resumed.cardinality()),
            "state_after": resumed.state_dict()}


def check_handover():
    """A dataset's loop broken off after 3 batches, a new dataset over the same loader (a
    notebook cell run again), then the loader itself: the new dataset began at batch 8 (the
    first dataset's chunk taken ahead) and the loader after it at 16."""
    loader = s.loader(BATCH, seed=17)
    got = [ids(x) for x in loader.to_tf(features="id").take(3)]
    got += [ids(x) for x in loader.to_tf(features="id").take(2)]
    got.append(next(iter(loader))["id"].tolist())
    return {"got": got}


def check_resume_from_a_pass_end():
    """States taken at the end of a pass: the last step's checkpoint inside the loop, and
    the state after the loop (Keras's end-of-epoch checkpoint), each resumed in a new
    dataset; and the same dataset given its own state back."""
    options = dict(seed=13)
    ds = s.loader(BATCH, **options).to_tf(features="id")
    first = []
    for x in ds:
        first.append(ids(x))
        last_step = json.loads(json.dumps(ds.state_dict()))
    after_loop = json.loads(json.dumps(ds.state_dict()))
    out = {"first": first}
    for name, state in (("last_step", last_step), ("after_loop", after_loop)):
        resumed = s.loader(BATCH, **options).to_tf(features="id")
        resumed.load_state_dict(state)
        out[name] = [[ids(x) for x in resumed] for _ in range(2)]
    ds.load_state_dict(ds.state_dict())
    out["own_state"] = [ids(x) for x in ds]
    return out


def check_break_and_iterate_again():
    ds = s.loader(BATCH, seed=4).to_tf(features="image")
    first = []
    for x in ds:
        first.append(ids(x))
        if len(first) == 5:
            break
    second = [ids(x) for x in ds]
    return {"first": first, "second": second}


def check_set_epoch_stats_close():
    ds = s.loader(BATCH, seed=6).to_tf(features="id")
    ds.set_epoch(5)
    epoch5 = [ids(x) for x in ds]
    running = ds.loader._run is not None  # its threads (other checks' loaders run on here)
    stats = ds.stats()
    it = iter(ds)
    next(it)
    ds.load_state_dict(ds.state_dict())
    try:
        next(it)
        superseded = "no error"
    except tf.errors.OpError as err:
        superseded = err.message
    ds.close()
    return {"epoch5": epoch5, "running_after_pass": running,
            "batches": stats["batches"], "records": stats["records"],
            "superseded": superseded, "after_close": len(list(ds))}


def check_loader_between_passes():
    """A pass of the dataset, one of the bare loader, the dataset again (device.py's order):
    the third pass was empty, the dataset putting the loader back to where its consumer was
    before the loader moved on by itself."""
    loader = s.loader(BATCH, seed=8)
    ds = loader.to_tf(features="id")
    first = [ids(x) for x in ds]
    bare = [b["id"].tolist() for b in loader]
    third = [ids(x) for x in ds]
    return {"passes": [first, bare, third], "state": ds.state_dict()["epoch"]}


def check_dropped_iterators_free_their_loader():
    """An iterator dropped mid-pass (a Keras epoch cut short), its dataset and loader with
    it: TensorFlow kept the dataset's functions, which held the loader's pass running."""
    import gc, weakref
    freed = []
    for seed in range(3):
        loader = s.loader(BATCH, seed=seed)
        ds = loader.to_tf(features="id")
        it = iter(ds)
        next(it), next(it)
        context = weakref.ref(loader._context)
        del it, ds, loader
        gc.collect()
        freed.append(context() is None)
    return {"freed": freed}


def check_a_pass_broken_off_keeps_its_threads_until_closed():
    """TensorFlow says nothing when a loop breaks off (README, to_tf()): the pass keeps its
    threads until the next pass, ds.close() or the dataset dropped; never two passes'."""
    import threading

    def snaps():
        return sorted(t.name for t in threading.enumerate() if t.name.startswith("snap-"))

    ds = s.loader(BATCH, seed=5).to_tf(features="id")
    for i, _ in enumerate(ds):
        if i == 2:
            break
    after_break = snaps()
    for i, _ in enumerate(ds):
        if i == 2:
            break
    after_second = snaps()
    ds.close()
    return {"after_break": after_break, "after_second": after_second, "closed": snaps()}


def check_keras_fit():
    import keras

    ds = s.loader(BATCH, seed=2).to_tf(features="image", label="label")
    model = keras.Sequential([keras.Input((2, 3)), keras.layers.Flatten(),
                              keras.layers.Dense(3, activation="softmax")])
    model.compile("adam", "sparse_categorical_crossentropy")
    history = model.fit(ds, epochs=2, verbose=0)
    state = ds.state_dict()
    return {"epochs": len(history.history["loss"]), "steps": history.params["steps"],
            "finite": bool(np.isfinite(history.history["loss"]).all()),
            "state": [state["epoch"], state["batch"]]}


def check_map_arrays_are_copied_or_shared():
    """A map may return arrays TensorFlow cannot share (unaligned, strided): copied then."""
    def odd(batch):
        raw = np.empty(batch["image"].nbytes + 1, np.uint8)[1:]  # unaligned
        image = raw.view(np.float32).reshape(batch["image"].shape)
        image[...] = batch["image"]
        wide = np.repeat(batch["id"], 2)[::2]  # strided
        return {"image": image, "id": wide, "label": batch["label"]}

    got = [(ids(x), ids(x["image"]), y.numpy().tolist()) for x, y in
           s.loader(BATCH, seed=8, map=odd).to_tf(features=["image", "id"], label="label")]
    return {"ids": [g[0] for g in got], "image_ids": [g[1] for g in got],
            "labels": [g[2] for g in got]}


def check_map_sets_the_columns():
    """With a map, the elements are what the map returns (columns added, dtypes and shapes
    changed), taken from its first batch; the loader's position is left where it was."""
    def crop(batch):
        return {"id": batch["id"], "small": batch["image"][:, :1, :2].copy(),
                "y": batch["label"].astype(np.float32)}

    loader = s.loader(BATCH, seed=5, map=crop)
    ds = loader.to_tf(label="y")
    x_spec, y_spec = ds.element_spec
    got = [(ids(x), x["small"].shape.as_list(), y.dtype.name) for x, y in ds]
    # Whether a batch is the stream's first (whose map output makes the spec): by its ids,
    # not by the map's calls, which the map threads make in any order (a map that changed
    # from its second call changed the first batch now and then)
    head = int(next(iter(s.loader(BATCH, seed=5)))["id"][0])

    def later(batch):
        return int(batch["id"][0]) != head

    def varying(batch):
        return {"id": batch["id"][:, None].repeat(1 + later(batch), axis=1)}

    def adding(batch):  # a column from the second batch on: it was dropped without a word
        return {"id": batch["id"], **({"late": batch["label"]} if later(batch) else {})}

    def ragged_dtype(batch):  # a ragged column of ints, then floats: it was cast (1.5 -> 1)
        rows = np.empty(len(batch["id"]), object)
        rows[:] = [np.arange(n % 3 + 1) * (1.5 if later(batch) else 1) for n in batch["id"]]
        return {"id": batch["id"], "r": rows}

    def ragged_ndim(batch):  # 1-D arrays, then 2-D: TensorFlow's own error named no column
        rows = np.empty(len(batch["id"]), object)
        rows[:] = [np.zeros((n % 3 + 1,) * (2 if later(batch) else 1)) for n in batch["id"]]
        return {"id": batch["id"], "r": rows}

    error = []  # each map's first line naming the column (None: no error)
    for changing in (varying, adding, ragged_dtype, ragged_ndim):
        try:
            list(s.loader(BATCH, seed=5, map=changing).to_tf())
            error.append(None)
        except tf.errors.InvalidArgumentError as err:
            lines = [line for line in str(err).splitlines() if "map returned column" in line]
            error.append(lines[0] if lines else str(err))
    return {"keys": sorted(x_spec), "small": x_spec["small"].shape.as_list(),
            "y": [y_spec.shape.as_list(), y_spec.dtype.name], "ids": [g[0] for g in got],
            "shapes": sorted({str(g[1]) for g in got}), "dtypes": sorted({g[2] for g in got}),
            "error": error}


def check_map_lists():
    """A map's lists: of bytes ending in NULs, of text, and of arrays of several shapes."""
    def lists(batch):
        ids = batch["id"].tolist()
        return {"id": batch["id"], "raw": [np.int32(n).tobytes() for n in ids],
                "text": [f"t{n}\x00" for n in ids], "tokens": [np.arange(n % 4) for n in ids]}

    ds = s.loader(BATCH, seed=6, map=lists).to_tf()
    got = [(ids(b), [r.hex() for r in b["raw"].numpy().tolist()],
            [t.decode() for t in b["text"].numpy().tolist()], b["tokens"].to_list()) for b in ds]
    spec = ds.element_spec["tokens"]
    return {"ids": [g[0] for g in got], "raw": [g[1] for g in got], "text": [g[2] for g in got],
            "tokens": [g[3] for g in got],
            "spec": [spec.shape.as_list(), spec.dtype.name, spec.ragged_rank]}


def check_sharing():
    """The loader's numeric arrays reach TensorFlow without a copy; others are left to it."""
    from snapshot_cli.readers.tf import output_signature, to_tensor

    loader = s.loader(BATCH, seed=1)
    spec = output_signature(loader)
    batch = next(iter(loader))
    image = to_tensor(batch["image"], spec["image"])
    label = to_tensor(batch["label"], spec["label"])
    batch["image"][0, 0, 0], batch["label"][1] = -7.0, 99
    unaligned = np.empty(batch["image"].nbytes + 1, np.uint8)[1:].view(np.float32)
    return {"shared": [float(image[0, 0, 0]), int(label[1])],
            "tensor": isinstance(image, tf.Tensor),
            "unaligned_left_as_is": to_tensor(unaligned, spec["image"]) is unaligned}


def check_ragged_of_any_rank():
    """Ragged columns of 1, 2 and 3 dimensions, every dimension varying between records (a
    2-D one failed: "Tensor's shape (10, 2) is not compatible with supplied shape (None,)"),
    from the schema and from what a map returns."""
    import tempfile

    def records():
        for n in range(40):
            yield {"id": n, "r1": np.arange(n % 4, dtype=np.int32),
                   "r2": np.arange((n % 3 + 1) * (n % 2 + 1), dtype=np.float32).reshape(
                       n % 3 + 1, n % 2 + 1) + n,
                   "r3": np.full((n % 2 + 1, n % 3, 2), n, np.int16)}

    tmp = tempfile.TemporaryDirectory()  # removed when the check returns
    out = tmp.name + "/ragged"
    snap.create(snap.ragged("r1", "r2", "r3")(records), out, workers=0)
    got, specs = {}, None
    ds = snap.open(out).loader(8, seed=3).to_tf()
    specs = {k: [v.shape.as_list(), v.ragged_rank] for k, v in ds.element_spec.items()
             if k != "id"}
    for x in ds:
        for i, n in enumerate(x["id"].numpy().tolist()):
            got[str(n)] = {k: x[k][i : i + 1].to_list()[0] for k in ("r1", "r2", "r3")}

    def pairs(batch):  # a map making a 2-D ragged column of its own
        p = np.empty(len(batch["id"]), object)
        for j, r in enumerate(batch["r1"]):
            p[j] = np.stack([r, r])
        return {"id": batch["id"], "p": p}

    mapped = {}
    for x in snap.open(out).loader(8, seed=3, map=pairs).to_tf():
        for i, n in enumerate(x["id"].numpy().tolist()):
            mapped[str(n)] = x["p"][i : i + 1].to_list()[0]
    return {"got": got, "specs": specs, "mapped": mapped}


def check_lists_of_text():
    """A list of str per record (captions; none for some) had no TensorFlow form: it is a
    ragged tf.string tensor, from the schema and from what a map returns."""
    import tempfile

    def records():
        for n in range(30):
            yield {"id": n, "caps": np.array([f"c{n}.{k}" for k in range(n % 3)], dtype=str)}

    tmp = tempfile.TemporaryDirectory()  # removed when the check returns
    out = tmp.name + "/caps"
    snap.create(records, out, workers=0)
    got, mapped = {}, {}
    ds = snap.open(out).loader(8, seed=1).to_tf()
    spec = ds.element_spec["caps"]
    for x in ds:
        for i, n in enumerate(x["id"].numpy().tolist()):
            got[str(n)] = [c.decode() for c in x["caps"][i : i + 1].to_list()[0]]
    for x in snap.open(out).loader(8, seed=1, map=lambda b: b).to_tf():
        for i, n in enumerate(x["id"].numpy().tolist()):
            mapped[str(n)] = [c.decode() for c in x["caps"][i : i + 1].to_list()[0]]
    return {"spec": [spec.shape.as_list(), spec.dtype.name, spec.ragged_rank],
            "got": got, "mapped": mapped}


def check_map_ints():
    """A map's list of ints numpy would round, and numpy's ulonglong uint64 (test_adapters)."""
    out = {}
    for name, values in (("big", [2**63 + 1, -1, -1, -1]), ("beside", [2**53 + 1, 0.5, 0.5, 0.5]),
                         ("past", [2**70] * 4)):
        try:
            s.loader(4, shuffle=False, columns=["id"], map=lambda b, v=values: {"v": v}).to_tf()
            out[name] = None
        except TypeError as err:
            out[name] = str(err)
    top = np.asarray([2**64 - 1] * 4)
    v = next(iter(s.loader(4, shuffle=False, columns=["id"], map=lambda b: {"v": top}).to_tf()))
    out["ulonglong"] = [v["v"].dtype.name, [int(x) for x in v["v"].numpy().tolist()]]
    return out


def check_stats_count_what_tensorflow_took():
    ds = s.loader(BATCH, seed=3).to_tf(features="id")
    it = iter(ds)
    next(it)
    return ds.stats()["batches"]


def check_map_stats():
    loader = s.loader(BATCH, seed=2, map=lambda b: b)
    passes = [sum(1 for _ in loader.to_tf())]
    stats = loader.stats()
    return {"batches": passes, "stats": [stats["records"], stats["batches"]]}


results = {}
for name, fn in list(globals().items()):
    if name.startswith("check_"):
        try:
            results[name[6:]] = fn()
        except BaseException:
            results[name[6:]] = {"traceback": traceback.format_exc()}
print(json.dumps(results))
'''


@pytest.fixture(scope="module")
def tf_results(snapshot_url: str) -> dict[str, Any]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    res = subprocess.run([sys.executable, "-c", TF_CHECKS, snapshot_url, str(BATCH)], env=env,
                         capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _result(results: dict[str, Any], name: str) -> Any:
    out = results[name]
    if isinstance(out, dict) and "traceback" in out:
        pytest.fail(f"the TensorFlow check {name!r} raised:\n{out['traceback']}")
    return out


def _stream(url: str, passes: int, **options: Any) -> list[list[int]]:
    """Record ids per batch of ``passes`` passes of a plain numpy loader."""
    loader = snap.open(url).loader(BATCH, **options)
    return [b["id"].tolist() for _ in range(passes) for b in loader]


# --- elements -------------------------------------------------------------------------------


def test_features_and_label_give_what_keras_expects(
    snapshot_url: str, tf_results: dict[str, Any]
) -> None:
    out = _result(tf_results, "elements")
    assert out["spec"] == [[None, 2, 3], "float32", [None], "int64"]
    expected = list(snap.open(snapshot_url).loader(BATCH, seed=3))
    assert len(out["image"]) == len(expected) == PER_EPOCH
    for image, label, batch in zip(out["image"], out["label"], expected, strict=True):
        np.testing.assert_array_equal(np.asarray(image, np.float32), batch["image"])
        assert label == batch["label"].tolist()


def test_features_none_list_and_str(snapshot_url: str, tf_results: dict[str, Any]) -> None:
    out = _result(tf_results, "elements")
    first = next(iter(snap.open(snapshot_url).loader(BATCH, seed=3)))
    ids = first["id"].tolist()
    assert out["none_label_keys"] == ["id", "image", "name", "tokens"]  # all but the label
    none_label = out["none_label"]
    assert none_label["id"] == ids and none_label["label"] == [n % 3 for n in ids]
    assert none_label["ragged"] is True
    assert none_label["tokens"] == [list(range(n % 5 + 1)) for n in ids]
    assert none_label["name"] == [f"r{n}" for n in ids]
    assert out["list_label"] == [["id", "image"], ids, [n % 3 for n in ids]]
    assert out["str_only"] == [True, ids]  # one column and no label: a bare tensor
    assert out["all_only"] == [["id", "image", "label", "name", "tokens"], ids, f"r{ids[0]}"]
    assert out["columns_subset"] == ["tokens"]
    assert "unknown feature column 'nope'" in out["error"]


@pytest.mark.parametrize(
    ("options", "features", "label", "message"),
    [
        ({}, "nope", "label", "unknown feature column 'nope'; the loader reads ['id', 'label'"),
        ({}, ["image", "nope"], None, "unknown feature column 'nope'"),
        ({}, "image", "lbl", "unknown label column 'lbl'; the loader reads ['id', 'label'"),
        ({}, ["image", "label"], "label", "column 'label' is both the label and a feature"),
        ({}, "label", "label", "choose features from ['id', 'image', 'tokens', 'name']"),
        ({"columns": ["id", "label"]}, "image", "label",
         "feature column 'image' is not read by this loader, which reads ['id', 'label']"),
        ({"columns": ["id", "image"]}, "image", "label",
         "label column 'label' is not read by this loader, which reads ['id', 'image']"),
        ({"columns": ["label"]}, None, "label", "no feature columns"),
        ({}, [], None, "features must be a column name, a non-empty list"),
        ({}, 3, None, "features must be a column name"),
        ({}, ["id", "id"], None, "features name ['id'] more than once"),
        ({}, "id", ["label"], "label must be a column name (a str)"),
    ],
)  # fmt: skip
def test_bad_columns_fail_at_construction(
    snapshot_url: str, options: dict[str, Any], features: Any, label: Any, message: str
) -> None:
    loader = snap.open(snapshot_url).loader(BATCH, **options)
    imported = "tensorflow" in sys.modules
    with pytest.raises(OptionError) as err:
        loader.to_tf(features=features, label=label)
    assert message in str(err.value)
    assert imported or "tensorflow" not in sys.modules  # checked before importing TensorFlow


def test_a_snapshot_of_no_records_says_so(tmp_path: Any) -> None:
    """It blamed a label never given: "the loader reads only [], all taken by the label"."""
    snap.create(lambda: [], str(tmp_path / "empty"), workers=0)
    with pytest.raises(OptionError) as err:
        snap.open(str(tmp_path / "empty")).loader(4).to_tf()
    assert "the snapshot has no columns (it holds no records" in str(err.value)
    assert "label" not in str(err.value)


# --- passes, cardinality, resume ----------------------------------------------------------


def test_cardinality_is_len_of_the_loader(tf_results: dict[str, Any]) -> None:
    out = _result(tf_results, "cardinality")
    # [ds.cardinality(), len(ds), len(loader), batches in a pass]
    assert out["epochs1"] == [PER_EPOCH] * 4
    assert out["epochs2"] == [2 * PER_EPOCH] * 4
    assert out["drop_last"] == [RECORDS // BATCH] * 4
    assert out["endless"] == [-1, -1, 3 * 8 + 2]


def test_state_is_where_the_consumer_is_though_tf_takes_batches_in_chunks(
    tf_results: dict[str, Any],
) -> None:
    """TensorFlow takes CHUNK batches per call into Python (what a call costs it is paid
    once per chunk); the state still points at the first batch the consumer has not
    received, not at the loader's position, which is up to CHUNK - 1 batches ahead."""
    from snapshot_cli.readers.tf import CHUNK

    out = _result(tf_results, "no_read_ahead")
    assert out["ours"] == out["bare"] == [1, 2, 3, 4, 5]
    assert out["loader"] == [min(CHUNK, PER_EPOCH)] * 5  # the first chunk, taken at once
    assert out["options"] == [False, False]  # no injected prefetch, no autotuning thread
    # For the record: tf.data's default options read ahead (inject_prefetch); not asserted,
    # TensorFlow may change it, and to_tf turns it off either way.
    assert len(out["default_from_generator"]) == 5


def test_a_new_dataset_or_the_loader_goes_on_where_a_dataset_s_consumer_stopped(
    snapshot_url: str, tf_results: dict[str, Any]
) -> None:
    got = _result(tf_results, "handover")["got"]
    assert got == _stream(snapshot_url, 1, seed=17)[:6]


def test_resume_is_exact_and_every_pass_has_len_batches(
    snapshot_url: str, tf_results: dict[str, Any]
) -> None:
    out = _result(tf_results, "resume")
    numpy_stream = _stream(snapshot_url, 6, seed=11)
    uninterrupted = [b for p in out["uninterrupted"] for b in p]
    assert uninterrupted == numpy_stream[: 3 * PER_EPOCH]  # the loader's own batches
    assert [len(p) for p in out["before"]] == [PER_EPOCH, 3]
    assert (out["state"]["epoch"], out["state"]["batch"]) == (1, 3)
    assert out["cardinality"] == PER_EPOCH
    # a resumed pass starts at the saved batch and runs into the next epoch: len() batches
    assert [len(p) for p in out["resumed"]] == [PER_EPOCH] * 3
    got = [b for p in out["before"] + out["resumed"] for b in p]
    assert got == numpy_stream[: len(got)]  # nothing skipped, nothing repeated
    for epoch in range(4):  # each snap epoch still holds every record once
        records = sorted(n for b in got[epoch * PER_EPOCH : (epoch + 1) * PER_EPOCH] for n in b)
        assert records == list(range(RECORDS))
    assert (out["state_after"]["epoch"], out["state_after"]["batch"]) == (4, 3)


def test_a_state_taken_at_a_pass_end_resumes_with_the_next_epoch(
    snapshot_url: str, tf_results: dict[str, Any]
) -> None:
    """A checkpoint at the last step of a pass, or after it (as Keras saves at an epoch's
    end), resumes with the next epoch, ``len()`` batches a pass (it gave TensorFlow's
    "expected to contain 8 elements but contained only 0")."""
    out = _result(tf_results, "resume_from_a_pass_end")
    stream = _stream(snapshot_url, 3, seed=13)
    assert out["first"] == stream[:PER_EPOCH]
    for name in ("last_step", "after_loop"):
        assert [len(p) for p in out[name]] == [PER_EPOCH, PER_EPOCH]
        assert [b for p in out[name] for b in p] == stream[PER_EPOCH:], name
    assert out["own_state"] == stream[PER_EPOCH : 2 * PER_EPOCH]


def test_every_pass_is_a_fresh_shuffle(tf_results: dict[str, Any]) -> None:
    out = _result(tf_results, "resume")
    passes = out["uninterrupted"]
    flat = [sorted(n for b in p for n in b) for p in passes]
    assert flat == [list(range(RECORDS))] * 3
    orders = [[n for b in p for n in b] for p in passes]
    assert orders[0] != orders[1] != orders[2] != orders[0]


def test_a_pass_broken_off_and_started_again(snapshot_url: str, tf_results: dict[str, Any]) -> None:
    out = _result(tf_results, "break_and_iterate_again")
    assert len(out["first"]) == 5 and len(out["second"]) == PER_EPOCH
    assert out["first"] + out["second"] == _stream(snapshot_url, 2, seed=4)[: 5 + PER_EPOCH]


def test_set_epoch_stats_and_a_superseded_iterator(
    snapshot_url: str, tf_results: dict[str, Any]
) -> None:
    out = _result(tf_results, "set_epoch_stats_close")
    loader = snap.open(snapshot_url).loader(BATCH, seed=6)
    loader.set_epoch(5)
    assert out["epoch5"] == [b["id"].tolist() for b in loader]
    assert out["running_after_pass"] is False  # a pass run to its end stops the loader's threads
    assert out["batches"] == PER_EPOCH and out["records"] == RECORDS
    assert "superseded" in out["superseded"]
    assert out["after_close"] == PER_EPOCH


def test_the_bare_loader_between_two_passes(snapshot_url: str, tf_results: dict[str, Any]) -> None:
    out = _result(tf_results, "loader_between_passes")
    assert out["passes"] == [
        [b["id"].tolist() for b in loader_pass] for loader_pass in _passes(snapshot_url, 3, seed=8)
    ]  # each the loader's next epoch, len(loader) batches
    assert out["state"] == 3


def _passes(url: str, passes: int, **options: Any) -> list[list[dict[str, Any]]]:
    loader = snap.open(url).loader(BATCH, **options)
    return [list(loader) for _ in range(passes)]


def test_a_dropped_iterator_frees_its_loader(tf_results: dict[str, Any]) -> None:
    assert _result(tf_results, "dropped_iterators_free_their_loader")["freed"] == [True] * 3


def test_a_pass_broken_off_stops_its_threads_when_closed(tf_results: dict[str, Any]) -> None:
    out = _result(tf_results, "a_pass_broken_off_keeps_its_threads_until_closed")
    assert len(out["after_second"]) <= len(out["after_break"]), out  # (one pass's, not two)
    assert out["closed"] == [], out


def test_keras_fit_runs_and_knows_its_steps(tf_results: dict[str, Any]) -> None:
    out = _result(tf_results, "keras_fit")
    assert out["epochs"] == 2 and out["finite"]
    assert out["steps"] == PER_EPOCH
    assert out["state"] == [2, 0]  # fit took exactly two passes' batches, none ahead


def test_arrays_tf_cannot_share_are_copied(snapshot_url: str, tf_results: dict[str, Any]) -> None:
    out = _result(tf_results, "map_arrays_are_copied_or_shared")
    expected = _stream(snapshot_url, 1, seed=8)
    assert out["ids"] == out["image_ids"] == expected
    assert out["labels"] == [[n % 3 for n in b] for b in expected]


def test_a_maps_ints_numpy_would_round_are_refused_and_uint64_arrives(
    tf_results: dict[str, Any],
) -> None:
    """As in test_adapters.py for torch and JAX: ``[2**63 + 1, -1, ...]`` reached TensorFlow
    as float64, silently; ``[2**70]`` was TensorFlow's error naming no column (a probe)."""
    out = _result(tf_results, "map_ints")
    for name in ("big", "beside", "past"):
        assert out[name] and "map returned column 'v' as a list holding an int" in out[name]
    assert out["ulonglong"] == ["uint64", [2**64 - 1] * 4]


def test_stats_count_the_batches_tensorflow_took_as_readme_says(
    tf_results: dict[str, Any],
) -> None:
    """README: stats() count the batches TensorFlow has taken, up to 7 more than the loop
    received (it takes 8 a call into Python)."""
    from snapshot_cli.readers.tf import CHUNK

    assert CHUNK == 8 and _result(tf_results, "stats_count_what_tensorflow_took") == CHUNK


def test_a_maps_first_batch_taken_for_the_spec_is_not_counted(
    tf_results: dict[str, Any],
) -> None:
    """With a map, to_tf() takes the first batch for the element spec: the loader's stats()
    counted it (records 3128 for a pass of 3000, a probe)."""
    out = _result(tf_results, "map_stats")
    assert out == {"batches": [PER_EPOCH], "stats": [RECORDS, PER_EPOCH]}


def test_with_a_map_the_elements_are_what_it_returns(
    snapshot_url: str, tf_results: dict[str, Any]
) -> None:
    # the spec used to come from the schema alone: a column the map added was left out of
    # the element, and a changed dtype or shape failed inside TensorFlow
    out = _result(tf_results, "map_sets_the_columns")
    assert out["keys"] == ["id", "small"] and out["small"] == [None, 1, 2]
    assert out["y"] == [[None], "float32"] and out["dtypes"] == ["float32"]
    assert out["ids"] == _stream(snapshot_url, 1, seed=5)  # the first batch was not lost
    assert out["shapes"] == ["[16, 1, 2]", "[32, 1, 2]"]  # sorted: the last batch has 16
    assert out["error"] and "map returned column 'id' as int64 rows of shape" in out["error"][0]
    assert "map returned column 'late' in this batch but not in the first one" in out["error"][1]
    assert "map returned column 'r' holding float64 arrays, but 1-D int64" in out["error"][2]
    assert "map returned column 'r' holding an array of shape (" in out["error"][3]
    assert all(
        "keep a ragged column's dtype and number of dimensions" in e for e in out["error"][2:]
    )


def test_a_maps_lists_of_text_bytes_and_arrays_reach_tensorflow(tf_results: dict[str, Any]) -> None:
    """A map's list of bytes lost its trailing NULs (numpy's fixed-width strings: b"\\0\\0"
    became b""), and a list of arrays of several shapes was refused."""
    out = _result(tf_results, "map_lists")
    ids = [n for batch in out["ids"] for n in batch]
    assert sorted(ids) == list(range(RECORDS))
    assert out["raw"] == [[n.to_bytes(4, "little").hex() for n in b] for b in out["ids"]]
    assert out["text"] == [[f"t{n}\x00" for n in b] for b in out["ids"]]
    assert out["tokens"] == [[list(range(n % 4)) for n in b] for b in out["ids"]]
    assert out["spec"] == [[None, None], "int64", 1]


def test_numeric_columns_reach_tensorflow_without_a_copy(tf_results: dict[str, Any]) -> None:
    out = _result(tf_results, "sharing")
    assert out == {"shared": [-7.0, 99], "tensor": True, "unaligned_left_as_is": True}


def test_ragged_columns_of_any_rank_reach_tensorflow_whole(tf_results: dict[str, Any]) -> None:
    out = _result(tf_results, "ragged_of_any_rank")
    assert out["specs"] == {
        "r1": [[None, None], 1],
        "r2": [[None, None, None], 2],
        "r3": [[None, None, None, None], 3],
    }
    assert sorted(map(int, out["got"])) == list(range(40))
    for n in range(40):
        r1 = np.arange(n % 4, dtype=np.int32)
        r2 = np.arange((n % 3 + 1) * (n % 2 + 1), dtype=np.float32).reshape(n % 3 + 1, -1) + n
        assert out["got"][str(n)] == {
            "r1": r1.tolist(),
            "r2": r2.tolist(),
            "r3": np.full((n % 2 + 1, n % 3, 2), n, np.int16).tolist(),
        }
        assert out["mapped"][str(n)] == np.stack([r1, r1]).tolist()


def test_lists_of_text_reach_tensorflow_as_ragged_strings(tf_results: dict[str, Any]) -> None:
    out = _result(tf_results, "lists_of_text")
    assert out["spec"] == [[None, None], "string", 1]
    want = {str(n): [f"c{n}.{k}" for k in range(n % 3)] for n in range(30)}
    assert out["got"] == want
    assert out["mapped"] == want
