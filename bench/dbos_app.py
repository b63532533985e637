"""The DBOS Transact app of the DBOS comparison: the same job as onceonly's worker, DBOS's way.

``.venv-dbos/bin/python -m bench.dbos_app --bootstrap HOST:PORT --topic T --group G
--database-url postgresql://… --mail-url http://127.0.0.1:N``, in its own virtualenv
(dbos and faust-streaming need incompatible croniter). As DBOS's Kafka guide recommends:
``@DBOS.kafka_consumer`` on a workflow per record, the writer and the send (with
onceonly's idempotency key) as steps; DBOS's defaults otherwise.
"""

from __future__ import annotations

import argparse
import signal
import threading
from urllib.parse import quote

from agentmail import AgentMailEnvironment, AsyncAgentMail
from dbos import DBOS, KafkaMessage

from bench._dbos_inbound import Inbound, parse
from bench._model import counted as writer

#: The app's name in DBOS (its system database is named by --database-url).
APP_NAME = "onceonly-bench-dbos"
#: The key the mock mail API is given; never a real one.
API_KEY = "bench-not-a-real-key"


class _Mail:
    """One SDK client for the process, made on DBOS's event loop at its first send."""

    base_url = ""
    client: AsyncAgentMail | None = None

    @classmethod
    def get(cls) -> AsyncAgentMail:
        if cls.client is None:
            env = AgentMailEnvironment(
                http=cls.base_url, websockets=cls.base_url.replace("http", "ws", 1)
            )
            cls.client = AsyncAgentMail(api_key=API_KEY, environment=env)
        return cls.client


@DBOS.step()
async def write_reply(message_id: str, text: str | None) -> str:
    """The model call: checkpointed once it returns, so a recovery does not repeat it."""
    return await writer([Inbound("", message_id, text)])


@DBOS.step(retries_allowed=True, max_attempts=3)
async def send_reply(inbox_id: str, message_id: str, text: str, key: str) -> str:
    """The send, with the reply's idempotency key; the SDK puts ids in the path as given."""
    sent = await _Mail.get().inboxes.messages.reply(
        quote(inbox_id, safe=""), quote(message_id, safe=""), text=text, idempotency_key=key
    )
    return str(sent.message_id)


@DBOS.workflow()
async def reply_workflow(msg: KafkaMessage) -> None:
    """One record: the writer, then the send, each a step."""
    inbound = parse(msg.value)
    if inbound is None:
        DBOS.logger.info(f"skipped {msg.topic}[{msg.partition}]@{msg.offset}: not a message")
        return
    text = await write_reply(inbound.message_id, inbound.text)
    await send_reply(inbound.inbox_id, inbound.message_id, text, inbound.key)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.dbos_app")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--mail-url", required=True)
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    _Mail.base_url = args.mail_url
    DBOS(
        config={
            "name": APP_NAME,
            "system_database_url": args.database_url,
            "log_level": args.log_level,
        }
    )
    consumer = {"bootstrap.servers": args.bootstrap, "group.id": args.group}
    DBOS.kafka_consumer(consumer, [args.topic])(reply_workflow)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    DBOS.launch()
    print(f"DBOS app consuming {args.topic} as {args.group}", flush=True)
    stop.wait()
    DBOS.destroy()


if __name__ == "__main__":
    main()
