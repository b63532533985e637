"""``make test-testcontainers``: integration tests through the testcontainers path, on podman.

    python -m devstack.testcontainers_run [--image IMAGE] [--no-cache] [-- PYTEST ARGS]

The session fixture starts Kafka with testcontainers when a Docker engine answers (what
users with Docker get). No Docker engine runs here, but podman serves Docker's API: podman
is installed with compose-test's code where missing (devstack.compose_images.ensure_host),
the Kafka image is compose-test's, built from the Maven jars (compose_images.build_kafka:
cached after ``make compose-test``), and ``podman system service`` answers on a unix socket
under .run/testcontainers/ for this run only. The tests (the ingest package unless told
otherwise) run with ONCEONLY_TEST_KAFKA=testcontainers (that path or a failed session,
never a fallback) and ONCEONLY_TEST_KAFKA_IMAGE. The run fails unless the tests pass, the
session recorded the testcontainers path on that image (devstack.session_kafka), and no
container of the run is left; then the service is stopped.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from devstack import compose_images as images
from devstack import session_kafka
from devstack.children import stop_child
from devstack.compose_test import Log

ROOT = Path(__file__).resolve().parent.parent
#: test_broker_outage starts (and stops) a broker of its own: through testcontainers it
#: would prove nothing, and it is the package's slowest test
DEFAULT_TESTS = (
    "tests/integration/ingest",
    "--ignore=tests/integration/ingest/test_broker_outage.py",
)
TC_LABEL = "label=org.testcontainers=true"


def pytest_env(base: Mapping[str, str], socket: Path, image: str, record: Path) -> dict[str, str]:
    """The environment of the tests: the testcontainers path forced, on the socket's engine."""
    env = {k: v for k, v in base.items() if k != session_kafka.EXTERNAL_ENV}
    env.update(
        {
            "DOCKER_HOST": f"unix://{socket}",
            # the reaper's image (testcontainers/ryuk) would come from Docker Hub, which
            # this machine cannot reach: the fixture removes its container itself, and
            # this run checks that it did
            "TESTCONTAINERS_RYUK_DISABLED": "true",
            # a CI machine that is itself a container (/.dockerenv) is taken for Docker in
            # Docker, reached through the gateway's address (whose lookup fails on podman
            # 4.3's container list); the engine runs on this machine: ports on localhost
            "TESTCONTAINERS_CONNECTION_MODE": "docker_host",
            session_kafka.CHOICE_ENV: "testcontainers",
            session_kafka.IMAGE_ENV: image,
            session_kafka.RECORD_ENV: str(record),
        }
    )
    return env


def verdict(taken: session_kafka.Taken | None, image: str) -> str | None:
    """Why the session did not take the testcontainers path on ``image``; None if it did."""
    if taken is None:
        return "the session recorded no broker: no test asked for one, or it never started"
    if taken.path != "testcontainers":
        return f"the session took the {taken.path} path ({taken.describe()}), not testcontainers"
    if taken.image != image:
        return f"the session's container ran {taken.image}, not {image}"
    return None


class PodmanService:
    """``podman system service`` on a unix socket, for the length of a ``with`` block."""

    def __init__(self, socket: Path, log_path: Path) -> None:
        self.socket = socket
        self.log_path = log_path
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> PodmanService:
        self.socket.parent.mkdir(parents=True, exist_ok=True)
        self.socket.unlink(missing_ok=True)
        with self.log_path.open("wb") as log:
            self._process = subprocess.Popen(
                ["podman", "system", "service", "--time=0", f"unix://{self.socket}"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            self._wait_answers(timeout_s=30.0)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _wait_answers(self, timeout_s: float) -> None:
        import docker  # type: ignore[import-untyped]

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                raise RuntimeError(f"podman system service exited: see {self.log_path}")
            try:
                docker.DockerClient(base_url=f"unix://{self.socket}", timeout=3).ping()
                return
            except Exception:
                time.sleep(0.2)
        raise RuntimeError(f"podman system service did not answer in {timeout_s:.0f} s")

    def stop(self) -> None:
        process, self._process = self._process, None
        stop_child(process, timeout_s=15.0)
        self.socket.unlink(missing_ok=True)


def testcontainers_ids() -> set[str]:
    """The containers testcontainers made (its label), running or not."""
    out = subprocess.run(
        ["podman", "ps", "-aq", "--no-trunc", "--filter", TC_LABEL],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(out.split())


def run_tests(
    run_dir: Path, image: str, pytest_args: Sequence[str], log: Log
) -> tuple[int, str | None]:
    """The tests through the service's socket; (pytest's exit status, what went wrong with
    the path or the clean-up, or None)."""
    work = run_dir / "testcontainers"
    socket, record = work / "podman.sock", work / "kafka-path.json"
    record.unlink(missing_ok=True)
    before = testcontainers_ids()
    started = time.monotonic()
    with PodmanService(socket, work / "podman-service.log"):
        log(
            f"podman system service answers on unix://{socket} ({time.monotonic() - started:.1f} s)"
        )
        env = pytest_env(os.environ, socket, image, record)
        command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *pytest_args]
        log(f"$ {' '.join(command[1:])}")
        status = subprocess.run(command, cwd=ROOT, env=env, check=False).returncode
        left = testcontainers_ids() - before
        if left:
            subprocess.run(["podman", "rm", "--force", "--volumes", *sorted(left)], check=False)
    log("podman system service stopped")
    taken = session_kafka.read_record(record)
    if taken is not None:
        log(f"kafka: {taken.describe()}")
    problem = verdict(taken, image)
    if problem is None and left:
        problem = f"the session left {len(left)} container(s) behind: {sorted(left)}"
    return status, problem


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devstack.testcontainers_run")
    parser.add_argument("--image", default=images.kafka_image(), help="built here if it is ours")
    parser.add_argument(
        "--no-cache", action="store_true", help="remove the Kafka image, base and tarball first"
    )
    parser.add_argument("--run-dir", type=Path, default=ROOT / ".run")
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER, help="after --: pytest's")
    args = parser.parse_args(argv)
    pytest_args = [a for a in args.pytest_args if a != "--"] or ["-q", *DEFAULT_TESTS]
    run_dir = args.run_dir.resolve()
    log = Log()
    images.ensure_host(log)
    log(f"podman and friends present ({time.monotonic() - log.started:.1f} s)")
    if args.no_cache:
        log("removing the Kafka image, the base and the debootstrap tarball: from nothing")
        images.remove_images([images.kafka_image(), images.BASE])
        for tarball in (run_dir / "compose").glob("debian-*.tar"):
            tarball.unlink()
    if args.image == images.kafka_image():
        built_at = time.monotonic()
        debootstrap_s, built = images.build_kafka(run_dir, log)
        summary = "; ".join(f"{b.image} {b.seconds:.0f} s" for b in built)
        took = time.monotonic() - built_at
        log(f"images in {took:.1f} s (debootstrap {debootstrap_s:.0f} s; {summary})")
    status, problem = run_tests(run_dir, args.image, pytest_args, log)
    if problem is not None:
        log(f"FAILED: {problem}")
        return 1
    log(f"tests exited {status}; {time.monotonic() - log.started:.0f} s in all")
    return status


if __name__ == "__main__":
    sys.exit(main())
