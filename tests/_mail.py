"""Messages the tests seed in the fake AgentMail server beside the customers'."""

from __future__ import annotations

from typing import Any

from testkit.fakes.agentmail_server import FakeAgentMail


def seed_agents_message(
    mail: FakeAgentMail,
    inbox: str,
    message_id: str,
    thread_id: str,
    in_reply_to: str | None = None,
) -> Any:
    """The agent's own message ``message_id`` in ``inbox``'s thread ``thread_id`` (its reply
    to ``in_reply_to``, if given), as AgentMail files it: sent from the inbox itself."""
    return mail.seed_message(
        inbox,
        message_id=message_id,
        thread_id=thread_id,
        labels=("sent",),
        from_=inbox,
        in_reply_to=in_reply_to,
    )
