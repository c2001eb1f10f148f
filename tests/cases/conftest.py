"""The case tests' shared fixtures."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from refund_desk.runtime import Runtime
from tests.helpers import Harness, LiveServer


@pytest.fixture()
def desk(any_runtime: Runtime) -> Harness:
    """A published policy, on each real database (a module may override it)."""
    harness = Harness(any_runtime)
    harness.publish()
    return harness


@pytest.fixture()
def live(any_runtime: Runtime) -> Iterator[tuple[Harness, LiveServer]]:
    """A published policy and the real app under uvicorn, on each real database."""
    harness = Harness(any_runtime)
    harness.publish()
    server = LiveServer(any_runtime)
    yield harness, server
    server.stop()
