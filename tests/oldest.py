"""Print pip constraints pinning every dependency of snap to the oldest version
``pyproject.toml`` allows (``name>=X`` gives ``name==X``), for ``make test-oldest``: the core
tests run against them so that the minimums stay true. (Read with a regular expression: the
Python running this may predate ``tomllib``.)"""

from __future__ import annotations

import re
import sys
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def oldest(text: str) -> list[str]:
    block = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M)
    if block is None:
        raise SystemExit("pyproject.toml has no [project] dependencies list")
    pins = []
    for name, version in re.findall(r'"([A-Za-z0-9_.\-]+)>=([0-9][^",;]*)"', block.group(1)):
        pins.append(f"{name}=={version}")
    if not pins:
        raise SystemExit("no 'name>=version' dependency found in pyproject.toml")
    return pins


if __name__ == "__main__":
    sys.stdout.write("".join(f"{pin}\n" for pin in oldest(PYPROJECT.read_text())))
