"""docker-compose.yml publishes nothing beyond this machine and ships no default password.

Kafka's listeners are plaintext without authentication, Prometheus and Grafana are not
meant for the internet: every published port is bound to 127.0.0.1 (a variable may move
it, but its default must be 127.0.0.1). A password, secret, token or key is passed
through from the environment, or required (``${VAR:?...}``), never given a default.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

COMPOSE = Path(__file__).resolve().parents[2] / "docker-compose.yml"
LOOPBACK = "127.0.0.1"
#: ``${NAME:-default}`` / ``${NAME-default}``: the default; other forms have none
DEFAULTED = re.compile(r"\$\{(?P<name>\w+)(?::?-)(?P<default>[^}]*)\}")
SECRET_NAME = re.compile(r"PASSWORD|PASSWD|SECRET|TOKEN|API_KEY|PRIVATE_KEY", re.IGNORECASE)


def _host(value: str) -> str | None:
    """The host address of a port entry, with a variable's default put in; None if none."""
    value = DEFAULTED.sub(lambda m: m["default"], value)
    if "/" in value:  # 9094:9094/tcp
        value = value.rsplit("/", 1)[0]
    parts = value.rsplit(":", 2)
    return parts[0] if len(parts) == 3 else None


def published_without_loopback(compose: dict[str, Any]) -> list[str]:
    """``service: entry`` for every published port whose host is not 127.0.0.1."""
    found = []
    for name, service in (compose.get("services") or {}).items():
        for entry in service.get("ports") or []:
            if isinstance(entry, dict):  # the long syntax
                host = entry.get("host_ip")
                host = DEFAULTED.sub(lambda m: m["default"], host) if host else None
            else:
                host = _host(str(entry))
            if host != LOOPBACK:
                found.append(f"{name}: {entry!r}")
    return found


def _environment(service: dict[str, Any]) -> dict[str, Any]:
    env = service.get("environment") or {}
    if isinstance(env, list):  # - NAME=value / - NAME
        pairs = (item.partition("=") for item in env)
        return {k: (v if sep else None) for k, sep, v in pairs}
    return dict(env)


def default_secrets(compose: dict[str, Any]) -> list[str]:
    """``service: NAME`` for every secret-like variable given a value or a default."""
    found = []
    for name, service in (compose.get("services") or {}).items():
        for variable, value in _environment(service).items():
            if not SECRET_NAME.search(variable) or value is None:
                continue
            text = str(value)
            defaults = [m["default"] for m in DEFAULTED.finditer(text)]
            literal = DEFAULTED.sub("", re.sub(r"\$\{\w+(?::?\?[^}]*)?\}", "", text))
            if any(defaults) or literal.strip():
                found.append(f"{name}: {variable}={text}")
    return found


def _load(text: str) -> dict[str, Any]:
    data = yaml.safe_load(text)  # resolves the file's anchors and << merges
    assert isinstance(data, dict)
    return data


def test_every_published_port_is_bound_to_loopback() -> None:
    assert published_without_loopback(_load(COMPOSE.read_text(encoding="utf-8"))) == []


def test_no_password_or_secret_has_a_default() -> None:
    assert default_secrets(_load(COMPOSE.read_text(encoding="utf-8"))) == []


def test_the_grafana_admin_password_is_required() -> None:
    grafana = _load(COMPOSE.read_text(encoding="utf-8"))["services"]["grafana"]
    assert re.fullmatch(
        r"\$\{GRAFANA_ADMIN_PASSWORD:\?[^}]+\}", _environment(grafana)["GF_SECURITY_ADMIN_PASSWORD"]
    )


@pytest.mark.parametrize(
    "entry",
    ["9094:9094", "0.0.0.0:9090:9090", "3000", "${ADDR:-0.0.0.0}:8000:8000", "${ADDR}:80:80"],
)
def test_the_port_check_catches_a_port_open_beyond_loopback(entry: str) -> None:
    compose = {"services": {"s": {"ports": [entry]}}}
    assert published_without_loopback(compose) == [f"s: {entry!r}"]


@pytest.mark.parametrize(
    "entry", ["127.0.0.1:9094:9094", "${ADDR:-127.0.0.1}:8000:8000", "127.0.0.1:53:53/udp"]
)
def test_the_port_check_lets_loopback_pass(entry: str) -> None:
    assert published_without_loopback({"services": {"s": {"ports": [entry]}}}) == []


def test_the_port_check_reads_the_long_syntax() -> None:
    open_port = {"target": 80, "published": 80}
    loopback = {"target": 81, "published": 81, "host_ip": "127.0.0.1"}
    compose = {"services": {"s": {"ports": [open_port, loopback]}}}
    assert published_without_loopback(compose) == [f"s: {open_port!r}"]


@pytest.mark.parametrize(
    "value", ["admin", "${GRAFANA_ADMIN_PASSWORD:-admin}", "${PW-changeme}", "x${PW}"]
)
def test_the_secret_check_catches_a_default(value: str) -> None:
    compose = {"services": {"s": {"environment": {"DB_PASSWORD": value}}}}
    assert default_secrets(compose) == [f"s: DB_PASSWORD={value}"]
    listed = {"services": {"s": {"environment": [f"DB_PASSWORD={value}"]}}}
    assert default_secrets(listed) == [f"s: DB_PASSWORD={value}"]


