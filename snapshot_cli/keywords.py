"""Unknown keyword arguments of the public calls, answered with the name that was meant.

Python says only "got an unexpected keyword argument 'shufle'". snap's users come from
tf.data, PyTorch, Hugging Face datasets and Mosaic Streaming, whose names for the same
settings differ, and put an option of one call on another (``snap.open(path,
batch_size=256)``): each gets the snap name that does it, or the call that takes it. Still a
``TypeError``, as Python's own is.

The same for methods and attributes: another library's name tried on a ``Snapshot``, a
loader or the package (``s.shuffle()``, ``s.to_pandas()``, ``loader.batch(32)``,
``snap.load(path)``) is answered with what does it in snap (``DATASET_INSTEAD``,
``LOADER_INSTEAD``, ``PACKAGE_INSTEAD``; still an ``AttributeError``).
"""

from __future__ import annotations

import difflib
import functools
import importlib
import inspect
import types
from collections.abc import Callable, Iterable
from typing import ParamSpec, TypeVar

from .hidden_frames import HIDDEN

P = ParamSpec("P")
R = TypeVar("R")

# Other libraries' names for snap's settings (only those a call takes are suggested).
ELSEWHERE: dict[str, tuple[str, ...]] = {
    "num_workers": ("num_parallel_reads", "processes", "workers"),  # torch DataLoader
    "num_proc": ("workers",),  # HF datasets' map
    "workers": ("num_parallel_reads", "processes"),  # create's, given to a loader
    "threads": ("num_parallel_reads",),
    "buffer_size": ("shuffle_buffer",),  # tf.data shuffle
    "shuffle_buffer_size": ("shuffle_buffer",),
    "prefetch_factor": ("prefetch",),
    "num_parallel_calls": ("num_parallel_reads",),
    "cycle_length": ("num_parallel_reads",),
    "drop_remainder": ("drop_last",),
    "num_epochs": ("epochs",),
    "shuffle_seed": ("seed",),
    "random_seed": ("seed",),
    "num_replicas": ("world_size",),
    "num_shards": ("world_size",),
    "num_ranks": ("world_size",),
    "shard_index": ("rank",),
    "local_rank": ("rank",),
    "transform": ("map",),
    "collate_fn": ("map",),
    "n": ("records",),  # pandas' DataFrame.sample(n=, frac=), given to Snapshot.sample
    "frac": ("fraction",),
    "num_samples": ("records",),
    "compression_level": ("level",),
    "codec": ("compression",),
    "max_shard_size": ("shard_size",),
    "size_limit": ("shard_size",),
    # create's inputs, pipeline and output under other names (HF datasets, Beam, tf.data)
    "items": ("inputs",),
    "data_files": ("inputs",),
    "files": ("inputs",),
    "paths": ("inputs",),
    "filenames": ("inputs",),
    "sources": ("inputs",),
    "function": ("pipeline",),
    "fn": ("pipeline",),
    "func": ("pipeline",),
    "preprocess_fn": ("pipeline",),
    "fn_kwargs": ("params",),
    "output_dir": ("output",),
    "output_path": ("output",),
    "out_dir": ("output",),
    "destination": ("output",),
    "cache_file_name": ("output",),
}

SHOWN_AS = {"FrameworkAdapters": "Loader"}  # a mixin's methods, as users call them

# The modules of the checked calls, so that a keyword of one given to another is found.
CHECKED_MODULES = ("snapshot_cli.writers.create", "snapshot_cli.readers.snapshot",
                   "snapshot_cli.readers.mix", "snapshot_cli.readers.adapter")  # fmt: skip

_TAKES: dict[str, frozenset[str]] = {}  # every checked call's name -> its keywords


def keywords_of(fn: Callable[..., object]) -> frozenset[str]:
    """The names ``fn`` takes as keyword arguments (``self`` aside)."""
    params = inspect.signature(fn).parameters.values()
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return frozenset(p.name for p in params if p.kind in kinds and p.name != "self")


def refuse_unknown(call: str, given: Iterable[str], takes: frozenset[str]) -> None:
    """For a call that passes its ``**options`` on (``SnapshotDataset(url, **loader_options)``):
    the first of ``given`` it does not take, refused in its own name, not the callee's."""
    if unknown := [k for k in given if k not in takes]:
        raise TypeError(unknown_message(call, unknown[0], takes))


