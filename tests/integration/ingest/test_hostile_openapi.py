"""Schemathesis over ops/openapi.yaml against a live ingest."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from tests.integration.ingest.hostile_live import OPENAPI, SECRETS, LiveIngest

pytestmark = pytest.mark.integration


# -- 2. schemathesis -------------------------------------------------------------------


def test_openapi_description_holds_against_a_live_ingest(
    live_ingest: Callable[..., LiveIngest],
) -> None:
    schemathesis = pytest.importorskip("schemathesis")
    import requests
    from schemathesis import GenerationMode
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import status_code_conformance

    live = live_ingest()
    schema = schemathesis.openapi.from_path(OPENAPI)
    schema.validate()  # against the OpenAPI 3.0 meta-schema
    operations = [result.ok() for result in schema.get_all_operations()]
    labels = {f"{op.method.upper()} {op.path}" for op in operations}
    assert labels == {
        "POST /webhooks/agentmail",
        "POST /webhooks/nylas",
        "GET /webhooks/nylas",
        "POST /webhooks/stripe",
        "POST /webhooks/github",
        "POST /webhooks/standard/{source}",
        "GET /healthz",
        "GET /readyz",
        "GET /metrics",
    }
    statuses: Counter[tuple[str, int]] = Counter()
    rejections: list[str] = []
    session = requests.Session()

    def exercise(operation: Any, mode: Any) -> None:
        label = f"{operation.method.upper()} {operation.path}"

        @settings(
            max_examples=30,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy(generation_mode=mode))
        def call(case: Any) -> None:
            response = case.call(base_url=live.url, session=session, timeout=10)
            statuses[(label, response.status_code)] += 1
            assert response.status_code < 500, (label, response.status_code, response.text)
            if label.startswith("POST") and response.status_code >= 300:
                content_type = (response.headers.get("content-type") or [""])[0]
                if content_type.startswith("application/json"):
                    rejections.append(response.json()["check"])
                else:  # aiohttp's own answer: no route matched (e.g. an empty source)
                    assert response.status_code == 404, (label, response.text)
            for secret in SECRETS:
                assert secret not in response.text
            case.validate_response(response, checks=[not_a_server_error, status_code_conformance])

        call()

    for operation in operations:
        exercise(operation, GenerationMode.POSITIVE)
        if operation.path.startswith("/webhooks/"):  # something to break: headers, query
            exercise(operation, GenerationMode.NEGATIVE)
    session.close()

    assert live.records() == [], "an unsigned request reached Kafka"
    accepted, rejected = live.counters()
    assert accepted == Counter()
    assert sum(rejected.values()) == len(rejections), "rejections the counters missed"
    assert Counter(reason for _, reason in rejected.elements()) == Counter(rejections)
    assert statuses[("POST /webhooks/agentmail", 401)] > 0, statuses
    assert statuses[("POST /webhooks/standard/{source}", 404)] > 0, statuses
    assert statuses[("GET /webhooks/nylas", 200)] > 0, statuses
