"""What make test-testcontainers (devstack.testcontainers_run) gives the tests, and what
it accepts as proof that they ran on the testcontainers path."""

from __future__ import annotations

from pathlib import Path

from devstack import session_kafka as sk
from devstack.testcontainers_run import pytest_env, verdict


def test_the_run_accepts_only_the_testcontainers_path_on_its_image() -> None:
    image = "localhost/onceonly-kafka:4.1.1"
    assert verdict(sk.Taken("testcontainers", "localhost:1", image, "c"), image) is None
    assert "no broker" in str(verdict(None, image))
    assert "embedded" in str(verdict(sk.Taken("embedded", "127.0.0.1:1"), image))
    other = sk.Taken("testcontainers", "localhost:1", "apache/kafka:4.1.1", "c")
    assert "not localhost/onceonly-kafka" in str(verdict(other, image))


def test_the_tests_env_forces_testcontainers_on_the_socket(tmp_path: Path) -> None:
    socket, record = tmp_path / "podman.sock", tmp_path / "record.json"
    env = pytest_env({sk.EXTERNAL_ENV: "kafka:9092", "HOME": "/root"}, socket, "img:1", record)
    assert sk.EXTERNAL_ENV not in env
    assert env["HOME"] == "/root"
    assert env["DOCKER_HOST"] == f"unix://{socket}"
    assert env[sk.CHOICE_ENV] == "testcontainers"
    assert env[sk.IMAGE_ENV] == "img:1"
    assert env[sk.RECORD_ENV] == str(record)
