"""The images of the compose stack, built on this machine from sources it can reach.

No registry of images is needed: a Debian bookworm root made with ``debootstrap`` from
Debian's archive (cached as a tarball under ``.run/compose/``) is imported with podman;
on it Debian's Python (``compose/python/``), the onceonly image (the root ``Dockerfile``
with ``BASE_IMAGE``), Kafka from the Maven jars ``python -m devstack broker`` runs
(``compose/kafka/``) and Prometheus from Debian's package (``compose/prometheus/``).
Every step runs under ``nice -n 19``; podman and friends are installed with apt-get
where missing, and podman told to use runc and cgroupfs (``CONTAINERS_CONF``) if it
has no ``containers.conf`` yet.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from devstack.jars import kafka_classpath, pom_kafka_version

ROOT = Path(__file__).resolve().parent.parent
COMPOSE_DIR = ROOT / "compose"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
SUITE = "bookworm"
NICE = ["nice", "-n", "19"]
#: a build's RUN steps run in containers of their own (runc: a new session and, with
#: cgroupfs, a cpu cgroup of their own), out of reach of the nice above and of the
#: scheduler autogroup .ci/run nices: at the default 1,024 shares one build step took a
#: third of 2 cores from two spinners at nice 0 (3,216 loop rounds in 8 s), at 2 shares
#: nothing (10 rounds; measured 2026-12-04). Shares only weigh a busy CPU: alone, a build
#: runs at full speed.
CPU_SHARES = ["--cpu-shares", "2"]

#: command -> the Debian package that has it
HOST_TOOLS = {
    "podman": "podman",
    "runc": "runc",
    "buildah": "buildah",
    "podman-compose": "podman-compose",
    "debootstrap": "debootstrap",
}
CONTAINERS_CONF = Path("/etc/containers/containers.conf")
#: Debian's podman 4.3 as root on this kind of machine: crun fails on setrlimit and on
#: hybrid cgroups, systemd is not PID 1
CONTAINERS_CONF_TEXT = """\
[containers]
default_ulimits = []
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
"""

#: the host's CA certificates, mounted for the RUN steps of a build only (in no layer): a
#: host behind a TLS-inspecting proxy reaches PyPI with them (Debian's pip reads this file)
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")

BASE = "localhost/onceonly-debian:bookworm"
PYTHON = "localhost/onceonly-python:3.11"
ONCEONLY = "localhost/onceonly:local"
KAFKA = "localhost/onceonly-kafka:{version}"
PROMETHEUS = "localhost/onceonly-prometheus:bookworm"


@dataclass(frozen=True)
class Built:
    """One image: its name, what it took to build and its size."""

    image: str
    seconds: float
    size_bytes: int


def missing_packages(which: Callable[[str], str | None] = shutil.which) -> list[str]:
    """The Debian packages to install for the commands that are not on PATH."""
    return sorted({pkg for cmd, pkg in HOST_TOOLS.items() if which(cmd) is None})


def ensure_host(log: Callable[[str], None] = print) -> None:
    """Install podman, runc, buildah, podman-compose and debootstrap where missing, and
    write podman's ``containers.conf`` (runc, cgroupfs, no default ulimits) if absent."""
    packages = missing_packages()
    if packages:
        log(f"apt-get install {' '.join(packages)}")
        env_cmd = ["env", "DEBIAN_FRONTEND=noninteractive"]
        apt = [*env_cmd, "apt-get", "-o", "DPkg::Lock::Timeout=600"]  # another may hold it
        _run([*apt, "update", "-q"])
        _run([*apt, "install", "-y", "-q", *packages])
    if not CONTAINERS_CONF.exists():
        log(f"writing {CONTAINERS_CONF} (runtime runc, cgroup_manager cgroupfs)")
        CONTAINERS_CONF.parent.mkdir(parents=True, exist_ok=True)
        CONTAINERS_CONF.write_text(CONTAINERS_CONF_TEXT, encoding="utf-8")


def _run(command: Sequence[str], *, cwd: Path | None = None) -> str:
    result = subprocess.run(
        list(command), cwd=cwd, capture_output=True, text=True, check=False, timeout=3600
    )
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-30:])
        raise RuntimeError(f"{' '.join(command)} failed (exit {result.returncode}):\n{tail}")
    return result.stdout


def image_exists(image: str) -> bool:
    return subprocess.run(["podman", "image", "exists", image], check=False).returncode == 0


def image_size(image: str) -> int:
    return int(_run(["podman", "image", "inspect", "--format", "{{.Size}}", image]).strip())


def remove_images(images: Sequence[str]) -> None:
    """Remove ``images`` (and so every cached layer of theirs), for a build from nothing."""
    present = [image for image in images if image_exists(image)]
    if present:
        _run(["podman", "rmi", "--force", *present])
    _run(["podman", "image", "prune", "--force"])


