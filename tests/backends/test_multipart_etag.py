"""An S3 multipart upload's ETag is the MD5 of its parts' MD5s and their count ("...-3"): it
follows from how the bytes were cut in parts, not from the bytes. The same bytes uploaded
in one part, then in parts (``aws s3 cp`` above 8 MB), or in parts of another size, were a
changed input, computed again. Such an input's content is now the MD5 of its bytes, said as
a one-part upload's ETag is; a real S3 server (moto) on loopback."""

from __future__ import annotations

import os
from typing import Any

import pytest

import snapshot_cli as snap
from tests.backends.conftest import Backend

MiB = 1 << 20


def lengths(path: str) -> Any:
    yield {"path": path}


def upload(backend: Backend, key: str, data: bytes, part: int | None) -> str:
    """Put ``data`` at ``key`` in one part (``part`` None) or in parts of ``part`` bytes;
    its ETag as listed."""
    path = backend.path(backend.url(key))
    if part is None:
        backend.fs.pipe_file(path, data)
    else:
        with backend.fs.open(path, "wb", block_size=part) as f:
            for at in range(0, len(data), MiB):  # (written a MiB at a time: parts of `part`)
                f.write(data[at : at + MiB])
    backend.refresh()
    return str(backend.fs.info(path)["ETag"])


@pytest.mark.parametrize("backend", ["s3"], indirect=True)
def test_the_same_bytes_uploaded_in_other_parts_are_the_same_input(backend: Backend) -> None:
    data = os.urandom(11 * MiB)
    out, pattern = backend.url("out"), backend.url("in/*.bin")
    upload(backend, "in/small.bin", b"tiny", None)
    assert "-" not in upload(backend, "in/a.bin", data, None)  # (one part: the bytes' MD5)

    def create() -> snap.CreateInfo:
        return snap.create(lengths, out, inputs=pattern, workers=0, progress=False)

    assert create().version == 1
    for part, parts in ((5 * MiB, 3), (6 * MiB, 2)):
        assert upload(backend, "in/a.bin", data, part).endswith(f'-{parts}"')
        again = create()
        assert again.reused and again.version == 1, again  # (was "inputs 1 changed")
    changed = bytearray(data)
    changed[5] ^= 1
    upload(backend, "in/a.bin", bytes(changed), 5 * MiB)
    grown = create()
    assert grown.version == 2 and grown.inputs_changed == 1 and grown.tasks_reused == 1
