"""Fixtures of the ingest integration tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from onceonly.foundation.settings import Settings
from tests.integration.ingest.hostile_live import LiveIngest, _secrets


@pytest.fixture
def live_ingest(
    settings_factory: Callable[..., Settings],
    topics_factory: Callable[[Settings], Settings],
) -> Iterator[Callable[..., LiveIngest]]:
    """Ingest apps on real ports, all five providers configured, fresh topics each."""
    made: list[LiveIngest] = []

    def make(**overrides: Any) -> LiveIngest:
        settings = topics_factory(settings_factory(**{**_secrets(), **overrides}))
        live = LiveIngest(settings)
        made.append(live)
        return live

    yield make
    for live in made:
        live.close()
