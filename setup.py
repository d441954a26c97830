"""The one compiled part: the loader's record gather (``snapshot_cli/_gather.c``).

Everything else is in pyproject.toml. The extension is optional: where it cannot be compiled
(no C compiler), the install goes on without it and the loader uses its pure-Python path
(slower for uncompressed snapshots; README, Performance).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "snapshot_cli._gather",
            sources=["snapshot_cli/_gather.c"],
            optional=True,
        )
    ]
)
