"""Debian packages that integration tests drive (prometheus, chromium), installed where missing.

Installed with apt-get as root (or through ``sudo -n``); a machine that can do neither
skips the test that needs them. A package's system service is never left running: the
tests start their own processes with their own ports and state.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from testkit.apt import APT_GET, one_at_a_time


def as_root(command: list[str]) -> list[str] | None:
    if os.geteuid() == 0:
        return command
    if shutil.which("sudo"):
        return ["sudo", "-n", *command]
    return None


def install_debian_packages(*packages: str, service: str | None = None) -> None:
    """``apt-get install`` these packages without letting them start a service.

    A policy-rc.d denies service starts during the install (docker-style images already
    have one), and ``service``, if it started anyway, is stopped afterwards.
    """
    names = " ".join(packages)
    if shutil.which("apt-get") is None:
        pytest.skip(f"{names} is not installed and apt-get is unavailable to install it")
    update = as_root([*APT_GET, "update", "-qq"])
    install = as_root([*APT_GET, "install", "-y", "-qq", "--no-install-recommends", *packages])
    if update is None or install is None:
        pytest.skip(f"{names} is not installed and installing it needs root or sudo")
    policy = Path("/usr/sbin/policy-rc.d")
    own_policy = os.geteuid() == 0 and not policy.exists()
    if own_policy:
        policy.write_text(
            "#!/bin/sh\n# onceonly tests: no service starts during install\nexit 101\n"
        )
        policy.chmod(0o755)
    try:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for command in (update, install):
            with one_at_a_time():  # another test's apt-get may run beside this one
                done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
            if done.returncode != 0:
                pytest.fail(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")
    finally:
        if own_policy:
            policy.unlink()
    if service is not None:
        _stop_service(service)


def _stop_service(service: str) -> None:
    """Stop a service that started anyway (no policy-rc.d could be written)."""
    if Path("/run/systemd/system").exists():
        stop = as_root(["systemctl", "stop", f"{service}.service"])
    elif Path(f"/etc/init.d/{service}").exists():
        stop = as_root([f"/etc/init.d/{service}", "stop"])
    else:
        stop = None
    if stop is not None:
        subprocess.run(stop, capture_output=True, timeout=60, check=False)
