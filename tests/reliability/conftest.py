"""Fixtures of the reliability tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.reliability.forks import Forks


@pytest.fixture(scope="session")
def forks() -> Iterator[Forks]:
    """The fork server of :mod:`tests.reliability.forks`, one per pytest process."""
    server = Forks()
    yield server
    server.close()
