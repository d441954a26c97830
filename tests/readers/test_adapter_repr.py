"""An adapter shows what it iterates (a notebook displays it): its loader and its prefetch,
not ``<...TorchBatches object at 0x7f...>``."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import snapshot_cli as snap


def test_to_torch_and_to_jax_show_their_loader(tmp_path: Path) -> None:
    out = str(tmp_path / "s")
    snap.create(lambda i: {"x": np.full(3, i, np.float32)}, out, inputs=range(4), workers=0)
    loader = snap.open(out).loader(batch_size=2, seed=7)
    torch_text = repr(loader.to_torch())
    jax_text = repr(loader.to_jax(prefetch=3))
    assert torch_text == f"TorchBatches({loader!r}, prefetch=0)"
    assert jax_text == f"JaxBatches({loader!r}, prefetch=3)"
    assert "seed=7" in torch_text and out in torch_text