@pytest.mark.parametrize("value", [None, "${PW}", "${PW:?set PW}", "${PW?}", "${PW:-}"])
def test_the_secret_check_lets_pass_through_and_required_values_pass(value: str | None) -> None:
    assert default_secrets({"services": {"s": {"environment": {"API_KEY": value}}}}) == []


# --------------------------------------------------------------------------- the images

#: the images the stack runs (compose/python/ is only the base the onceonly image is built on)
DOCKERFILES = [
    COMPOSE.parent / "Dockerfile",
    *sorted(
        p for p in (COMPOSE.parent / "compose").glob("*/Dockerfile") if p.parent.name != "python"
    ),
]
#: what an operator reads: the README and the documentation site's pages
DOCUMENTS = [COMPOSE.parent / "README.md", *sorted((COMPOSE.parent / "docs").glob("*.md"))]
#: every service that keeps running has a health check, but the one-shot topics and
#: Grafana (not run by `make compose-test`: no image of it can be had there)
UNCHECKED = {"topics", "grafana"}


def _instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, its arguments) of a Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", path.read_text(encoding="utf-8"))
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def image_problems(path: Path, doc_ports: set[str]) -> list[str]:
    """What a careful operator would refuse in a Dockerfile: root at run time, no health
    check, a port the documentation does not name, a secret-like ENV or ARG."""
    steps = _instructions(path)
    problems = []
    users = [rest for word, rest in steps if word == "USER"]
    if not users or users[-1].split(":")[0] in {"root", "0"}:
        problems.append("runs as root: end with USER <non-root>")
    if not any(word == "HEALTHCHECK" and "NONE" not in rest for word, rest in steps):
        problems.append("no HEALTHCHECK")
    for word, rest in steps:
        if word == "EXPOSE":
            problems += [f"EXPOSE {p}: not in the docs" for p in rest.split() if p not in doc_ports]
        if word in {"ENV", "ARG"} and SECRET_NAME.search(rest):
            problems.append(f"{word} {rest}: a secret baked into the image")
    return problems


def _documented_ports() -> set[str]:
    text = "\n".join(path.read_text(encoding="utf-8") for path in DOCUMENTS)
    return set(re.findall(r"(?<![\d.])(\d{4,5})(?![\d.])", text))


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: str(p.relative_to(COMPOSE.parent)))
def test_every_image_is_one_an_operator_would_accept(path: Path) -> None:
    assert image_problems(path, _documented_ports()) == []


def test_the_image_check_catches_root_no_health_check_strange_ports_and_secrets(
    tmp_path: Path,
) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM x\nENV API_KEY=abc\nEXPOSE 8000 \\\n  31337\nUSER root\n")
    assert image_problems(bad, {"8000"}) == [
        "runs as root: end with USER <non-root>",
        "no HEALTHCHECK",
        "ENV API_KEY=abc: a secret baked into the image",
        "EXPOSE 31337: not in the docs",
    ]


def test_the_onceonly_image_installs_the_locked_dependencies_on_a_named_base() -> None:
    steps = _instructions(COMPOSE.parent / "Dockerfile")
    runs = " ".join(rest for word, rest in steps if word == "RUN")
    assert ("COPY", "requirements/runtime.lock ./requirements.lock") in steps
    # every package from the lock, checked against its hashes, none resolved at build time
    assert "pip install --require-hashes --no-deps -r requirements.lock" in runs
    assert "pip install --no-deps ." in runs  # onceonly itself adds no dependency
    assert steps[0][0] == "ARG" and steps[0][1].startswith("BASE_IMAGE=")
    assert steps[1] == ("FROM", "${BASE_IMAGE}")


def test_long_running_services_have_a_shell_health_check() -> None:
    """A string (CMD-SHELL): podman-compose 1.0 garbles the CMD form (it quotes each word
    twice) and pops the first word of a list from the one copy a service's replicas share."""
    services = _load(COMPOSE.read_text(encoding="utf-8"))["services"]
    for name, service in services.items():
        if name in UNCHECKED:
            continue
        test = (service.get("healthcheck") or {}).get("test")
        assert isinstance(test, str) and test.strip(), f"{name}: {test!r}"


def test_the_images_default_to_public_ones() -> None:
    """An image built here is named by a variable; a user elsewhere keeps the public one."""
    services = _load(COMPOSE.read_text(encoding="utf-8"))["services"]
    for name, service in services.items():
        image = DEFAULTED.sub(lambda m: m["default"], str(service.get("image", "")))
        assert image and not image.startswith("localhost/"), f"{name}: {image}"


def test_the_default_writer_of_the_compose_workers_loads() -> None:
    """The workers' ONCEONLY_REPLY_WRITER default names a writer the package has (a module
    moved without this default once left every compose worker unable to start)."""
    from onceonly.processors.writer.loading import load_writer

    defaults = re.findall(r"\$\{ONCEONLY_REPLY_WRITER:-([^}]+)\}", COMPOSE.read_text())

    assert defaults
    for spec in defaults:
        assert callable(load_writer(spec))
