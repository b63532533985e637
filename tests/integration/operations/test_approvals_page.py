"""A draft edited and approved on the operator page, in a real headless Chromium, on a real
worker and broker: the edited text is what the mail API receives; no token, no send."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from onceonly.schemas.ledger import ReplyState
from tests.integration.operations.test_ops_page import _submit, browser, chromium
from tests.integration.workers import Stack, ledger_records, until, writer_env

pytestmark = pytest.mark.integration
__all__ = ["chromium"]  # the session fixture, used here by name

TOKEN = "approvals-page-token-4d2a"


@pytest.mark.timeout(900)  # the first run may install the Debian package
async def test_a_draft_edited_and_approved_on_the_page_sends_the_edit_once(
    stack_factory: Callable[..., Stack], chromium: Path, tmp_path: Path
) -> None:
    stack = stack_factory(reorder_window_ms=0)
    worker = stack.worker(ONCEONLY_APPROVAL="always", ONCEONLY_OPS_TOKEN=TOKEN, **writer_env(stack))
    await stack.deliver(stack.seed("<page@example.com>", "thr-page"))
    drafts: list[str] = []

    def drafted() -> bool:
        records = ledger_records(stack).values()
        drafts[:] = [r.key for r in records if r.state is ReplyState.AWAITING]
        return bool(drafts)

    await until(stack, drafted, "the draft")
    [key] = drafts
    page_url = f"http://127.0.0.1:{worker.port}/ops"

    async with browser(chromium, tmp_path / "chromium-profile") as page:
        await page.goto(page_url)
        draft = page.locator("section.draft", has_text=key)
        listed = await draft.inner_text()
        text = draft.get_by_label(f"reply text for {key}")
        drafted_text = await text.input_value()
        await draft.get_by_label(f"who decides on {key}").fill("ana")
        await text.fill("Hello, a person edited this reply.")
        no_token = await _submit(page, draft.get_by_role("button", name="approve").click)
        refused = await page.locator("body").inner_text()
        await asyncio.sleep(2)
        sent_while_refused = len(stack.mail.outbox)

        await page.goto(page_url)
        await draft.get_by_label(f"who decides on {key}").fill("ana")
        await text.fill("Hello, a person edited this reply.")
        await draft.get_by_label(f"operator token for {key}").fill(TOKEN)
        approved = await _submit(page, draft.get_by_role("button", name="approve").click)
        notice = await page.locator("body").inner_text()
        await page.screenshot(path=str(tmp_path / "approvals.png"), full_page=True)

    await stack.until_sent(1)
    assert "reply" in drafted_text and "ONCEONLY_APPROVAL=always" in listed
    assert no_token == 403 and "operator token" in refused
    assert sent_while_refused == 0
    assert approved == 200, notice
    assert f"decision on {key}: applied; the reply is sent" in notice
    assert [e.text for e in stack.mail.outbox] == ["Hello, a person edited this reply."]
    record = ledger_records(stack)[key]
    assert record.state is ReplyState.SENT
    assert record.approval is not None and record.approval.by == "ana"
    assert record.approval.draft_text == drafted_text
