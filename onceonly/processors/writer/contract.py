"""The writer's contract: what a writer is given (the messages to answer, :class:`Inbound`,
and the thread's history, :class:`ThreadMessage`, both from
:mod:`onceonly.processors.messages`) and what it may return besides the text: a
:class:`Decline` or a :class:`Draft`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from onceonly.processors.messages import Inbound, ThreadMessage, reply_key
from onceonly.schemas.ledger import Usage

__all__ = ["Decline", "Draft", "Inbound", "ReplyWriter", "Text", "ThreadMessage", "reply_key"]

#: a reply writer as the user gives it (``ONCEONLY_REPLY_WRITER``), sync or async: the
#: messages to answer -> the text, ``None``, a :class:`Decline` or a :class:`Draft`
ReplyWriter = Callable[[Sequence[Inbound]], Any]


@dataclass(frozen=True, slots=True)
class Decline:
    """What a writer returns to answer nothing: recorded as *declined*, with the reason."""

    reason: str = "declined by the writer"
    """Why, recorded in the ledger and shown by ``onceonly trace``."""
    usage: Any = None
    """What the writer's calls cost ([`Usage`][onceonly.Usage]), set by the worker."""


@dataclass(frozen=True, slots=True)
class Draft:
    """What a writer returns for a reply a person should approve before the customer reads
    it (a refund mentioned, low confidence): recorded as *awaiting approval*, with the
    reason, and sent only once approved (``ONCEONLY_APPROVAL=writer``)."""

    text: str
    """The reply as the writer drafted it; a person may approve it, edit it or reject it."""
    reason: str = "the writer asked for approval"
    """Why a person should see it first, shown beside the draft."""


class Text(str):
    """The reply text as the worker's writer step returns it, with what its writer's calls
    cost (``usage``, None: not reported)."""

    usage: Usage | None = None
