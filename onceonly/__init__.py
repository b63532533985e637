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

from onceonly.foundation.errors import ConfigError
from onceonly.processors.effects.once import EffectConflict, Effects
from onceonly.processors.exceptions import WriterFailed
from onceonly.processors.flow.rate import ModelThrottled
from onceonly.processors.writer.contract import Decline, Draft, Inbound, ThreadMessage
from onceonly.processors.writer.runner import Burst
from onceonly.schemas.envelope import Envelope
from onceonly.schemas.exceptions import OnceOnlyError
from onceonly.schemas.ledger import Usage

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
