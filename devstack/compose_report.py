"""The compose test's report: ``<report dir>/compose-<date>.md``, figures then the log."""

from __future__ import annotations

import json
import platform
import subprocess
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from devstack.compose_images import Built


def _version(command: Sequence[str]) -> str:
    try:
        result = subprocess.run(list(command), capture_output=True, text=True, check=False)
    except OSError:
        return "absent"
    return (result.stdout + result.stderr).strip().splitlines()[-1]


def operator_view(inspected: Mapping[str, Any]) -> dict[str, str]:
    """What a careful operator reads off ``podman image inspect``: the user, the health
    check, the exposed ports."""
    config = inspected.get("Config") or {}
    health = (inspected.get("Healthcheck") or {}).get("Test") or []
    return {
        "user": config.get("User") or "root",
        "health check": " ".join(health[1:]) if health and health[0] != "NONE" else "none",
        "ports": " ".join(sorted(config.get("ExposedPorts") or {})) or "none",
    }


def image_checks(image: str) -> dict[str, str]:
    result = subprocess.run(
        ["podman", "image", "inspect", image], capture_output=True, text=True, check=False
    )
    return operator_view(json.loads(result.stdout)[0]) if result.returncode == 0 else {}


def build_table(built: Sequence[Built], checks: Mapping[str, Mapping[str, str]]) -> list[str]:
    lines = [
        "| image | build s | size MB | user | health check | exposed ports |",
        "|---|---:|---:|---|---|---|",
    ]
    for b in built:
        c = checks.get(b.image, {})
        lines.append(
            f"| `{b.image}` | {b.seconds:.0f} | {b.size_bytes / 1e6:.0f} | {c.get('user', '')} "
            f"| {c.get('health check', '')} | {c.get('ports', '')} |"
        )
    return lines


def summary(
    no_cache: bool, debootstrap_s: float, build_s: float, figures: Mapping[str, object]
) -> list[str]:
    healthy = figures.get("time to healthy s")
    return [
        f"- machine: {platform.machine()}, {_version(['nproc'])} cores, "
        f"{_version(['podman', '--version'])}, podman-compose "
        f"{_version(['dpkg-query', '-W', '-f', '${Version}', 'podman-compose'])}",
        "- image cache: "
        + ("none (images and the debootstrap tarball removed first)" if no_cache else "warm"),
        f"- debootstrap of the bookworm base: {debootstrap_s:.0f} s"
        + (" (cached tarball)" if debootstrap_s == 0 else ""),
        f"- build, every image (debootstrap included): {build_s:.0f} s",
        "- every service healthy (Kafka, topics done, ingest, worker, Prometheus): "
        + (f"{healthy:.1f} s after the first `up`" if isinstance(healthy, float) else "no"),
        "- replies through the stack after `python -m devstack send`: "
        f"{figures.get('first replies', '-')}",
        f"- partitions of onceonly.deliveries over 3 workers: {figures.get('spread', '-')}",
        f"- a worker SIGKILLed mid-load: {figures.get('load', '-')}",
        f"- the whole run (build, test, down -v): {figures.get('total s', '-')} s",
    ]


def write_report(
    report_dir: Path,
    *,
    no_cache: bool,
    debootstrap_s: float,
    build_s: float,
    built: Sequence[Built],
    figures: Mapping[str, object],
    error: str | None,
    log_lines: Sequence[str],
) -> Path:
    report_dir.mkdir(parents=True, exist_ok=True)
    now = datetime.now(UTC)
    path = report_dir / f"compose-{now:%Y-%m-%d}.md"
    checks = {b.image: image_checks(b.image) for b in built}
    lines = [
        f"# Compose test, {now:%Y-%m-%d %H:%M} UTC: {'FAIL' if error else 'PASS'}",
        "",
        "`make compose-test` (`python -m devstack.compose_test"
        + (" --no-cache" if no_cache else "")
        + "`): docker-compose.yml with podman-compose, every image built on this machine.",
        "",
        *summary(no_cache, debootstrap_s, build_s, figures),
    ]
    if "resent" in figures:
        lines += [
            "",
            "Sent again with the same idempotency key (the killed worker's send reached the",
            "outbox, its `sent` record did not reach the ledger; the new owner sent the stored",
            "text again with the same key: one email from an API that honours keys, as",
            "AgentMail does; the dry-run outbox remembers keys per process, so it wrote a",
            f"second line): `{figures['resent']}`",
        ]
    if error:
        lines += ["", "## Failure", "", "```", error, "```"]
    lines += ["", "## Images", "", *build_table(built, checks), ""]
    if "group table" in figures:
        lines += [
            "## The consumer group with 3 workers",
            "",
            "```",
            str(figures["group table"]),
            "```",
            "",
        ]
    if "send" in figures:
        lines += ["## python -m devstack send --url", "", "```", str(figures["send"]), "```", ""]
    lines += ["## Log", "", "```", *log_lines, "```", ""]
    path.write_text("\n".join(lines), encoding="utf-8")
    return path
