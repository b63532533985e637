"""A worker or a command that does not use Nylas does not import its SDK (0.5 s of CPU each)."""

from __future__ import annotations

import subprocess
import sys


def test_the_worker_and_the_cli_load_without_the_nylas_sdk() -> None:
    probe = (
        "import sys, onceonly.processors.runtime.worker, onceonly.cli, "
        "onceonly.processors.mail.registry; "
        "print(sorted(m for m in sys.modules if m == 'nylas' or m.startswith('nylas.')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"


def test_a_nylas_sender_still_makes_the_sdk_client_when_given_none() -> None:
    from onceonly.processors.mail.nylas.sender import NylasSender

    sender = NylasSender("nyk_test", api_uri="http://127.0.0.1:9/")
    assert type(sender.client).__module__.startswith("nylas")
