"""One OpenTelemetry trace from ingest to the send, through real processes: a signed
AgentMail delivery is posted to a real ingest process, a real worker answers it with
``onceonly.processors.writer.openai`` (the ``openai`` SDK against a local chat-completions server),
and both export over OTLP/HTTP: to a receiver in this test (``opentelemetry-proto``), and
to Jaeger built from its Go module (``devstack.jaeger``, where it is built). ``onceonly
trace`` then prints the same trace id, which Jaeger's query API answers for."""

from __future__ import annotations

import asyncio
import json
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from devstack import jaeger
from devstack.ports import free_port
from testkit import payloads, signing
from testkit.fakes.openai_server import FakeChatModel
from testkit.fakes.otlp_receiver import OtlpReceiver, Span
from testkit.processes import Supervised
from tests.integration.workers import INBOX, Stack, onceonly, until, worker_env

pytestmark = pytest.mark.integration

MODEL = "local-model"
#: the spans of one message answered by one reply
ONE_REPLY = {
    "onceonly.deliver",
    "onceonly.hold",
    "onceonly.process",
    "onceonly.dedupe",
    f"chat {MODEL}",
    "onceonly.send",
}


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver().serving_in_thread() as found:
        yield found


@pytest.fixture
def chat() -> Iterator[FakeChatModel]:
    with FakeChatModel(lambda messages: "Friday at ten works for us.").serving_in_thread() as model:
        yield model


def _otel(endpoint: str) -> dict[str, str]:
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100"}


def _ingest(stack: Stack, port: int, endpoint: str) -> Supervised:
    env = worker_env(stack.settings, mail_url=stack.mail.base_url, data_dir=stack.tmp / "ingest")
    env.update(
        ONCEONLY_INGEST_PORT=str(port),
        ONCEONLY_AGENTMAIL_WEBHOOK_SECRET=signing.SVIX_SECRET,
        **_otel(endpoint),
    )
    command = [sys.executable, "-m", "onceonly", "ingest"]
    return Supervised("ingest", command, env, stack.tmp / "ingest.log", append=True).start()


def _post(url: str, body: bytes) -> int:
    request = urllib.request.Request(url, data=body, headers=signing.svix_headers(body))
    with urllib.request.urlopen(request, timeout=10) as answer:
        return int(answer.status)


def _by_name(spans: list[Span]) -> dict[str, Span]:
    return {span.name: span for span in spans}


async def _answer_one(
    stack: Stack, endpoint: str, chat: FakeChatModel, exported: Callable[[], bool]
) -> str:
    """A real ingest and worker exporting to ``endpoint``; one message POSTed and answered
    (until ``exported()``); returns its message id."""
    (stack.tmp / "ingest").mkdir()
    port = free_port()
    ingest = _ingest(stack, port, endpoint)
    stack.worker(
        ONCEONLY_REPLY_WRITER="onceonly.processors.writer.openai:reply",
        OPENAI_BASE_URL=f"{chat.base_url}/v1",
        OPENAI_API_KEY="test",
        OPENAI_MODEL=MODEL,
        **_otel(endpoint),
    )
    message_id = "<traced-1@example.com>"
    try:
        await ingest.wait_ready(f"http://127.0.0.1:{port}/readyz", timeout_s=60)
        stack.mail.seed_message(INBOX, message_id=message_id, thread_id="thr-traced")
        body = payloads.dumps(
            payloads.agentmail_received(thread_id="thr-traced", message_id=message_id)
        )
        url = f"http://127.0.0.1:{port}/webhooks/agentmail"
        assert await asyncio.to_thread(_post, url, body) == 204

        await stack.until_sent(1)
        await until(stack, exported, "the reply's spans exported")
    finally:
        ingest.stop()
    return message_id


async def test_one_trace_runs_from_the_ingest_span_to_the_send_with_the_genai_attributes(
    stack_factory: Callable[..., Stack], receiver: OtlpReceiver, chat: FakeChatModel
) -> None:
    stack = stack_factory(reorder_window_ms=500)

    def exported() -> bool:  # every step's span: the process span ends after the send,
        return {s.name for s in receiver.spans} >= ONE_REPLY  # with the events' outcome

    message_id = await _answer_one(stack, receiver.base_url, chat, exported)

    spans = receiver.spans
    (deliver,) = [s for s in spans if s.name == "onceonly.deliver"]
    trace = [s for s in spans if s.trace_id == deliver.trace_id]
    found = _by_name(trace)
    assert set(found) == ONE_REPLY, [(s.service, s.name, s.trace_id) for s in spans]
    assert len(trace) == len(found)  # each once: no empty step (a look for newer messages)
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


@pytest.mark.skipif(jaeger.unavailable() is not None, reason=str(jaeger.unavailable()))
async def test_jaeger_receives_the_trace_that_onceonly_trace_names(
    stack_factory: Callable[..., Stack], chat: FakeChatModel, tmp_path: Path
) -> None:
    stack = stack_factory(reorder_window_ms=500)
    with jaeger.Jaeger(tmp_path / "jaeger.log") as server:

        def exported() -> bool:
            found = server.get("/api/services") or {}
            return {"onceonly-ingest", "onceonly-worker"} <= set(found.get("data") or [])

        message_id = await _answer_one(stack, server.otlp_endpoint, chat, exported)
        traced = await asyncio.to_thread(onceonly, stack, "trace", message_id, "--json")
        assert traced.returncode == 0, traced.stderr
        (trace_id,) = json.loads(traced.stdout)["trace_ids"]
        wanted = ONE_REPLY

        def complete() -> bool:
            found = server.trace(trace_id)
            return found is not None and wanted <= {s["operationName"] for s in found["spans"]}

        await until(stack, complete, f"trace {trace_id} complete in Jaeger")
        found = server.trace(trace_id)

    assert found is not None
    services = {k: p["serviceName"] for k, p in found["processes"].items()}
    spans = {s["operationName"]: s for s in found["spans"]}
    assert services[spans["onceonly.deliver"]["processID"]] == "onceonly-ingest"
    assert services[spans["onceonly.send"]["processID"]] == "onceonly-worker"
    parent = {s["operationName"]: [r["spanID"] for r in s["references"]] for s in found["spans"]}
    assert parent["onceonly.process"] == [spans["onceonly.deliver"]["spanID"]]
    assert parent[f"chat {MODEL}"] == [spans["onceonly.process"]["spanID"]]
    assert parent["onceonly.send"] == [spans["onceonly.process"]["spanID"]]
    tags = {t["key"]: t["value"] for t in spans[f"chat {MODEL}"]["tags"]}
    assert tags["gen_ai.request.model"] == MODEL
    assert tags["gen_ai.usage.input_tokens"] == 10
    assert tags["gen_ai.usage.output_tokens"] == 5
