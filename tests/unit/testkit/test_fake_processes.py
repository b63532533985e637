"""The Nylas fake and the OTLP receiver run as processes of their own (``python -m``):
each prints its base URL, serves what its options set up, and stops cleanly on SIGTERM."""

from __future__ import annotations

import httpx

from testkit.fakes._server import as_process


def test_the_nylas_fake_serves_the_grants_its_options_seed() -> None:
    with as_process("nylas_server", "--grant", "g_1=agent@example.com") as base_url:
        headers = {"Authorization": "Bearer k"}
        grant = httpx.get(f"{base_url}/v3/grants/g_1", headers=headers, timeout=5.0).json()
    assert grant["data"]["email"] == "agent@example.com"


def test_the_otlp_receiver_answers_its_health_check_and_holds_no_spans() -> None:
    with as_process("otlp_receiver") as base_url:
        health = httpx.get(f"{base_url}/healthz", timeout=5.0).json()
        spans = httpx.get(f"{base_url}/_control/spans", timeout=5.0).json()
    assert (health, spans) == ({"status": "ok"}, {})
