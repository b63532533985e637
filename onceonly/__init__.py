"""onceonly: act on webhooks without ever acting twice.

The public surface is what this module exports (``__all__``) and ``onceonly.testing``;
every subpackage (``onceonly.ingest``, ``onceonly.processors``, ...) is internal and may
change between releases. A reply writer needs only these names:

```python
from onceonly import Burst, Decline, Draft

async def reply(burst: Burst) -> str | Decline | Draft:
    ...
```

and is named by ``ONCEONLY_REPLY_WRITER=yourmodule:reply``; an event handler (Stripe,
GitHub, Standard Webhooks) is ``handler(envelope: Envelope, effects: Effects)``, named by
``ONCEONLY_EVENT_HANDLER``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from onceonly.foundation.errors import ConfigError
    from onceonly.processors.effects.once import EffectConflict, Effects
    from onceonly.processors.exceptions import WriterFailed
    from onceonly.processors.flow.rate import ModelThrottled
    from onceonly.processors.writer.contract import Decline, Draft, Inbound, ThreadMessage
    from onceonly.processors.writer.runner import Burst
    from onceonly.schemas.envelope import Envelope
    from onceonly.schemas.exceptions import OnceOnlyError
    from onceonly.schemas.ledger import Usage

#: where each public name lives; imported on first use, so that ``onceonly``'s command
#: line and a writer's module load only what they touch (PEP 562)
_HOMES = {
    "Burst": "onceonly.processors.writer.runner",
    "ConfigError": "onceonly.foundation.errors",
    "Decline": "onceonly.processors.writer.contract",
    "Draft": "onceonly.processors.writer.contract",
    "EffectConflict": "onceonly.processors.effects.once",
    "Effects": "onceonly.processors.effects.once",
    "Envelope": "onceonly.schemas.envelope",
    "Inbound": "onceonly.processors.writer.contract",
    "ModelThrottled": "onceonly.processors.flow.rate",
    "OnceOnlyError": "onceonly.schemas.exceptions",
    "ThreadMessage": "onceonly.processors.writer.contract",
    "Usage": "onceonly.schemas.ledger",
    "WriterFailed": "onceonly.processors.exceptions",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'onceonly' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})


__version__ = "0.1.0"

__all__ = [
    "Burst",
    "ConfigError",
    "Decline",
    "Draft",
    "EffectConflict",
    "Effects",
    "Envelope",
    "Inbound",
    "ModelThrottled",
    "OnceOnlyError",
    "ThreadMessage",
    "Usage",
    "WriterFailed",
    "__version__",
]
