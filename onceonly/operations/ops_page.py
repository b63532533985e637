"""The operator page: ``/ops`` on the worker's web port.

It shows the dead letters with their reason (and a retry button), the recent skips, a
trace lookup, the consumer lag per partition, the watched webhook's health and today's
model usage per tenant (:mod:`onceonly.operations.costs`). It reads
the topics; a retry goes through :func:`onceonly.operations.replay.retry_dead_letters`, the path
of ``onceonly dead-letters retry``, and needs ``ONCEONLY_OPS_TOKEN`` (a form field
``token`` or an ``Authorization: Bearer`` header). With the token unset the page is
read-only. A letter the retry cannot send (nothing to resend, a MAC that does not verify,
a record the broker refused) stays open, and the page says why (409 or 503).

The trace lookup and the recent skips come from injected sources (:class:`OpsSources`);
without one, its section says "not available". With the operator index built
(ONCEONLY_INDEX_DIR) the dead letters (the open ones), the drafts, the recent skips and
the trace answer from it instead, and each section says what answered and how far behind
the index was (:mod:`onceonly.operations.index`). The reading functions block on the broker
and run in threads; what each section says is decided in :mod:`onceonly.operations.ops_view`;
the aiohttp handlers only parse, authorize and render (:mod:`onceonly.operations.ops_template`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

import structlog
from aiohttp import web

from onceonly.foundation.errors import OnceOnlyError
from onceonly.foundation.kafka import Connection, PartitionLag, consumer_lag
from onceonly.foundation.settings import Settings
from onceonly.operations import index
from onceonly.operations.approvals import Found, waiting_drafts
from onceonly.operations.approvals_view import DraftRow, decided_notice, draft_rows
from onceonly.operations.approvals_web import ApprovalsApi
from onceonly.operations.costs import today_usage
from onceonly.operations.letters import find_letters
from onceonly.operations.ops_template import render
from onceonly.operations.ops_view import (
    LetterRow,
    OpsView,
    Read,
    Refusal,
    Table,
    TraceView,
    authorize,
    choose_letter,
    given_token,
    int_param,
    letter_rows,
    not_a_letter,
    parse_id,
    retried_notice,
    retry_refusal,
    skip_table,
    trace_ident,
    webhook_health,
)
from onceonly.operations.replay import missing_secret, retry_dead_letters
from onceonly.processors.health import WebhookHealth
from onceonly.processors.runtime.worker import WorkerView

log = structlog.get_logger("onceonly.ops")

T = TypeVar("T")

#: the longest id the trace lookup takes (reply keys are 70 characters)
MAX_IDENT = 512
SKIPS_LIMIT = 50
#: the page shows ids, reasons and (in a trace) reply texts: never cached, never framed
HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'"
    ),
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}


class TraceSource(Protocol):
    """Finds what happened to a message id, an event id or a reply key (None: nothing
    names it), and renders it as text. A module with these two functions is one."""

    def find(self, settings: Settings, ident: str, /) -> object | None: ...

    def render_text(self, trace: Any, /) -> str: ...


class RecentSkips(Protocol):
    """The latest skips, newest first, each with its reason and ids (dataclasses)."""

    def __call__(self, settings: Settings, limit: int, /) -> Sequence[object]: ...


@dataclass(frozen=True)
class OpsSources:
    """What the page shows that other modules read; None: the section is not available."""

    trace: TraceSource | None = None
    skips: RecentSkips | None = None


# -- reading (blocking: run in threads) -------------------------------------------------


def attempt(what: str, read: Callable[[], T]) -> Read[T]:
    """Read one section; a failure becomes the section's error, never the page's."""
    try:
        return Read(read())
    except Exception as exc:  # a source may fail any way: the rest of the page still shows
        log.warning("operator page: a section could not be read", section=what, error=repr(exc))
        return Read(error=f"could not read {what}: {exc}")


def attempt_found(what: str, read: Callable[[], Found[T]]) -> Read[T]:
    """:func:`attempt` of a section that says what answered it (the index, or a scan)."""
    got = attempt(what, read)
    if got.value is None:
        return Read(error=got.error)
    return Read(got.value.value, source=got.value.source)


def lookup(settings: Settings, source: TraceSource, ident: str) -> Found[TraceView]:
    """The trace from the index when one is built, else from ``source`` (a scan)."""
    if len(ident) > MAX_IDENT:
        raise ValueError(f"an id is at most {MAX_IDENT} characters")
    reason = index.no_index_reason(settings)
    if reason is None:
        answer = index.trace(settings, ident)
        found: object | None = answer.value
        said = answer.line()
    else:
        found, said = source.find(settings, ident), f"answered by scanning the topics ({reason})"
    return Found(TraceView(ident, None if found is None else source.render_text(found)), said)


def recent_skips(settings: Settings, source: RecentSkips) -> Found[Table]:
    """The latest skips from the index when one is built, else from ``source``."""
    reason = index.no_index_reason(settings)
    if reason is None:
        answer = index.recent_skips(settings, SKIPS_LIMIT)
        return Found(skip_table(answer.value), answer.line())
    said = f"answered by reading the decisions topic's newest records ({reason})"
    return Found(skip_table(source(settings, SKIPS_LIMIT)), said)


def letters_section(settings: Settings, retried: int | None) -> Found[list[LetterRow]]:
    """The letters the page lists (from the index: the open ones and the one just retried)."""
    found = find_letters(settings, [] if retried is None else [retried])
    said = found.source if found.complete else f"the open letters only, {found.source}"
    return Found(letter_rows(found.shown(retried)), said)


def read_lag(settings: Settings) -> list[PartitionLag]:
    """The worker group's lag on the deliveries topic."""
    connection = Connection.from_settings(settings)
    return consumer_lag(connection, settings.app_id, settings.deliveries_topic)


