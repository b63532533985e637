"""Mail channels: how a provider's event becomes a message to answer, and who sends.

The worker asks the channel of an envelope's provider for an :class:`Inbound` (or the
reason to skip it), then runs the same reply-once path with the channel's sender.
AgentMail is here; Nylas plugs in the same way (``onceonly.processors.nylas``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from onceonly.processors.messages import Inbound, ThreadMessage
from onceonly.processors.reply import MailSender, Skip
from onceonly.schemas.envelope import Envelope


class Channel(Protocol):
    name: str
    sender: MailSender

    async def inbound(self, envelope: Envelope) -> Inbound | Skip:
        """The message to answer (fetched in full if the event left its body out), or why not.

        Raises :class:`~onceonly.processors.exceptions.SendError` if a fetch fails.
        """

    async def history(self, message: Inbound) -> Sequence[ThreadMessage]:
        """The thread's messages before ``message``, the agent's own replies included."""
