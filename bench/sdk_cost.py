"""``python -m bench.sdk_cost``: the agentmail SDK's CPU per reply alone, (5) of the
processor benchmark, without its broker: ``AgentMailSender.reply`` against the instant mail
server through ``ApiClient``'s direct path and the whole httpx way (its baseline, before
issue 46), alternated in one process; prints both and their ratio."""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from bench._options import Opt, cli
from bench._proc_report import SDK_CALLS
from bench._proc_stack import serve_mail
from bench._procs import console


def sdk_cost_pair(base_url: str, calls: int = SDK_CALLS, rounds: int = 4) -> tuple[float, float]:
    """(5) and its baseline, alternated ``rounds`` times in this process: ms of CPU per
    reply through ``ApiClient``'s direct path, and the whole httpx way (before issue 46);
    each the median of its rounds."""
    direct, whole = [], []
    for _ in range(rounds):
        direct.append(sdk_cost_ms(base_url, calls // rounds, direct=True))
        whole.append(sdk_cost_ms(base_url, calls // rounds, direct=False))
    return statistics.median(direct), statistics.median(whole)


def sdk_cost_ms(base_url: str, calls: int = SDK_CALLS, *, direct: bool = True) -> float:
    """(5) ms of CPU per reply of the SDK call alone: ``AgentMailSender.reply`` (the worker's
    sender: the SDK over ``onceonly.processors.mail.agentmail.transport.ApiClient``), ``calls``
    times one
    after the other in this process, against the instant mail server. 1000 / this is the most
    replies one Python process could send per second if it did nothing else. ``direct``:
    False, every request the whole httpx way."""
    from onceonly.processors.mail.agentmail.sender import AgentMailSender, agentmail_client
    from onceonly.processors.mail.agentmail.transport import ApiClient
    from onceonly.schemas.ledger import ReplyRecord, ReplyState

    def record(n: int) -> ReplyRecord:
        return ReplyRecord(
            key=f"reply-sdk-{n}",
            inbox_id="agent@bench.agentmail.to",
            message_id=f"<sdk-{n}@bench>",
            thread_key=f"agentmail:thr_{n % 1024:04d}",
            state=ReplyState.PENDING,
            created_at=datetime.now(UTC),
            reply_text="Thanks for your message; we will get back to you shortly.",
        )

    async def run() -> float:
        http = ApiClient(timeout_s=10.0, direct=direct)
        client = agentmail_client("bench", base_url=base_url, timeout_s=10.0, http=http)
        sender = AgentMailSender("bench", client=client, timeout_s=10.0)
        try:
            for n in range(50):  # connections and caches warm
                await sender.reply(record(-1 - n))
            began = time.process_time()
            for n in range(calls):
                await sender.reply(record(n))
            return (time.process_time() - began) / calls * 1000
        finally:
            await http.aclose()

    return asyncio.run(run())


OPTIONS = (
    Opt("--calls", None, 8000, "Replies per variant."),
    Opt("--rounds", None, 8, "Alternations of the two."),
)


@cli(OPTIONS, "Time the SDK's reply call both ways; print ms of CPU per reply and the ratio.")
def main(calls: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as work:
        mail, port = serve_mail(Path(work) / "mail.log")
        try:
            direct, whole = sdk_cost_pair(f"http://127.0.0.1:{port}", calls, rounds)
        finally:
            mail.stop()
    console.print(f"direct path:          {direct:.3f} ms of CPU per reply")
    console.print(f"the whole httpx way:  {whole:.3f} ms of CPU per reply")
    console.print(f"direct / whole httpx: {direct / whole:.3f}")


if __name__ == "__main__":
    main()
