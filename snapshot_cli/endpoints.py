"""Where a storage client's endpoint came from, for an error that could not reach it.

A wrong endpoint was said as the client says it ("Could not connect to the endpoint URL:
http://127.0.0.1:9000/b/x/manifest.json"), which names the address but not the setting that
chose it, among storage_options, fsspec's configuration (``FSSPEC_S3_ENDPOINT_URL``) and the
client's own variables (``AWS_ENDPOINT_URL``, ``STORAGE_EMULATOR_HOST``). Pure but for
reading the environment and fsspec's configuration.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import fsspec.config

__all__ = ["endpoint_source"]

# per protocol: its names (fsspec's configuration is by name), and the client's own
# variables for the endpoint
_NAMES = {"s3": ("s3", "s3a"), "s3a": ("s3a", "s3"), "gs": ("gs", "gcs"), "gcs": ("gcs", "gs")}
_S3_VARIABLES = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")  # (botocore's)
_VARIABLES = {"s3": _S3_VARIABLES, "s3a": _S3_VARIABLES, "gs": ("STORAGE_EMULATOR_HOST",),
              "gcs": ("STORAGE_EMULATOR_HOST",)}  # fmt: skip


def endpoint_source(
    protocol: str, given: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None
) -> str:
    """ " (the endpoint X, from Y)" for a ``protocol`` client whose endpoint a setting chose:
    ``given`` (the client's storage options), fsspec's configuration, or the client's own
    variables in ``environ``; "" where none did (the storage's own address)."""
    names = _NAMES.get(protocol)
    if names is None:
        return ""
    environ = os.environ if environ is None else environ
    given = given or {}
    value = given.get("endpoint_url") or (given.get("client_kwargs") or {}).get("endpoint_url")
    for name in names:  # (fsspec puts its configuration in the client's options: said first)
        configured = fsspec.config.conf.get(name, {}).get("endpoint_url")
        if configured and value in (None, configured):
            return f" (the endpoint {configured}, from FSSPEC_{name.upper()}_ENDPOINT_URL)"
    if value:
        return f" (the endpoint {value}, from storage_options)"
    for variable in _VARIABLES[protocol]:
        if environ.get(variable):
            return f" (the endpoint {environ[variable]}, from {variable})"
    return ""
