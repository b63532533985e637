"""A real language model behind ``onceonly.processors.writer.openai``: SmolLM2-135M-Instruct in
llama-cpp-python's server (``devstack.llm``), a real worker process, the real broker and
AgentMail's API on loopback. Runs where the server is built (``make real-model`` builds
it under ``.run/``); skipped elsewhere, saying so."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from devstack import llm
from onceonly.processors.writer.contract import reply_key
from onceonly.schemas.ledger import ReplyState
from tests.integration.workers import INBOX, Stack, ledger_records

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(llm.unavailable() is not None, reason=str(llm.unavailable())),
]


@pytest.fixture
def model(tmp_path: Path) -> Iterator[llm.ModelServer]:
    with llm.ModelServer(tmp_path / "llm-server.log") as server:
        yield server


async def test_the_reply_is_the_text_the_model_wrote_recorded_then_sent_once(
    stack_factory: Callable[..., Stack], model: llm.ModelServer
) -> None:
    stack = stack_factory(reorder_window_ms=0)
    stack.worker(
        ONCEONLY_REPLY_WRITER="onceonly.processors.writer.openai:reply",
        OPENAI_BASE_URL=model.base_url,
        OPENAI_API_KEY="local",
        OPENAI_MODEL=llm.ALIAS,
    )
    message_id = "<real-model-1@example.com>"
    await stack.deliver(
        stack.seed(message_id, "thr-real", text="Can we move our meeting to Friday at ten?"),
        times=2,  # a provider's retry: still one model call's text, sent once
    )

    await stack.until_sent(1, timeout_s=300)

    (email,) = stack.mail.outbox
    record = ledger_records(stack)[reply_key(INBOX, message_id)]
    assert record.state is ReplyState.SENT
    assert email.text == record.reply_text  # the text recorded before the send is the one sent
    assert email.text and email.text.strip() not in ("", "NO_REPLY")
    assert "sent once by onceonly" not in email.text  # not the default writer's text
    print(f"\nthe model wrote:\n{email.text}")
