"""Objects of ML libraries a pipeline reads from the notebook or script that defines it count
by their values, the same in every process.

A torch tensor (a model's weights, an embedding table) counted by its pickle, which names its
storage by a key torch takes from the storage's address: a pipeline using a model defined in
a notebook got a new fingerprint in every process, so after a kernel restart (or a second
``python train.py``) the unchanged create was refused as "different pipeline code". A
``logging.Logger`` counted by its attributes, which reach the whole logging tree (every logger
any library made so far). Each case runs in processes apart here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.writers.test_hash_seed import python

CASES = """
import json, logging, sys
import numpy as np
import torch
import jax.numpy as jnp
from snapshot_cli.writers import shipping

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU(), torch.nn.BatchNorm1d(3))
values = {
    "a model": model,
    "its state dict": model.state_dict(),
    "a float tensor": torch.arange(12.0).reshape(3, 4),
    "a transposed tensor": torch.arange(12.0).reshape(3, 4).t(),
    "a bfloat16 tensor": torch.arange(6, dtype=torch.bfloat16),
    "a 0-d tensor": torch.tensor(3.5),
    "an empty tensor": torch.empty(0, 3),
    "a tensor needing grad": torch.ones(3, requires_grad=True),
    "a parameter": torch.nn.Parameter(torch.ones(2)),
    "a bool tensor": torch.tensor([True, False]),
    "a complex tensor": torch.tensor([1 + 2j]),
    "a sparse COO tensor": torch.eye(3).to_sparse(),
    "a sparse CSR tensor": torch.eye(3).to_sparse_csr(),
    "a torch generator": torch.Generator().manual_seed(1),
    "a conjugated tensor": torch.tensor([1 + 2j, 3 - 1j]).conj(),
    "a negated view": torch.tensor([1 + 2j]).conj().imag,
    "a nested tensor": torch.nested.nested_tensor([torch.ones(2), torch.zeros(3)]),
    "a jax array": jnp.arange(5),
    "a logger": logging.getLogger("prep"),
}
if len(sys.argv) > 1:  # another library made loggers since (a notebook's other cells)
    for i in range(int(sys.argv[1])):
        logging.getLogger(f"lib{i}.sub").addHandler(logging.NullHandler())

def using(v):
    def prep(i):
        return {"i": i, "k": str(type(v))}
    return prep

json.dump({name: shipping.identity(using(v)) for name, v in values.items()}, sys.stdout)
"""


@pytest.fixture(scope="module")
def identities(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, str]]:
    cwd = tmp_path_factory.mktemp("objects")
    return [
        json.loads(python(CASES, cwd, seed, *more))
        for seed, more in (("1", ()), ("2", ()), ("3", ("5",)))
    ]


NAMES = [
    "a model",
    "its state dict",
    "a float tensor",
    "a transposed tensor",
    "a bfloat16 tensor",
    "a 0-d tensor",
    "an empty tensor",
    "a tensor needing grad",
    "a parameter",
    "a bool tensor",
    "a complex tensor",
    "a sparse COO tensor",
    "a sparse CSR tensor",
    "a torch generator",
    "a conjugated tensor",
    "a negated view",
    "a nested tensor",
    "a jax array",
    "a logger",
]


@pytest.mark.parametrize("name", NAMES)
def test_the_identity_is_the_same_in_every_process(
    identities: list[dict[str, str]], name: str
) -> None:
    found = {run[name] for run in identities}
    assert len(found) == 1, f"{name}: {len(found)} identities in {len(identities)} processes"


def test_every_case_has_an_identity_of_its_own(identities: list[dict[str, str]]) -> None:
    assert sorted(identities[0]) == sorted(NAMES)
    assert len(set(identities[0].values())) == len(NAMES)


def _identity(v: object) -> str:
    from snapshot_cli.writers import shipping

    def prep(i: int) -> dict[str, object]:
        return {"i": i, "k": str(v)}

    return shipping.identity(prep)


def test_a_tensor_counts_by_its_values_dtype_shape_and_grad() -> None:
    """Anything that can change what the pipeline computes changes its identity."""
    import torch  # (the test extras install it)

    base = torch.arange(6.0)
    same = _identity(base.clone())
    assert _identity(base) == same
    changed = base.clone()
    changed[3] = 7.0
    others = [
        changed,
        base.to(torch.float64),
        base.reshape(2, 3),
        base.clone().requires_grad_(True),
        torch.nn.Parameter(base.clone()),
    ]
    assert len({same, *(_identity(t) for t in others)}) == 1 + len(others)


def test_a_model_counts_by_its_weights() -> None:
    import torch

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    before = _identity(model)
    assert _identity(model) == before
    with torch.no_grad():
        model.weight[0, 0] += 1.0
    assert _identity(model) != before


def test_a_sparse_tensor_counts_by_its_entries() -> None:
    import torch

    eye = torch.eye(3)
    assert _identity(eye.to_sparse()) == _identity(eye.clone().to_sparse())
    other = eye.clone()
    other[0, 2] = 5.0
    assert _identity(eye.to_sparse()) != _identity(other.to_sparse())
    assert _identity(eye.to_sparse()) != _identity(eye)  # a layout of its own


def test_a_logger_counts_by_its_name() -> None:
    import logging

    assert _identity(logging.getLogger("a")) == _identity(logging.getLogger("a"))
    assert _identity(logging.getLogger("a")) != _identity(logging.getLogger("b"))


RUN = """
import json, logging, sys
import snapshot_cli as snap
from snapshot_cli.writers import pipeline, shipping

log = logging.getLogger("prep")
ADD = int(sys.argv[3])

def prep(i):
    log.debug("record %s", i)
    return {"i": i + ADD}

if sys.argv[2] == "before":  # snap before 2026-12-01: a logger counted by its attributes
    pipeline.shipping.identities = lambda fn: (shipping.identity(fn, before=True), "", {}, {})
info = snap.create(prep, sys.argv[1], inputs=[int(i) for i in sys.argv[4:]], workers=0)
json.dump({"reused": info.reused, "records": info.num_records, "version": info.version},
          sys.stdout)
"""


def test_a_snapshot_made_when_a_logger_counted_otherwise_stays_up_to_date(
    tmp_path: Path,
) -> None:
    """A logger counted by its attributes before 2026-12-01: a snapshot made then of a
    pipeline using one stays up to date in a later process (not "different pipeline code"),
    and grows on; other code is still other code."""

    def run(when: str, add: int, *inputs: int) -> dict[str, object]:
        out = python(RUN, tmp_path, "1", str(tmp_path / "s"), when, str(add),
                     *map(str, inputs))  # fmt: skip
        return dict(json.loads(out))

    assert run("before", 0, 1, 2) == {"reused": False, "records": 2, "version": 1}
    assert run("now", 0, 1, 2) == {"reused": True, "records": 2, "version": 1}
    assert run("now", 0, 1, 2, 3) == {"reused": False, "records": 3, "version": 2}
    assert run("now", 0, 1, 2, 3)["reused"] is True
    with pytest.raises(AssertionError, match="different pipeline code"):
        run("now", 1, 1, 2, 3)  # (its code changed: a new value added)