def read_drafts(settings: Settings) -> Found[list[DraftRow]]:
    found = waiting_drafts(settings)
    return Found(draft_rows(found.value, datetime.now(UTC)), found.source)


def retry_letter(settings: Settings, letter_id: int) -> int | Refusal:
    """Retry one open dead letter: the events it sent again, or why it stays open."""
    letters = find_letters(settings, [letter_id]).letters
    chosen = choose_letter(letters, letter_id)
    if isinstance(chosen, Refusal):
        return chosen
    needed = missing_secret(letters, [chosen], settings.envelope_mac_key)
    if needed is not None:
        return Refusal(409, f"dead letter {letter_id} was not retried: {needed}")
    report = retry_dead_letters(
        Connection.from_settings(settings),
        settings.deliveries_topic,
        [chosen],
        dead_letter_topic=settings.dead_letter_topic,
        mac_key=settings.envelope_mac_key,
    )
    return retry_refusal(letter_id, report) or report.events


# -- the aiohttp handlers ----------------------------------------------------------------


class OpsPage:
    def __init__(self, settings: Settings, health: WebhookHealth, sources: OpsSources) -> None:
        self.settings = settings
        self.health = health
        self.sources = sources

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/ops", self.show),
            web.post(r"/ops/dead-letters/{id:\d+}/retry", self.retry),
        ]

    async def gather(self, ident: str | None, retried: int | None = None, **extra: Any) -> OpsView:
        """Every section, read side by side in threads (``retried``: the letter a retry
        just closed, listed to say so)."""
        settings, sources = self.settings, self.sources

        def section(what: str, read: Callable[[], T]) -> asyncio.Future[Read[T]]:
            return asyncio.ensure_future(asyncio.to_thread(attempt, what, read))

        def sourced(what: str, read: Callable[[], Found[T]]) -> asyncio.Future[Read[T]]:
            return asyncio.ensure_future(asyncio.to_thread(attempt_found, what, read))

        skips = trace = None
        # the sections the index answers share one read of the topics' ends
        with index.one_view():
            letters = sourced("the dead-letter topic", lambda: letters_section(settings, retried))
            lag = section("the consumer lag", lambda: read_lag(settings))
            usage = sourced("the model usage in the ledger", lambda: today_usage(settings))
            drafts = sourced("the drafts awaiting approval", lambda: read_drafts(settings))
            if sources.skips is not None:
                recent = sources.skips
                skips = sourced("the recent skips", lambda: recent_skips(settings, recent))
            if sources.trace is not None and ident is not None:
                found = sources.trace
                trace = sourced(
                    f"the trace of {ident[:80]}", lambda: lookup(settings, found, ident)
                )
        return OpsView(
            app_id=settings.app_id,
            writable=settings.ops_token is not None,
            webhook=webhook_health(self.health, time.time()),
            letters=await letters,
            lag=await lag,
            skips=None if skips is None else await skips,
            trace_available=sources.trace is not None,
            trace=None if trace is None else await trace,
            usage=await usage,
            drafts=await drafts,
            **extra,
        )

    @staticmethod
    def html(view: OpsView, status: int = 200) -> web.Response:
        return web.Response(
            text=render(view), status=status, content_type="text/html", headers=HEADERS
        )

    async def show(self, request: web.Request) -> web.Response:
        retried = int_param(request.query, "retried")
        view = await self.gather(trace_ident(request.query), retried)
        decided = decided_notice(request.query)
        if decided is not None:
            view = dataclasses.replace(view, notice=decided)
        if retried is not None and view.letters.value is not None:
            view = dataclasses.replace(view, notice=retried_notice(view.letters.value, retried))
        return self.html(view)

    async def retry(self, request: web.Request) -> web.Response:
        """Retry one dead letter, then show the page again (303); or refuse and say why."""
        form = await request.post()
        token = given_token(form.get("token"), request.headers.get("Authorization"))
        text = request.match_info["id"]
        refusal = authorize(self.settings.ops_token, token) or await self._retry(text)
        log.warning(
            "operator page: retry refused",
            letter=text[:40],
            status=refusal.status,
            reason=refusal.message,
        )
        return self.html(await self.gather(None, refusal=refusal), status=refusal.status)

    async def _retry(self, text: str) -> Refusal:
        """Why the letter ``text`` names stays open; raises the redirect once it was sent."""
        letter_id = parse_id(text)
        if letter_id is None:
            return not_a_letter(text)
        try:
            outcome = await asyncio.to_thread(retry_letter, self.settings, letter_id)
        except (OnceOnlyError, ValueError) as exc:  # the broker, most likely
            return Refusal(503, f"the retry of dead letter {letter_id} failed: {exc}")
        if isinstance(outcome, Refusal):
            return outcome
        log.info("operator page: dead letter retried", letter=letter_id, events=outcome)
        raise web.HTTPSeeOther(f"/ops?retried={letter_id}#dead-letters")


def ops_pages(sources: OpsSources | None = None) -> Callable[[WorkerView], list[web.RouteDef]]:
    """The operator page's routes for the worker: ``run_worker(settings, pages=...)``."""
    chosen = sources or OpsSources()

    def pages(view: WorkerView) -> list[web.RouteDef]:
        approvals = ApprovalsApi(view.settings).routes()  # POST /approvals/{key}
        return OpsPage(view.settings, view.webhook, chosen).routes() + approvals

    return pages
