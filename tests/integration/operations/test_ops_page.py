"""The operator page (/ops) in a real headless Chromium, on a real worker and broker.

The browser is Debian's ``chromium`` package (installed here where it is missing, as the
dashboard test installs prometheus), driven by Playwright from PyPI; ``playwright install``
is never run. The tests assert on the page's text, never on pixels, and leave a screenshot
in the test's temporary directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from playwright.async_api import Page, async_playwright

from onceonly.foundation.kafka import Connection
from onceonly.operations.replay import DeadLetter, dead_letters
from onceonly.processors.writer.contract import reply_key
from onceonly.schemas.ledger import ReplyState
from tests.integration.debian import install_debian_packages
from tests.integration.workers import INBOX, Stack, ledger_records, until

pytestmark = pytest.mark.integration

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TOKEN = "ops-page-test-token-7c1e"


@pytest.fixture(scope="session")
def chromium() -> Path:
    """Debian's Chromium: installed now if missing (fonts-liberation: readable screenshots)."""
    if not CHROMIUM.exists():
        install_debian_packages("chromium", "fonts-liberation")
    assert CHROMIUM.exists(), f"no {CHROMIUM} after installing Debian's chromium package"
    return CHROMIUM


@contextlib.asynccontextmanager
async def browser(chromium: Path, profile: Path) -> AsyncIterator[Page]:
    """A fresh headless Chromium (its own user-data-dir) with one page."""
    async with async_playwright() as playwright:
        context = await playwright.chromium.launch_persistent_context(
            str(profile), executable_path=str(chromium), headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield context.pages[0] if context.pages else await context.new_page()
        finally:
            await context.close()


def _letters(stack: Stack) -> list[DeadLetter]:
    return dead_letters(Connection.from_settings(stack.settings), stack.settings.dead_letter_topic)


async def _submit(page: Page, click: Callable[[], Awaitable[None]]) -> int:
    """Submit a form; the status of the page it lands on (after any redirect)."""
    async with page.expect_navigation() as landed:
        await click()
    response = await landed.value
    assert response is not None
    return response.status


@pytest.mark.timeout(900)  # the first run may install the Debian package
async def test_a_dead_letter_is_listed_and_retried_only_with_the_token_then_answered_once(
    stack_factory: Callable[..., Stack], chromium: Path, tmp_path: Path
) -> None:
    stack = stack_factory(reorder_window_ms=0, send_attempts=1)
    worker = stack.worker(ONCEONLY_OPS_TOKEN=TOKEN)
    key = reply_key(INBOX, "<ops@example.com>")
    stack.mail.fail_next(1000, status=500)  # the mail API is down: the reply is dead-lettered
    await stack.deliver(stack.seed("<ops@example.com>", "thr-ops"))
    await until(stack, lambda: len(_letters(stack)) == 1, "the dead letter")
    (letter,) = _letters(stack)
    stack.mail.faults.fail_remaining = 0  # and up again

    async with browser(chromium, tmp_path / "chromium-profile") as page:
        await page.goto(f"http://127.0.0.1:{worker.port}/ops")
        row = page.locator("tr", has_text=key)
        listed = await row.inner_text()
        retry = row.get_by_role("button", name="retry")
        token = row.get_by_placeholder("operator token")

        no_token = await _submit(page, retry.click)
        refused = await page.locator("body").inner_text()
        assert no_token == 403, f"a retry without the token was not refused:\n{refused}"
        await page.goto(f"http://127.0.0.1:{worker.port}/ops")
        await token.fill("not-the-token")
        wrong_token = await _submit(page, retry.click)
        wrong = await page.locator("body").inner_text()
        assert wrong_token == 403, f"a retry with a wrong token was not refused:\n{wrong}"
        await asyncio.sleep(3)
        sent_while_refused = len(stack.mail.outbox)

        await page.goto(f"http://127.0.0.1:{worker.port}/ops")
        await token.fill(TOKEN)
        with_token = await _submit(page, retry.click)
        notice = await page.locator("body").inner_text()
        await page.screenshot(path=str(tmp_path / "ops.png"), full_page=True)
    await stack.until_sent(1)
    await asyncio.sleep(3)  # time for a second reply, if there were one

    assert letter.letter["reason"] in listed and "<ops@example.com>" in listed
    assert "a retry needs the operator token" in refused
    assert "not the operator token" in wrong
    assert sent_while_refused == 0
    assert with_token == 200 and f"dead letter {letter.offset} retried at" in notice
    assert [e.replied_to_message_id for e in stack.mail.outbox] == ["<ops@example.com>"]
    assert ledger_records(stack)[key].state is ReplyState.SENT
    assert (tmp_path / "ops.png").stat().st_size > 0


def _post_status(url: str, token: str) -> tuple[int, str]:
    request = urllib.request.Request(
        url, data=b"", method="POST", headers={"Authorization": f"Bearer {token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode()


@pytest.mark.timeout(900)
async def test_without_ops_token_the_page_is_read_only_and_refuses_retries(
    stack_factory: Callable[..., Stack], chromium: Path, tmp_path: Path
) -> None:
    stack = stack_factory(reorder_window_ms=0)
    worker = stack.worker()
    await stack.producer.produce(stack.settings.deliveries_topic, b"not an envelope", key=b"k")
    await until(stack, lambda: len(_letters(stack)) == 1, "the dead letter")
    (letter,) = _letters(stack)

    async with browser(chromium, tmp_path / "chromium-profile") as page:
        await page.goto(f"http://127.0.0.1:{worker.port}/ops")
        text = await page.locator("body").inner_text()
        buttons = await page.get_by_role("button", name="retry").count()
        await page.screenshot(path=str(tmp_path / "ops-read-only.png"), full_page=True)
    status, body = _post_status(
        f"http://127.0.0.1:{worker.port}/ops/dead-letters/{letter.offset}/retry", TOKEN
    )
    await asyncio.sleep(2)

    assert "Read-only: set ONCEONLY_OPS_TOKEN" in text and letter.letter["reason"] in text
    assert buttons == 0
    assert status == 403 and "this page is read-only" in body
    assert [x.open for x in _letters(stack)] == [True]


async def test_the_page_lists_a_duplicate_among_the_skips_and_traces_the_message(
    stack_factory: Callable[..., Stack], chromium: Path, tmp_path: Path
) -> None:
    from onceonly.operations.trace import recent_skips

    stack = stack_factory()
    worker = stack.worker()
    payload = stack.seed("<traced@example.com>", "thr-traced")
    await stack.deliver(payload)
    await stack.until_sent(1)
    await stack.deliver(payload)  # the same event again: a duplicate, skipped and recorded
    await until(stack, lambda: bool(recent_skips(stack.settings, 10)), "the skip's record")

    async with browser(chromium, tmp_path / "profile") as page:
        await page.goto(f"http://127.0.0.1:{worker.port}/ops")
        skips = await page.locator("#skips + *").inner_text()
        await page.locator("input[name=trace]").fill("<traced@example.com>")
        await _submit(page, lambda: page.locator("input[name=trace]").press("Enter"))
        traced = await page.locator("pre").inner_text()
        await page.screenshot(path=str(tmp_path / "ops-trace.png"), full_page=True)

    assert payload["event_id"] in skips and "duplicate" in skips
    assert "sent" in traced and "<traced@example.com>" in traced
