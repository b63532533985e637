"""onceonly: act on webhooks without ever acting twice."""

__version__ = "0.1.0"
