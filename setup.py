"""The compiled parts: the loader's record gather (``snapshot_cli/_gather.c``), the shuffle
of a window's order (``snapshot_cli/_shuffle.c``) and a record batch decoded into its slots
in one call (``snapshot_cli/_decode.c``, which loads the system's liblz4 and libzstd), and a
shuffled batch of a variable-width column taken from its window (``snapshot_cli/_ragged.c``).

_gather.c and _decode.c are each one translation unit: their parts are headers of static
functions (``_gather_*.h``, ``_decode_*.h``) that the module file includes, so that what a
loop calls is compiled in with it. Each extension's ``depends`` names every header it
includes (tests/test_architecture.py holds it to that): an edited header rebuilds it, and the
sdist ships them.

Everything else is in pyproject.toml. Both are optional: where they cannot be compiled (no C
compiler), the install goes on without them and the loader uses its pure-Python paths (slower
for uncompressed snapshots and for windows of millions of records; the same batches, in the
same order; README, Performance).
"""

import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_py import build_py


class BuildPy(build_py):
    """The package's Python files copied into ``build/lib`` as the checkout has them now: a
    module removed since an earlier build (a pull that renamed one) stayed there, and the next
    ``pip wheel`` shipped it."""

    def run(self) -> None:
        built = os.path.join(self.build_lib, "snapshot_cli")
        for root, _, names in os.walk(built):
            for name in names:
                path = os.path.join(root, name)
                if name.endswith((".py", ".pyi")) and not os.path.exists(
                    os.path.relpath(path, self.build_lib)
                ):
                    os.remove(path)
        super().run()


setup(
    cmdclass={"build_py": BuildPy},
    ext_modules=[
        Extension(
            "snapshot_cli._gather",
            sources=["snapshot_cli/_gather.c"],
            depends=[
                "snapshot_cli/_records.h",
                "snapshot_cli/_gather_sources.h",
                "snapshot_cli/_gather_columns.h",
                "snapshot_cli/_gather_scatter.h",
                "snapshot_cli/_gather_pages.h",
                "snapshot_cli/_gather_place.h",
            ],
            optional=True,
        ),
        Extension(
            "snapshot_cli._decode",
            sources=["snapshot_cli/_decode.c"],
            depends=[
                "snapshot_cli/_records.h",
                "snapshot_cli/_decode_crc32c.h",
                "snapshot_cli/_decode_codecs.h",
                "snapshot_cli/_decode_jobs.h",
            ],
            libraries=["dl"] if sys.platform.startswith("linux") else [],
            optional=True,
        ),
        Extension(
            "snapshot_cli._ragged",
            sources=["snapshot_cli/_ragged.c"],
            depends=["snapshot_cli/_records.h", "snapshot_cli/_ragged_parts.h"],
            optional=True,
        ),
        Extension(
            "snapshot_cli._shuffle",
            sources=["snapshot_cli/_shuffle.c"],
            depends=["snapshot_cli/_records.h"],
            optional=True,
        ),
    ],
)
