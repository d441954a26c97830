"""A sweep's trial in a multiprocessing spawn child (a ``Pool``, a ``ProcessPoolExecutor``)
creates a snapshot of a function its script defines, with worker processes: the script is
the module ``__mp_main__`` there, whose functions cloudpickle sent by name, and every trial
failed in snap's workers with "No module named '__mp_main__'"."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SWEEP = """
import json, multiprocessing as mp, sys

SCALE = 3

def prep(n):
    yield {"n": n, "v": n * SCALE}

def trial(out):
    import snapshot_cli as snap
    info = snap.create(prep, out, inputs=list(range(20)), workers=2)
    batch = next(iter(snap.open(out).loader(20, shuffle=False)))
    return info.num_records, sorted(int(v) for v in batch["v"])

if __name__ == "__main__":
    with mp.get_context("spawn").Pool(1) as pool:
        print(json.dumps(pool.map(trial, [sys.argv[1]])))
"""


def test_a_spawned_trial_ships_its_scripts_function_to_workers(tmp_path: Path) -> None:
    script = tmp_path / "sweep.py"
    script.write_text(SWEEP)
    res = subprocess.run([sys.executable, str(script), str(tmp_path / "s")], cwd=tmp_path,
                         capture_output=True, text=True, timeout=180, check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads(res.stdout.strip().splitlines()[-1]) == [[20, [3 * n for n in range(20)]]]
