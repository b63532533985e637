"""Which broker a test session takes (devstack.session_kafka), and the container's settings
and start script (devstack.tc_kafka)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from devstack import session_kafka as sk
from devstack.tc_kafka import start_script

ROOT = Path(__file__).resolve().parents[3]
KAFKA_CONFIG_SH = ROOT / "compose" / "kafka" / "kafka-config.sh"


def _never() -> bool:
    raise AssertionError("the Docker engine was asked, though the choice did not need it")


def _answers() -> bool:
    return True


def _silent() -> bool:
    return False


@pytest.mark.parametrize(
    ("env", "docker", "path"),
    [
        ({}, _answers, "testcontainers"),
        ({}, _silent, "embedded"),
        ({sk.CHOICE_ENV: "auto"}, _silent, "embedded"),
        ({sk.CHOICE_ENV: "testcontainers"}, _answers, "testcontainers"),
        ({sk.CHOICE_ENV: " Embedded "}, _never, "embedded"),
        ({sk.EXTERNAL_ENV: "kafka:9092"}, _never, "external"),
    ],
)
def test_the_path_follows_the_variables_and_the_engine(
    env: dict[str, str], docker: object, path: str
) -> None:
    assert sk.choose(env, docker) == path  # type: ignore[arg-type]


def test_testcontainers_asked_for_without_an_engine_fails_instead_of_falling_back() -> None:
    env = {sk.CHOICE_ENV: "testcontainers", "DOCKER_HOST": "unix:///nowhere.sock"}
    with pytest.raises(sk.KafkaChoiceError, match=r"no Docker engine answers.*nowhere\.sock"):
        sk.choose(env, _silent)


@pytest.mark.parametrize(
    "env",
    [
        {sk.CHOICE_ENV: "docker"},
        {sk.CHOICE_ENV: "testcontainers", sk.EXTERNAL_ENV: "kafka:9092"},
        {sk.CHOICE_ENV: "embedded", sk.EXTERNAL_ENV: "kafka:9092"},
    ],
)
def test_a_choice_that_cannot_be_honoured_is_an_error(env: dict[str, str]) -> None:
    with pytest.raises(sk.KafkaChoiceError):
        sk.choose(env, _answers)


def test_the_image_is_apache_kafka_unless_set() -> None:
    assert sk.image({}) == "apache/kafka:4.1.1"
    assert sk.image({sk.IMAGE_ENV: "localhost/onceonly-kafka:4.1.1"}) == (
        "localhost/onceonly-kafka:4.1.1"
    )


def _properties(text: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in text.splitlines() if "=" in line)
    return {k.strip(): v.strip() for k, v in pairs if not k.lstrip().startswith("#")}


def test_the_container_broker_gets_the_embedded_brokers_settings_but_its_topology() -> None:
    """broker_env through the image's own KAFKA_* -> server.properties script gives back
    every setting of the embedded broker's template but the listeners, roles and paths."""
    env = {"PATH": os.environ["PATH"], **sk.broker_env()}
    out = subprocess.run(
        ["sh", str(KAFKA_CONFIG_SH)], env=env, capture_output=True, text=True, check=True
    )
    template = _properties(sk.SERVER_PROPERTIES_TEMPLATE.read_text(encoding="utf-8"))
    expected = {k: v for k, v in template.items() if k not in sk.TOPOLOGY_KEYS}
    assert _properties(out.stdout) == expected
    assert expected["transaction.state.log.replication.factor"] == "1"
    assert expected["message.max.bytes"] == "8388608"


def test_names_with_underscores_and_dashes_survive_the_images_decoding() -> None:
    key = "some_underscored-dashed.name"
    env = {"PATH": os.environ["PATH"], sk.env_name(key): "1"}
    out = subprocess.run(
        ["sh", str(KAFKA_CONFIG_SH)], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.splitlines() == [f"{key}=1"]


def test_a_new_templated_setting_must_be_given_to_the_container_on_purpose(
    tmp_path: Path,
) -> None:
    template = tmp_path / "server.properties.template"
    template.write_text("num.partitions=1\nsasl.port=${sasl_port}\n", encoding="utf-8")
    with pytest.raises(sk.KafkaChoiceError, match=r"sasl\.port"):
        sk.broker_env(template)


def test_the_record_reads_back_what_the_session_took(tmp_path: Path) -> None:
    record = tmp_path / "kafka-path.json"
    assert sk.read_record(record) is None
    taken = sk.Taken("testcontainers", "localhost:4242", "img:1", "abc123")
    sk.write_record({sk.RECORD_ENV: str(record)}, taken)
    assert sk.read_record(record) == taken
    assert taken.describe() == "testcontainers img:1 (container abc123) at localhost:4242"


def _fake_image_scripts(tmp_path: Path, names: list[str]) -> list[str]:
    paths = []
    for name in names:
        script = tmp_path / name
        script.write_text(f'#!/bin/sh\necho "{name} $KAFKA_ADVERTISED_LISTENERS"\n')
        script.chmod(0o755)
        paths.append(str(script))
    return paths


def test_the_start_script_advertises_the_mapped_port_and_runs_the_images_start(
    tmp_path: Path,
) -> None:
    run, kafka_run = _fake_image_scripts(tmp_path, ["run", "kafka-run.sh"])
    text = start_script("PLAINTEXT", "localhost", 40123, scripts=(str(tmp_path / "no"), kafka_run))
    out = subprocess.run(["sh", "-c", text], capture_output=True, text=True, check=True).stdout
    name, listeners = out.split()
    assert name == "kafka-run.sh"
    plaintext, broker = listeners.split(",")
    assert plaintext == "PLAINTEXT://localhost:40123"
    assert broker.startswith("BROKER://") and broker.endswith(":9092") and len(broker) > 14
    first = start_script("PLAINTEXT", "localhost", 1, scripts=(run, kafka_run))
    assert subprocess.run(["sh", "-c", first], capture_output=True, text=True).stdout.startswith(
        "run "
    )


def test_an_image_without_a_start_script_fails_the_container(tmp_path: Path) -> None:
    text = start_script("PLAINTEXT", "localhost", 1, scripts=(str(tmp_path / "none"),))
    result = subprocess.run(["sh", "-c", text], capture_output=True, text=True)
    assert result.returncode == 1
    assert "no Kafka start script" in result.stderr


def test_a_session_forced_onto_testcontainers_without_an_engine_starts_no_broker(
    tmp_path: Path,
) -> None:
    """The fixture end to end, in a child session: the tests that need Kafka error with the
    reason, and no embedded broker is started in its place."""
    env = {k: v for k, v in os.environ.items() if k != sk.EXTERNAL_ENV}
    env.update(
        {
            sk.CHOICE_ENV: "testcontainers",
            "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock",
            sk.RECORD_ENV: str(tmp_path / "record.json"),
        }
    )
    test = "tests/integration/foundation/test_topics.py"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    out = result.stdout + result.stderr
    assert result.returncode != 0
    assert "kafka: ONCEONLY_TEST_KAFKA=testcontainers, but no Docker engine answers" in out
    assert " passed" not in out
    assert sk.read_record(tmp_path / "record.json") is None