def base_tarball(cache_dir: Path) -> tuple[Path, float]:
    """Debian bookworm (minbase + CA certificates) as a tarball; cached; (path, seconds)."""
    tarball = cache_dir / f"debian-{SUITE}-minbase.tar"
    if tarball.is_file():
        return tarball, 0.0
    started = time.monotonic()
    rootfs = cache_dir / "rootfs.tmp"
    shutil.rmtree(rootfs, ignore_errors=True)
    cache_dir.mkdir(parents=True, exist_ok=True)
    _run(
        [
            *NICE,
            "debootstrap",
            "--variant=minbase",
            "--include=ca-certificates",
            SUITE,
            str(rootfs),
            DEBIAN_MIRROR,
        ]
    )
    # emptied as in debian:bookworm-slim: the downloaded packages and the package lists
    for emptied in ("var/cache/apt", "var/cache/apt/archives", "var/lib/apt/lists"):
        for entry in (rootfs / emptied).glob("*"):
            if entry.is_file():
                entry.unlink()
    partial = tarball.with_suffix(".tar.tmp")
    _run(["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(partial), "."])
    partial.rename(tarball)
    shutil.rmtree(rootfs, ignore_errors=True)
    return tarball, time.monotonic() - started


def build_command(context: Path, tag: str, base: str, dockerfile: Path | None = None) -> list[str]:
    """``podman build`` of one image: Docker's format (it keeps HEALTHCHECK), BASE_IMAGE."""
    command = [*NICE, "podman", "build", *CPU_SHARES, "--format", "docker", "--build-arg"]
    command += [f"BASE_IMAGE={base}", "--tag", tag]
    if HOST_CA_BUNDLE.is_file():
        command += ["--volume", f"{HOST_CA_BUNDLE}:{HOST_CA_BUNDLE}:ro"]
    if dockerfile is not None:
        command += ["--file", str(dockerfile)]
    return [*command, str(context)]


def kafka_context(run_dir: Path) -> Path:
    """compose/kafka/ with libs/: the broker's resolved classpath (Maven's jars), copied."""
    context = run_dir / "compose" / "kafka-context"
    shutil.rmtree(context, ignore_errors=True)
    shutil.copytree(COMPOSE_DIR / "kafka", context)
    libs = context / "libs"
    libs.mkdir()
    for jar in kafka_classpath(run_dir).split(":"):
        shutil.copy2(jar, libs / Path(jar).name)
    return context


def kafka_image() -> str:
    return KAFKA.format(version=pom_kafka_version())


def all_images() -> list[str]:
    return [ONCEONLY, kafka_image(), PROMETHEUS, PYTHON, BASE]


def _build(image: str, command: list[str], log: Callable[[str], None]) -> Built:
    log(f"building {image}")
    started = time.monotonic()
    _run(command, cwd=ROOT)
    built = Built(image, time.monotonic() - started, image_size(image))
    log(f"built    {image} in {built.seconds:.0f} s, {built.size_bytes / 1e6:.0f} MB")
    return built


def _import_base(tarball: Path, log: Callable[[str], None]) -> Built:
    return _build(BASE, [*NICE, "podman", "import", str(tarball), BASE], log)


def build_all(run_dir: Path, log: Callable[[str], None] = print) -> tuple[float, list[Built]]:
    """Every image of the stack; (debootstrap seconds, 0 if cached, and each image built)."""
    tarball, debootstrap_s = base_tarball(run_dir / "compose")
    built = [
        _import_base(tarball, log),
        _build(PYTHON, build_command(COMPOSE_DIR / "python", PYTHON, BASE), log),
        _build(ONCEONLY, build_command(ROOT, ONCEONLY, PYTHON, ROOT / "Dockerfile"), log),
        _build(kafka_image(), build_command(kafka_context(run_dir), kafka_image(), BASE), log),
        _build(PROMETHEUS, build_command(COMPOSE_DIR / "prometheus", PROMETHEUS, BASE), log),
    ]
    return debootstrap_s, built


def build_kafka(run_dir: Path, log: Callable[[str], None] = print) -> tuple[float, list[Built]]:
    """The Kafka image alone, on the base (made and imported only if it is missing: after
    ``make compose-test`` both are cached); (debootstrap seconds, each image built)."""
    debootstrap_s = 0.0
    built: list[Built] = []
    if not image_exists(BASE):
        tarball, debootstrap_s = base_tarball(run_dir / "compose")
        built.append(_import_base(tarball, log))
    built.append(
        _build(kafka_image(), build_command(kafka_context(run_dir), kafka_image(), BASE), log)
    )
    return debootstrap_s, built
