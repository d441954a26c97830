"""Train a small JAX model from a snapshot: ``python examples/train_jax.py [DIR]``.

The same data as train_torch.py. Batches arrive as ``jax.Array`` placed ahead of use with
``loader.to_jax()``, sharded along the batch axis over every local device (one on a plain
CPU; try ``XLA_FLAGS=--xla_force_host_platform_device_count=4``). A few seconds on a CPU.
"""

from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from train_data import CLASSES, FEATURES, ensure_snapshot

EPOCHS, BATCH, LR = 4, 128, 0.5


def init(key: jax.Array) -> dict[str, jax.Array]:
    k1, k2 = jax.random.split(key)
    return {
        "w1": jax.random.normal(k1, (FEATURES, 64)) / np.sqrt(FEATURES),
        "b1": jnp.zeros(64),
        "w2": jax.random.normal(k2, (64, CLASSES)) / 8.0,
        "b2": jnp.zeros(CLASSES),
    }


def logits(params: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    h = jax.nn.relu(x @ params["w1"] + params["b1"])
    return h @ params["w2"] + params["b2"]


def loss_fn(params: dict[str, jax.Array], x: jax.Array, y: jax.Array) -> jax.Array:
    logp = jax.nn.log_softmax(logits(params, x))
    return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))


@jax.jit
def step(params: dict[str, jax.Array], x: jax.Array, y: jax.Array) -> tuple:  # type: ignore[type-arg]
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    params = jax.tree_util.tree_map(lambda p, g: p - LR * g, params, grads)
    correct = jnp.sum(jnp.argmax(logits(params, x), axis=1) == y)
    return params, loss, correct


def main(root: str) -> float:
    s = ensure_snapshot(root)
    mesh = Mesh(np.array(jax.devices()), ("batch",))
    sharding = NamedSharding(mesh, PartitionSpec("batch"))
    # drop_last: every batch is full, so it splits evenly over the devices
    batches = s.loader(BATCH, shuffle=True, seed=0, drop_last=True).to_jax(sharding=sharding)
    params = init(jax.random.PRNGKey(0))
    accuracy = 0.0
    for epoch in range(EPOCHS):
        correct = seen = 0
        for batch in batches:
            params, loss, right = step(params, batch["x"], batch["label"])
            correct += int(right)
            seen += batch["label"].shape[0]
        accuracy = correct / seen
        print(f"epoch {epoch}: loss {float(loss):.3f}, train accuracy {accuracy:.3f} "
              f"on {len(jax.devices())} device(s)")  # fmt: skip
    return accuracy


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join("demo-output", "train-example"))
