"""The fingerprint: the hash of what decides a snapshot's records (pure).

Code, params, the inputs' identities and the record format; the manifest keeps each part's
hash too, so that a mismatch can say *what* changed.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

# What the fingerprint's "format" part says: how records are encoded in shards. Formats 2 and 3
# only added checksums and versions to the manifest: a snapshot written as format 1 is still
# up to date.
RECORDS_FORMAT = 1


# One encoder for every call: json.dumps with options builds a new one each time, a third of
# the cost of naming a million small items (its encode keeps no state between calls).
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def canonical_json(value: Any) -> str:
    """Deterministic JSON (sorted keys, no spaces) for hashing: what
    ``json.dumps(value, sort_keys=True, separators=(",", ":"))`` gives."""
    return _CANONICAL.encode(value)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def fingerprint(
    code_hash: str, params: dict[str, Any], inputs: list[Any], inputs_hash: str | None = None
) -> tuple[str, dict[str, Any]]:
    """Hash of what decides a snapshot's contents: code, params, input identities, format.

    Args:
        code_hash: sha256 of the pipeline's module source.
        params: the keyword parameters (JSON values).
        inputs: one JSON identity per input (e.g. ``[url, size, version]``), in order.
        inputs_hash: ``sha256_text(canonical_json(inputs))`` where the caller has it already
            (then ``inputs`` is not read).

    Returns:
        ``(fingerprint, parts)``; parts are the per-component hashes stored in the manifest so
        that a mismatch can say *what* changed.
    """
    parts = {
        "code": code_hash,
        "params": sha256_text(canonical_json(params)),
        "inputs": inputs_hash or sha256_text(canonical_json(inputs)),
        "format": RECORDS_FORMAT,
    }
    return sha256_text(canonical_json(parts)), parts


def changed_parts(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Names of the fingerprint parts that differ, for error messages."""
    names = {"code": "pipeline code", "params": "params", "inputs": "inputs", "format": "format"}
    return [names[k] for k in names if old.get(k) != new.get(k)]
