"""The Grafana dashboard against a real Prometheus that scrapes a live ingest and worker.

Every query of ``ops/grafana/dashboards/onceonly.json`` goes through Prometheus' HTTP API
and must return data, so a renamed metric, label or scrape job breaks the build. The
Prometheus is Debian's ``prometheus`` package, installed where it is missing
(:mod:`tests.integration.debian`).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from pydantic import SecretStr

from devstack.ports import free_port
from onceonly.foundation.kafka import Admin, Connection
from onceonly.ingest.app import Ingest
from testkit import payloads, signing
from testkit.processes import Supervised
from tests.integration.debian import install_debian_packages
from tests.integration.workers import ROOT, Stack, until

pytestmark = pytest.mark.integration

DASHBOARD = ROOT / "ops" / "grafana" / "dashboards" / "onceonly.json"
COMPOSE_PROMETHEUS = ROOT / "ops" / "prometheus" / "prometheus.yml"
INGEST_JOB = "onceonly-ingest"
WORKER_JOB = "onceonly-worker"

#: what Grafana would put in place of its variables (scrape interval 1 s here)
GRAFANA_VARIABLES = {
    "__rate_interval": "1m",
    "__interval": "15s",
    "__range": "5m",
}
SCRAPE_INTERVAL = "1s"


@dataclass(frozen=True)
class Query:
    panel: str
    ref: str
    expr: str  #: as written in the dashboard

    @property
    def promql(self) -> str:
        return substitute(self.expr)

    def __str__(self) -> str:
        return f"panel {self.panel!r} query {self.ref}: {self.expr}"


def substitute(expr: str) -> str:
    """Replace $var and ${var} Grafana variables; an unknown one fails the test."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in GRAFANA_VARIABLES:
            raise AssertionError(
                f"the dashboard uses the Grafana variable ${name}, unknown to this test: "
                f"add it to GRAFANA_VARIABLES ({expr})"
            )
        return GRAFANA_VARIABLES[name]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", value, expr)


