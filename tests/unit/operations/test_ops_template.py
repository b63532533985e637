"""The operator page's HTML: escaped, read-only without a token, honest about what is missing."""

from __future__ import annotations

import dataclasses
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from onceonly.foundation.kafka import PartitionLag
from onceonly.foundation.settings import Settings
from onceonly.operations.ops_page import OpsSources, attempt, lookup
from onceonly.operations.ops_template import render
from onceonly.operations.ops_view import Health, LetterRow, OpsView, Read, Table, TraceView

HOSTILE = '<script>alert("x")</script>'


def _view(**changes: Any) -> OpsView:
    letter = LetterRow(
        id=7,
        at="2026-12-01T10:00:00+00:00",
        check="send_failed",
        reason=f"send_failed: 500 {HOSTILE}",
        key="reply-abc",
        messages=("<m1@example.com>",),
        record="",
        retried_at=None,
    )
    view = OpsView(
        app_id="onceonly",
        writable=True,
        webhook=Health("ok", "webhook wh_1 is enabled (read 3 s ago)"),
        letters=Read([letter]),
        lag=Read([PartitionLag("onceonly.deliveries", 0, 10, 7), PartitionLag("d", 1, 4, None)]),
        skips=None,
        trace_available=False,
    )
    return dataclasses.replace(view, **changes)


def _text(html: str) -> str:
    """The page's text as a browser would show it (tags dropped, entities decoded)."""
    parts: list[str] = []

    class Text(HTMLParser):
        def handle_data(self, data: str) -> None:
            parts.append(data)

    Text().feed(html)
    return re.sub(r"\s+", " ", " ".join(parts))


def test_every_value_is_escaped() -> None:
    html = render(_view())

    assert HOSTILE not in html
    assert "&lt;script&gt;" in html
    assert f"send_failed: 500 {HOSTILE}" in _text(html)  # shown as text, not run


def test_an_open_letter_has_a_retry_form_with_a_token_field_when_writable() -> None:
    html = render(_view())

    assert 'action="/ops/dead-letters/7/retry"' in html
    assert 'type="password" name="token"' in html


def test_read_only_has_no_retry_form_and_says_how_to_allow_retries() -> None:
    html = render(_view(writable=False))

    assert '<form method="post"' not in html
    assert "Read-only: set ONCEONLY_OPS_TOKEN on the worker" in _text(html)


def test_missing_sources_say_not_available() -> None:
    text = _text(render(_view()))

    assert "Recent skips: not available." in text
    assert "Trace lookup: not available." in text


def test_skips_and_a_found_trace_are_shown() -> None:
    skips = Read(Table(("reason", "event_id"), (("own_message", "evt_9"),)))
    trace = Read(TraceView("<m1@example.com>", "ledger: sent, key reply-abc"))

    text = _text(render(_view(skips=skips, trace_available=True, trace=trace)))

    assert "own_message evt_9" in text
    assert "ledger: sent, key reply-abc" in text


def test_each_section_says_what_answered_it_escaped() -> None:
    said = f"answered from the index at /var/idx {HOSTILE}; index is 3 records behind"
    view = _view(
        letters=Read([], source="the open letters only, " + said),
        skips=Read(Table(("at",), ()), source=said),
        trace_available=True,
        trace=Read(TraceView("<m1@example.com>", "sent"), source=said),
    )

    html = render(view)

    assert html.count("answered from the index at /var/idx") == 3
    assert HOSTILE not in html
    assert "the open letters only, answered from the index" in html


def test_a_trace_that_finds_nothing_says_so() -> None:
    trace = Read(TraceView("<nope@example.com>", None))

    text = _text(render(_view(trace_available=True, trace=trace)))

    assert "Nothing names <nope@example.com>" in text


def test_lag_per_partition_with_the_total() -> None:
    text = _text(render(_view()))

    assert "onceonly.deliveries 0 10 7 3" in text
    assert "d 1 4 - 4" in text
    assert "all 7" in text


def test_a_section_that_could_not_be_read_says_why() -> None:
    letters: Read[list[LetterRow]] = Read(error="could not read the dead-letter topic: down")

    text = _text(render(_view(letters=letters)))

    assert "could not read the dead-letter topic: down" in text


class _TraceModule:
    """Shaped like onceonly.operations.trace: find(settings, ident), render_text(trace)."""

    @staticmethod
    def find(settings: Settings, ident: str) -> dict[str, str] | None:
        return {"id": ident} if ident.startswith("<") else None

    @staticmethod
    def render_text(trace: dict[str, str]) -> str:
        return f"trace of {trace['id']}"


def test_the_trace_lookup_uses_the_injected_source() -> None:
    sources = OpsSources(trace=_TraceModule())
    assert sources.trace is not None

    found = lookup(Settings(), sources.trace, "<m1@example.com>")
    unknown = lookup(Settings(), sources.trace, "evt_unknown")

    assert found.value == TraceView("<m1@example.com>", "trace of <m1@example.com>")
    assert unknown.value == TraceView("evt_unknown", None)
    assert found.source == "answered by scanning the topics (no ONCEONLY_INDEX_DIR set)"


def test_with_an_index_configured_but_not_built_the_trace_says_it_scanned(
    tmp_path: Path,
) -> None:
    sources = OpsSources(trace=_TraceModule())
    assert sources.trace is not None

    found = lookup(Settings(index_dir=tmp_path / "index"), sources.trace, "<m1@example.com>")

    assert found.value == TraceView("<m1@example.com>", "trace of <m1@example.com>")
    assert found.source == (
        f"answered by scanning the topics (no index at {tmp_path / 'index'} yet "
        "(run `onceonly index --follow`))"
    )


def test_a_source_that_raises_becomes_its_sections_error() -> None:
    def down() -> list[str]:
        raise ConnectionError("broker at 127.0.0.1:9092 is down")

    read = attempt("the dead-letter topic", down)

    assert read == Read(
        error="could not read the dead-letter topic: broker at 127.0.0.1:9092 is down"
    )