def checked_keywords(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn``, refusing an unknown keyword with the name meant (``fn`` has no ``**kwargs``)."""
    takes = keywords_of(fn)
    owner, _, method = fn.__qualname__.rpartition(".")
    name = f"{SHOWN_AS.get(owner, owner)}.{method}" if owner else method
    _TAKES[name] = takes

    @functools.wraps(fn)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        __tracebackhide__ = HIDDEN  # (snap's frames in a notebook: hidden_frames.py)
        if not takes.issuperset(kwargs):
            unknown = next(k for k in kwargs if k not in takes)
            raise TypeError(unknown_message(name, unknown, takes))
        return fn(*args, **kwargs)

    return call


def unknown_message(call: str, given: str, takes: frozenset[str]) -> str:
    """Python's words, and then the keyword ``call`` takes that was meant, or the call that
    takes ``given``, or the keywords it takes."""
    for module in CHECKED_MODULES:  # (imported lazily by snapshot_cli: all are needed here)
        importlib.import_module(module)
    said = f"{call}() got an unexpected keyword argument {given!r}"
    meant = [n for n in ELSEWHERE.get(given.lower(), ()) if n in takes]
    meant += [n for n in difflib.get_close_matches(given, sorted(takes), n=2, cutoff=0.7)
              if n not in meant]  # fmt: skip
    others: dict[str, str] = {}  # one call per method name, Snapshot's first (not Mixture's)
    for c in sorted(_TAKES, key=lambda c: (not c.startswith("Snapshot."), c)):
        if given in _TAKES[c] and c != call:
            others.setdefault(c.rsplit(".", 1)[-1], c)
    where = " and ".join(c + "()" for c in others.values())
    if meant:
        also = f" ({given!r} is an option of {where})" if others else ""
        return f"{said}; did you mean {' or '.join(repr(n) for n in meant)}?{also}"
    if others:
        return f"{said}; it is an option of {where}"
    return f"{said}; it takes {', '.join(sorted(takes))}"


# Other libraries' dataset methods and attributes (HF datasets, tf.data, Mosaic Streaming,
# pandas), and what does that in snap: on a snapshot, and on a loader. Only names snap's
# objects do not have are looked up here.
_DATASET_NAMES = [
    ("shuffle batch repeat prefetch shard",
     "shuffling, batches, epochs, prefetching and a rank's part are options of the loader: "
     "s.loader(batch_size, shuffle=True, seed=0, epochs=1, rank=0, world_size=1)"),
    ("map with_transform set_transform apply",
     "a function of each batch is the loader's: s.loader(batch_size, map=fn)"),
    ("filter select skip",
     "which records a snapshot holds is chosen when it is made: keep or skip them in the "
     "pipeline given to snap create"),
    ("select_columns remove_columns drop",
     "read some columns only: s.loader(batch_size, columns=[...])"),
    ("columns column_names features element_spec dtypes",
     "the column names are s.schema.names (s.schema is its pyarrow.Schema)"),
    ("num_rows num_samples size cardinality shape", "its number of records is s.num_records"),
    ("take to_pandas to_dict to_list iter as_numpy_iterator to_numpy iterrows show",
     "s.head(n) gives its first records (a list of dicts: pandas.DataFrame(s.head(n))); "
     "s.iter_batches() every record in order, a batch at a time"),
    ("with_format set_format to_tf_dataset to_torch to_jax to_tf",
     "framework batches come from its loader: s.loader(batch_size).to_torch(), .to_jax() or "
     ".to_tf()"),
    ("save_to_disk cache save snapshot",
     "a snapshot is stored already: snap.open(url) reads it, from any machine that can reach "
     "the URL"),
]  # fmt: skip
_LOADER_NAMES = [
    ("shuffle batch repeat prefetch shard unbatch with_transform set_transform select_columns",
     "a loader's shuffling, batch size, epochs, prefetch, rank, map and columns are set when "
     "it is made: snap.open(url).loader(batch_size, shuffle=True, epochs=1, prefetch='auto', "
     "rank=0, world_size=1, map=None, columns=None)"),
    ("take to_pandas as_numpy_iterator head",
     "iterate it for numpy batches (dicts of arrays): next(iter(loader)) is the first; "
     "snap.open(url).head(n) gives a snapshot's first records"),
    ("with_format set_format to_tf_dataset",
     "framework batches: loader.to_torch(), loader.to_jax() or loader.to_tf()"),
]  # fmt: skip
# Other libraries' top-level names (``datasets.load_from_disk``, ``tf.data.Dataset.load``,
# LitData's ``optimize``, Mosaic's ``StreamingDataset``) tried on ``snapshot_cli`` itself.
_PACKAGE_NAMES = [
    ("load load_from_disk load_dataset read read_snapshot read_arrow from_files open_snapshot "
     "Dataset StreamingDataset dataset",
     "a snapshot is read with snap.open(url), its batches with snap.open(url).loader("
     "batch_size, shuffle=True)"),
    ("save save_to_disk optimize materialize materialise write cache build make "
     "create_snapshot MDSWriter",
     "a snapshot is made with snap.create(pipeline, url, inputs=...), or made once and then "
     "reused with snap.snapshot(pipeline, url, inputs=...)"),
    ("DataLoader StreamingDataLoader SnapshotDataset IterableDataset",
     "torch batches come from snap.open(url).loader(batch_size).to_torch(); a torch Dataset "
     "for a DataLoader is snapshot_cli.readers.torch.SnapshotDataset(url, batch_size)"),
    ("verify", "it is the command snap verify URL; in Python, snapshot_cli.readers.verify."
     "verify(snap.open(url)) (and the loader checks every shard it reads)"),
    ("inspect info describe", "it is the command snap inspect URL; in Python, snap.open(url) "
     "has num_records, schema, shards and stats()"),
    ("head", "it is the command snap head URL; in Python, snap.open(url).head(n)"),
    ("bench benchmark", "it is the command snap bench URL"),
    ("gc", "it is the command snap gc URL (in Python: snapshot_cli.writers.gc.gc(url))"),
    ("mix_snapshots interleave sample_from_datasets interleave_datasets",
     "snapshots are mixed with snap.mix([url_a, url_b], weights=[0.7, 0.3]), whose "
     ".loader(batch_size) reads them as one"),
]  # fmt: skip
DATASET_INSTEAD = {name: advice for names, advice in _DATASET_NAMES for name in names.split()}
PACKAGE_INSTEAD = {name: advice for names, advice in _PACKAGE_NAMES for name in names.split()}
LOADER_INSTEAD = {name: advice for names, advice in _LOADER_NAMES for name in names.split()}


def no_attribute(obj: object, name: str, instead: dict[str, str]) -> AttributeError:
    """Python's AttributeError, and for another library's name what does it in snap (a typo
    of snap's own names gets Python's "Did you mean" from ``name`` and ``obj``).

    With a suggestion of snap's own the error has ``name`` and no ``obj``: Python's printers
    suggest from ``obj``, and the attribute lookup fills both in only while neither is set
    (so ``snap.batch`` said "did you mean 'Batch'?. Did you mean: 'Batch'?")."""
    advice = instead.get(name)
    if not isinstance(obj, types.ModuleType):
        said = f"{type(obj).__name__!r} object has no attribute {name!r}"
        return AttributeError(f"{said}; {advice}" if advice else said, name=name, obj=obj)
    said = f"module {obj.__name__!r} has no attribute {name!r}"
    if advice:
        return AttributeError(f"{said}; {advice}", name=name, obj=obj)
    # Python's own "Did you mean" misses swapped letters (snap.opne, snap.craete)
    public = [n for n in dir(obj) if not n.startswith("_")]
    close = difflib.get_close_matches(name, public, n=1, cutoff=0.7)
    if close and not name.startswith("_"):  # (without obj=, Python adds none)
        return AttributeError(f"{said}; did you mean {close[0]!r}?", name=name)
    return AttributeError(said, name=name, obj=obj)


def not_indexed() -> TypeError:
    """What a ``Snapshot`` says to ``s[0]``, ``for r in s`` or ``list(s)``."""
    return TypeError(
        "a Snapshot is not indexed or iterated itself: s.loader(batch_size) gives shuffled "
        "batches to train on, s.iter_batches() every record in order, s.head(n) its first "
        "records"
    )
