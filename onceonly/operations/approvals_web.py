"""``POST /approvals/{key}`` on the worker's web port: a Slack bot or a helpdesk decides.

The request carries ``Authorization: Bearer <ONCEONLY_OPS_TOKEN>`` (or, from the
operator page's form, a ``token`` field) and a JSON body (or the form's fields)::

    {"action": "approve", "text": "optional edited text", "by": "ana@example.com"}
    {"action": "reject", "reason": "wrong refund amount", "by": "ana@example.com"}

The answer is JSON (:meth:`onceonly.operations.approvals.Outcome.to_json`): the reply's state and
what became of the decision. 200: applied, or the same decision was applied before;
409: refused (no longer a draft: approved, sent, rejected or superseded; the state says
which); 202: produced, not applied within the wait; 403: no or a wrong token; 404: no
such reply; 400: a body that is not a decision. 403, 404 and 400 change nothing.
``GET /approvals`` (same token) lists the drafts awaiting a decision. Both find the
drafts in the operator index when one is built (ONCEONLY_INDEX_DIR), else read the
ledger topic whole; ``answered_by`` says which (and how far behind the index was).
"""

from __future__ import annotations

import asyncio
import hmac
import json
from typing import Any
from urllib.parse import urlencode

import structlog
from aiohttp import web

from onceonly.foundation.errors import OnceOnlyError
from onceonly.foundation.settings import Settings
from onceonly.operations.approvals import (
    WAIT_S,
    FindReply,
    Produce,
    Status,
    UnknownReply,
    decide,
    producer,
    reply_finder,
    waiting_drafts,
)
from onceonly.schemas.approval import Action

log = structlog.get_logger("onceonly.approvals")

STATUS = {Status.APPLIED: 200, Status.ALREADY: 200, Status.REFUSED: 409, Status.WAITING: 202}
MAX_TEXT = 256 * 1024


def bearer(form_token: object, authorization: str | None) -> str | None:
    """The token a request carries: the form field ``token``, else a Bearer header."""
    if isinstance(form_token, str) and form_token:
        return form_token
    scheme, _, value = (authorization or "").partition(" ")
    return (value.strip() or None) if scheme.lower() == "bearer" else None


def token_refusal(expected: str | None, given: str | None) -> str | None:
    """Why the request may not decide (None: it may); compared in constant time."""
    if expected is None:
        return "approvals need ONCEONLY_OPS_TOKEN set on the worker; it is not"
    if not given:
        return "a decision needs the operator token: Authorization: Bearer <ONCEONLY_OPS_TOKEN>"
    if not hmac.compare_digest(given.encode("utf-8", "surrogateescape"), expected.encode()):
        return "that is not the operator token (ONCEONLY_OPS_TOKEN)"
    return None


def parse_decision(body: dict[str, Any]) -> tuple[Action, str, str | None, str | None]:
    """(action, by, text, reason) from a request body; ValueError says what is wrong."""
    try:
        action = Action(str(body.get("action", "")))
    except ValueError:
        raise ValueError('"action" is "approve" or "reject"') from None
    by = str(body.get("by") or "").strip()
    if not by or len(by) > 200:
        raise ValueError('"by" names who decides (1 to 200 characters)')
    text, reason = body.get("text"), body.get("reason")
    if text is not None and (not isinstance(text, str) or len(text) > MAX_TEXT):
        raise ValueError(f'"text" is the edited reply, a string of at most {MAX_TEXT} characters')
    if action is Action.REJECT and not (isinstance(reason, str) and reason.strip()):
        raise ValueError('a rejection needs a "reason"')
    if text == "":
        text = None  # an untouched edit box: the draft as it is
    return action, by, text, str(reason) if reason is not None else None


def _json(http_status: int, /, **data: Any) -> web.Response:
    return web.json_response(data, status=http_status, headers={"Cache-Control": "no-store"})


class ApprovalsApi:
    def __init__(
        self,
        settings: Settings,
        find: FindReply | None = None,
        produce: Produce | None = None,
        wait_s: float = WAIT_S,
    ) -> None:
        self.settings = settings
        self.find = find or reply_finder(settings)
        self.produce = produce or producer(settings)
        self.wait_s = wait_s

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/approvals", self.list), web.post("/approvals/{key}", self.decide)]

    def _refusal(self, request: web.Request, form_token: object = None) -> str | None:
        expected = self.settings.ops_token
        given = bearer(form_token, request.headers.get("Authorization"))
        return token_refusal(expected.get_secret_value() if expected else None, given)

    async def list(self, request: web.Request) -> web.Response:
        refusal = self._refusal(request)
        if refusal is not None:
            return _json(403, error=refusal)
        found = await asyncio.to_thread(waiting_drafts, self.settings)
        rows = [
            {
                "key": r.key,
                "thread_key": r.thread_key,
                "message_id": r.message_id,
                "drafted_at": r.created_at.isoformat(),
                "reason": r.reason,
                "text": r.reply_text,
            }
            for r in found.value
        ]
        return _json(200, drafts=rows, answered_by=found.source)

    async def decide(self, request: web.Request) -> web.Response:
        key = request.match_info["key"]
        form: dict[str, Any] = {}
        if request.content_type == "application/json":
            try:
                loaded = json.loads(await request.text())
            except ValueError:
                loaded = None
            if not isinstance(loaded, dict):
                refusal = self._refusal(request)
                if refusal is not None:
                    return _json(403, error=refusal)
                return _json(400, error="the body is not a JSON object")
            body = loaded
        else:
            form = dict(await request.post())
            body = form
        refusal = self._refusal(request, form.get("token"))
        if refusal is not None:
            log.warning("approval refused: token", key=key[:80], reason=refusal)
            return _json(403, error=refusal)
        try:
            action, by, text, reason = parse_decision(body)
        except ValueError as exc:
            return _json(400, error=str(exc))
        try:
            outcome = await decide(
                self.find,
                self.produce,
                key,
                action,
                by,
                text=text,
                reason=reason,
                wait_s=self.wait_s,
            )
        except UnknownReply as exc:
            return _json(404, error=str(exc))
        except OnceOnlyError as exc:
            return _json(503, error=f"the decision could not be made: {exc}")
        log.info("approval decision", key=key, by=by, status=outcome.status, state=outcome.state)
        if form and "html" in request.headers.get("Accept", ""):  # the operator page's form
            query = urlencode({"decided": outcome.status, "key": key, "state": outcome.state})
            raise web.HTTPSeeOther(f"/ops?{query}#approvals")
        return _json(STATUS[outcome.status], **outcome.to_json())