def panels_of(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, the ones nested in (collapsed) rows included."""

    def walk(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for panel in panels:
            yield panel
            yield from walk(panel.get("panels", []))

    return walk(dashboard["panels"])


def dashboard_queries(dashboard: dict[str, Any]) -> list[Query]:
    """Every target with an expression, in every panel."""
    return [
        Query(panel.get("title", f"id {panel.get('id')}"), target.get("refId", "?"), target["expr"])
        for panel in panels_of(dashboard)
        for target in panel.get("targets", [])
        if target.get("expr")
    ]


# -- Prometheus: Debian's package, our own process ------------------------------------------


@pytest.fixture(scope="session")
def prometheus_bin() -> Path:
    """The prometheus binary: on PATH, else Debian's package, installed now."""
    found = shutil.which("prometheus")
    if found is None:
        install_debian_packages("prometheus", service="prometheus")
        found = shutil.which("prometheus") or "/usr/bin/prometheus"
    assert Path(found).exists(), f"no prometheus binary at {found} after installing the package"
    return Path(found)


class Prometheus:
    """A Prometheus process scraping the given jobs every second, on a free port."""

    def __init__(self, binary: Path, home: Path, jobs: dict[str, str]) -> None:
        home.mkdir(parents=True, exist_ok=True)
        self.binary = binary
        self.home = home
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = home / "prometheus.yml"
        # YAML is a superset of JSON: no YAML library needed to write the config
        self.config.write_text(
            json.dumps(
                {
                    "global": {
                        "scrape_interval": SCRAPE_INTERVAL,
                        "scrape_timeout": SCRAPE_INTERVAL,
                        "evaluation_interval": SCRAPE_INTERVAL,
                    },
                    "scrape_configs": [
                        {
                            "job_name": job,
                            "metrics_path": "/metrics",
                            "static_configs": [{"targets": [target]}],
                        }
                        for job, target in jobs.items()
                    ],
                },
                indent=2,
            )
        )
        self.log_path = home / "prometheus.log"
        self.server = Supervised(
            "prometheus",
            [
                str(self.binary),
                f"--config.file={self.config}",
                f"--storage.tsdb.path={self.home / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=1h",
                "--log.level=warn",
            ],
            dict(os.environ),
            self.log_path,
            append=True,
        )

    def start(self) -> Prometheus:
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop(15)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    async def api(self, http: aiohttp.ClientSession, path: str, **params: str) -> Any:
        async with http.get(f"{self.url}/api/v1/{path}", params=params) as response:
            body = await response.json()
        assert body.get("status") == "success", f"{path} {params}: {body}"
        return body["data"]

    async def until_targets_up(self, http: aiohttp.ClientSession, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        targets: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            assert self.server.alive, f"prometheus exited:\n{self.log()}"
            try:
                targets = (await self.api(http, "targets", state="active"))["activeTargets"]
            except aiohttp.ClientError:
                targets = []
            if targets and all(t["health"] == "up" for t in targets):
                return
            await asyncio.sleep(0.5)
        raise AssertionError(
            "prometheus targets not up: "
            + "; ".join(f"{t['scrapeUrl']} {t['health']} {t['lastError']}" for t in targets)
            + f"\n{self.log()}"
        )


#: ``sum by (a, b) (...)``, or inside ``histogram_quantile(q, sum by (le, a) (...))``
OUTER_GROUPING = re.compile(r"^\s*(?:histogram_quantile\([^,]+,\s*)?\w+\s+by\s*\(([^)]*)\)")


def what_is_missing(query: Query, data: dict[str, Any]) -> str:
    """What is wrong with a query's result, or an empty string when nothing is.

    Right is: at least one sample that is a number (not NaN), and every label that the
    outermost aggregation groups by (``le`` aside) on some series.
    """
    if data["resultType"] == "scalar":
        series: list[dict[str, Any]] = [{"metric": {}, "value": data["result"]}]
    else:
        series = data["result"]
    samples = [s["value"] for s in series if "value" in s]
    samples += [v for s in series for v in s.get("values", [])]
    if not any(not math.isnan(float(value)) for _, value in samples):
        return "no data: " + json.dumps(data)[:300]
    outer = OUTER_GROUPING.match(query.expr)
    grouped = (
        {label.strip() for label in outer.group(1).split(",")} - {"", "le"} if outer else set()
    )
    absent = sorted(g for g in grouped if not any(g in s.get("metric", {}) for s in series))
    if absent:
        return f"no series carries the label(s) {absent}: " + json.dumps(data)[:300]
    return ""


# -- the tests ---------------------------------------------------------------------------------


def test_the_dashboard_is_provisionable_and_every_panel_has_a_query() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    panels = [p for p in panels_of(dashboard) if p["type"] != "row"]

    assert dashboard["uid"] and dashboard["schemaVersion"] >= 36
    assert "__inputs" not in dashboard, "a provisioned dashboard cannot have import inputs"
    assert "${DS_" not in DASHBOARD.read_text()
    ids = [p["id"] for p in panels_of(dashboard)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in panels:
        assert any(t.get("expr") for t in panel.get("targets", [])), panel["title"]
        for target in panel["targets"]:
            substitute(target["expr"])  # no Grafana variable unknown to the live test
            uid = target.get("datasource", panel.get("datasource", {})).get("uid")
            assert uid == "prometheus", f"{panel['title']}: data source {uid!r}"
    provisioned = (ROOT / "ops/grafana/provisioning/datasources/prometheus.yml").read_text()
    assert re.search(r"^\s*uid:\s*prometheus\s*$", provisioned, re.M)


def test_the_compose_scrape_config_is_valid_and_has_the_dashboards_jobs(
    prometheus_bin: Path,
) -> None:
    promtool = prometheus_bin.with_name("promtool")
    if not promtool.exists():
        promtool = Path(shutil.which("promtool") or "promtool")

    done = subprocess.run(
        [str(promtool), "check", "config", str(COMPOSE_PROMETHEUS)],
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    jobs = set(re.findall(r"job_name:\s*(\S+)", COMPOSE_PROMETHEUS.read_text()))
    assert jobs == {INGEST_JOB, WORKER_JOB}
    used = set(re.findall(r'job="([^"]+)"', DASHBOARD.read_text()))
    assert used <= jobs, f"the dashboard queries jobs {used - jobs} that nothing scrapes"


@pytest.mark.timeout(900)  # the first run may install the Debian package
async def test_every_dashboard_query_returns_data_from_a_live_stack(
    stack_factory: Callable[..., Stack], prometheus_bin: Path, tmp_path: Path
) -> None:
    queries = dashboard_queries(json.loads(DASHBOARD.read_text()))
    stack = stack_factory(
        reorder_window_ms=200, agentmail_webhook_secret=SecretStr(signing.SVIX_SECRET)
    )
    stack.mail.seed_webhook("wh_dashboard", enabled=True)
    worker = stack.worker(
        ONCEONLY_AGENTMAIL_WEBHOOK_ID="wh_dashboard", ONCEONLY_WEBHOOK_POLL_S="0.5"
    )
    ingest = Ingest(stack.settings, stack.producer, Admin(Connection.from_settings(stack.settings)))
    runner = web.AppRunner(ingest.app(), access_log=None)
    await runner.setup()
    ingest_port = free_port()
    await web.TCPSite(runner, "127.0.0.1", ingest_port).start()
    prometheus = Prometheus(
        prometheus_bin,
        tmp_path / "prometheus",
        {INGEST_JOB: f"127.0.0.1:{ingest_port}", WORKER_JOB: f"127.0.0.1:{worker.port}"},
    ).start()
    try:
        async with aiohttp.ClientSession() as http:
            await until(
                stack,
                lambda: "onceonly_webhook_enabled 1.0" in worker.metrics(),
                "the worker's /metrics with the webhook enabled",
            )
            await prometheus.until_targets_up(http, timeout_s=30)

            async def post(body: bytes, headers: dict[str, str], status: int) -> None:
                url = f"http://127.0.0.1:{ingest_port}/webhooks/agentmail"
                async with http.post(url, data=body, headers=headers) as response:
                    assert response.status == status, await response.text()

            bodies = [
                payloads.dumps(stack.seed(f"<dash{i}@example.com>", f"thr-dash{i}"))
                for i in range(3)
            ]
            for body in bodies:
                await post(body, signing.svix_headers(body), 204)
            spam = payloads.dumps(payloads.agentmail_received(event_type="message.received.spam"))
            await post(spam, signing.svix_headers(spam), 204)
            forged = payloads.dumps(payloads.agentmail_received())
            await post(forged, signing.svix_headers(forged, secret=signing.STANDARD_SECRET), 401)
            await stack.until_sent(3)
            # the provider retries an answered delivery: dedupe skips it (a repeat inside
            # the reorder window would be merged by the hold buffer, uncounted)
            await post(bodies[0], signing.svix_headers(bodies[0]), 204)
            await until(
                stack,
                lambda: all(
                    f"{name}{{" in worker.metrics()
                    for name in ("onceonly_duplicates_skipped_total", "onceonly_skips_total")
                ),
                "the duplicate and the skip in the worker's /metrics",
                timeout_s=30,
            )

            results = await _until_every_query_has_data(prometheus, http, queries, timeout_s=30)
            names = await prometheus.api(http, "label/__name__/values")
    finally:
        prometheus.stop()
        await runner.cleanup()

    empty = [f"{query}\n    -> {result}" for query, result in results.items() if result]
    assert not empty, (
        f"{len(empty)} of {len(queries)} dashboard queries returned no data from Prometheus "
        "scraping a live ingest and worker (a metric or label renamed?):\n" + "\n".join(empty)
    )
    exported = {
        re.sub(r"_(total|created|bucket|sum|count)$", "", name)
        for name in names
        if name.startswith("onceonly_")
    }
    assert {"onceonly_consumer_lag", "onceonly_webhook_enabled"} <= exported
    shown = " ".join(q.expr for q in queries)
    unshown = sorted(name for name in exported if name not in shown)
    assert not unshown, f"metrics exported but on no dashboard panel: {unshown}"


async def _until_every_query_has_data(
    prometheus: Prometheus, http: aiohttp.ClientSession, queries: list[Query], timeout_s: float
) -> dict[Query, str]:
    """Query until each returns data; for each query, what is wrong with it, else ""."""
    outcome = dict.fromkeys(queries, "not run")
    deadline = time.monotonic() + timeout_s
    while True:
        for query in [q for q, result in outcome.items() if result]:
            try:
                data = await prometheus.api(http, "query", query=query.promql)
            except AssertionError as exc:  # Prometheus refused the query: say which
                outcome[query] = f"error: {exc}"
                continue
            outcome[query] = what_is_missing(query, data)
        if not any(outcome.values()) or time.monotonic() > deadline:
            return outcome
        await asyncio.sleep(1)
