"""The decider of a chaos run's approval mode: a person (or a Slack bot) at random times.

Every ``every_s`` it lists the drafts (``GET /approvals`` on a random live worker, the next
one if that worker is down: workers are SIGKILLed meanwhile); each new draft gets a
:func:`chaos.approvals.choose` choice: approve as drafted, approve an edit, or reject, after
a random delay, sometimes twice (twice over the HTTP API, over the API and ``onceonly
approvals`` at once, or an approval and an edit at once). A draft still listed long after
its decision (the answer lost with a killed worker, a decision refused because the draft
was superseded and then drafted again under the same key) is decided again, and counted.
Every decision and its answer goes to ``approvals.log`` of the run directory and to
:attr:`Decider.decisions`, which the judge reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

from chaos.approvals import (
    API_AND_CLI,
    APPROVE,
    APPROVE_AND_EDIT,
    EDIT,
    ONCE,
    REDECIDE_S,
    REJECT,
    TWICE_API,
    Choice,
    Decision,
    choose,
    edited,
)

Cli = Callable[..., Awaitable[tuple[int, str]]]


class Decider:
    def __init__(
        self,
        *,
        rng: random.Random,
        session: aiohttp.ClientSession,
        urls: Callable[[], list[str]],
        token: str,
        cli: Cli,
        run_dir: Path,
        elapsed: Callable[[], float],
        every_s: float = 2.0,
    ) -> None:
        self.rng = rng
        self.session = session
        self.urls = urls
        self.token = token
        self.cli = cli
        self.dir = run_dir / "approvals"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.elapsed = elapsed
        self.every_s = every_s
        self.decisions: list[Decision] = []
        self.listed: dict[str, set[str]] = {}  #: key -> the texts it was listed with
        self.twice: dict[str, str] = {}  #: key -> how its (first) decision was doubled
        self.redecided = 0
        self.waiting = 0  #: drafts in the last listing
        self._last: dict[str, float] = {}  #: key -> when its last decision was scheduled
        self._tasks: set[asyncio.Task[None]] = set()
        self._deciding: set[str] = set()  #: keys with a decision under way
        self._n = 0

    @property
    def busy(self) -> bool:
        """Drafts listed or decisions under way: the run is not quiet."""
        return self.waiting > 0 or bool(self._tasks)

    async def run(self) -> None:
        try:
            while True:
                rows = await self._list()
                if rows is not None:
                    self.waiting = len(rows)
                    for row in rows:
                        self._schedule(row)
                await asyncio.sleep(self.every_s)
        finally:
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _list(self) -> list[dict[str, Any]] | None:
        urls = self.urls()
        self.rng.shuffle(urls)
        for url in urls:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError, OSError, ValueError):
                async with self.session.get(
                    f"{url}/approvals",
                    headers=self._auth(),
                    timeout=aiohttp.ClientTimeout(total=30),
                ) as r:
                    if r.status == 200:
                        rows: list[dict[str, Any]] = (await r.json())["drafts"]
                        return rows
        return None

    def _schedule(self, row: dict[str, Any]) -> None:
        key, text = str(row["key"]), str(row["text"])
        self.listed.setdefault(key, set()).add(text)
        now = self.elapsed()
        last = self._last.get(key)
        if key in self._deciding or (last is not None and now - last < REDECIDE_S):
            return
        if last is not None:
            self.redecided += 1
        self._last[key] = now
        choice = choose(self.rng)
        self.twice.setdefault(key, choice.twice)
        self._deciding.add(key)
        task = asyncio.create_task(self._decide(key, text, choice))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _decide(self, key: str, text: str, choice: Choice) -> None:
        try:
            await self._decide_once(key, text, choice)
        finally:
            self._deciding.discard(key)
            self._last[key] = self.elapsed()

    async def _decide_once(self, key: str, text: str, choice: Choice) -> None:
        await asyncio.sleep(choice.delay_s)
        self._last[key] = self.elapsed()
        self._n += 1
        tag = f"edit {self._n}"
        first = edited(text, tag) if choice.action == EDIT else None
        calls: list[Awaitable[Decision]] = [self._api(key, text, choice.action, first)]
        if choice.twice == TWICE_API:
            calls.append(self._api(key, text, choice.action, first))
        elif choice.twice == API_AND_CLI:
            calls.append(self._cli(key, text, choice.action, first))
        elif choice.twice == APPROVE_AND_EDIT:
            other = None if choice.action == EDIT else edited(text, tag + "b")
            calls.append(self._cli(key, text, EDIT if other else APPROVE, other))
        assert choice.twice != ONCE or len(calls) == 1
        for decision in await asyncio.gather(*calls):
            self.decisions.append(decision)
            with (self.dir.parent / "approvals.log").open("a", encoding="utf-8") as out:
                out.write(decision.line() + "\n")

    def _auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def _decision(
        self, key: str, channel: str, action: str, text: str | None, status: str, at: float
    ) -> Decision:
        return Decision(
            key=key,
            channel=channel,
            action=REJECT if action == REJECT else APPROVE,
            text=None if action == REJECT else text,
            edit=action == EDIT,
            status=status,
            at_s=at,
        )

    async def _api(self, key: str, draft: str, action: str, edit: str | None) -> Decision:
        at = self.elapsed()
        body: dict[str, Any] = {"action": "reject" if action == REJECT else "approve"}
        body["by"] = "chaos decider (api)"
        if action == REJECT:
            body["reason"] = "the chaos decider said no"
        elif edit is not None:
            body["text"] = edit
        urls = self.urls()
        status = "error: no worker answered"
        for url in self.rng.sample(urls, len(urls)):
            try:
                async with self.session.post(
                    f"{url}/approvals/{key}",
                    json=body,
                    headers=self._auth(),
                    timeout=aiohttp.ClientTimeout(total=60),
                ) as r:
                    answer = await r.json()
                    status = str(answer.get("status") or f"error: {r.status} {answer}")
                    break
            except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
                status = f"error: {type(exc).__name__}"  # a killed worker: try the next
        return self._decision(key, "api", action, edit or draft, status, at)

    async def _cli(self, key: str, draft: str, action: str, edit: str | None) -> Decision:
        at = self.elapsed()
        self._n += 1
        args = ["approvals", "reject" if action == REJECT else "approve", key]
        args += ["--by", "chaos decider (cli)", "--wait", "45"]
        if action == REJECT:
            args += ["--reason", "the chaos decider said no (cli)"]
        elif edit is not None:
            path = self.dir / f"edit-{self._n}.txt"
            path.write_text(edit, encoding="utf-8")
            args += ["--text-file", str(path)]
        code, out = await self.cli(f"approvals/cli-{self._n}", *args, timeout_s=120.0)
        status = f"error: exit {code}"
        for line in out.splitlines():
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    status = str(json.loads(line).get("status") or status)
        return self._decision(key, "cli", action, edit or draft, status, at)
