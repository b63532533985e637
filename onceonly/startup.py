"""What every command does first: read the settings once, and set up logging from them."""

from __future__ import annotations

from foundation.logs import configure_logging
from foundation.settings import Settings


def settings_from_env() -> Settings:
    """``Settings.from_env()``, then logging configured as they say."""
    settings = Settings.from_env()
    configure_logging(settings.log_level, json=settings.log_json)
    return settings
