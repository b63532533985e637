"""One OpenTelemetry trace from ingest to the send, through real processes: a signed
AgentMail delivery is posted to a real ingest process, a real worker answers it with
``processors.openai_writer`` (the ``openai`` SDK against a local chat-completions server),
and both export over OTLP/HTTP to a receiver in this test (``opentelemetry-proto``).
``onceonly trace`` then prints the same trace id."""

from __future__ import annotations

import asyncio
import sys
import urllib.request
from collections.abc import Callable, Iterator

import pytest

from devstack.ports import free_port
from testkit import payloads, signing
from testkit.fakes.openai_server import FakeChatModel
from testkit.fakes.otlp_receiver import OtlpReceiver, Span
from testkit.processes import Supervised
from tests.integration.workers import INBOX, Stack, onceonly, until, worker_env

pytestmark = pytest.mark.integration

MODEL = "local-model"


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    found = OtlpReceiver()
    found.start_in_thread()
    yield found
    found.stop_in_thread()


@pytest.fixture
def chat() -> Iterator[FakeChatModel]:
    model = FakeChatModel(lambda messages: "Friday at ten works for us.")
    model.start_in_thread()
    yield model
    model.stop_in_thread()


def _otel(receiver: OtlpReceiver) -> dict[str, str]:
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.base_url, "OTEL_BSP_SCHEDULE_DELAY": "100"}


def _ingest(stack: Stack, port: int, receiver: OtlpReceiver) -> Supervised:
    env = worker_env(stack.settings, mail_url=stack.mail.base_url, data_dir=stack.tmp / "ingest")
    env.update(
        ONCEONLY_INGEST_PORT=str(port),
        ONCEONLY_AGENTMAIL_WEBHOOK_SECRET=signing.SVIX_SECRET,
        **_otel(receiver),
    )
    command = [sys.executable, "-m", "onceonly", "ingest"]
    return Supervised("ingest", command, env, stack.tmp / "ingest.log", append=True).start()


def _post(url: str, body: bytes) -> int:
    request = urllib.request.Request(url, data=body, headers=signing.svix_headers(body))
    with urllib.request.urlopen(request, timeout=10) as answer:
        return int(answer.status)


def _by_name(spans: list[Span]) -> dict[str, Span]:
    return {span.name: span for span in spans}


async def test_one_trace_runs_from_the_ingest_span_to_the_send_with_the_genai_attributes(
    stack_factory: Callable[..., Stack], receiver: OtlpReceiver, chat: FakeChatModel
) -> None:
    stack = stack_factory(reorder_window_ms=500)
    (stack.tmp / "ingest").mkdir()
    port = free_port()
    ingest = _ingest(stack, port, receiver)
    stack.worker(
        ONCEONLY_REPLY_WRITER="processors.openai_writer:reply",
        OPENAI_BASE_URL=f"{chat.base_url}/v1",
        OPENAI_API_KEY="test",
        OPENAI_MODEL=MODEL,
        **_otel(receiver),
    )
    try:
        await ingest.wait_ready(f"http://127.0.0.1:{port}/readyz", timeout_s=60)
        message_id = "<traced-1@example.com>"
        stack.mail.seed_message(INBOX, message_id=message_id, thread_id="thr-traced")
        body = payloads.dumps(
            payloads.agentmail_received(thread_id="thr-traced", message_id=message_id)
        )
        url = f"http://127.0.0.1:{port}/webhooks/agentmail"
        assert await asyncio.to_thread(_post, url, body) == 204

        await stack.until_sent(1)
        await until(
            stack,
            lambda: {"onceonly.deliver", "onceonly.send"} <= {s.name for s in receiver.spans},
            "the ingest and send spans at the receiver",
        )
    finally:
        ingest.stop()

    spans = receiver.spans
    (deliver,) = [s for s in spans if s.name == "onceonly.deliver"]
    trace = [s for s in spans if s.trace_id == deliver.trace_id]
    found = _by_name(trace)
    assert set(found) == {
        "onceonly.deliver",
        "onceonly.hold",
        "onceonly.process",
        "onceonly.dedupe",
        f"chat {MODEL}",
        "onceonly.send",
    }, [(s.service, s.name, s.trace_id) for s in spans]
    assert deliver.service == "onceonly-ingest" and deliver.kind == "server"
    assert deliver.attributes["http.response.status_code"] == 204
    assert deliver.attributes["onceonly.provider"] == "agentmail"
    assert {s.service for s in trace if s is not deliver} == {"onceonly-worker"}
    # the worker's spans hang from ingest's: hold and process under the delivery, the
    # steps under the process
    assert found["onceonly.hold"].parent_id == deliver.span_id
    assert found["onceonly.process"].parent_id == deliver.span_id
    process = found["onceonly.process"].span_id
    for step in ("onceonly.dedupe", f"chat {MODEL}", "onceonly.send"):
        assert found[step].parent_id == process, step
    write = found[f"chat {MODEL}"].attributes
    assert write["gen_ai.operation.name"] == "chat"
    assert write["gen_ai.request.model"] == MODEL
    assert write["gen_ai.usage.input_tokens"] == 10  # the chat server's reported usage
    assert write["gen_ai.usage.output_tokens"] == 5
    (sent,) = stack.mail.outbox
    assert found["onceonly.send"].attributes["onceonly.sent_message_id"] == sent.sent_message_id
    assert not any(s.error for s in trace)

    traced = await asyncio.to_thread(onceonly, stack, "trace", message_id)
    assert traced.returncode == 0, traced.stderr
    assert f"otel trace {deliver.trace_id}" in traced.stdout
