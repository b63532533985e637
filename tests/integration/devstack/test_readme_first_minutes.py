"""The README's first five minutes, typed as a newcomer types them.

The commands come from the README's own block (``## The first five minutes``), so the
README and this test cannot drift: each runs in a fresh shell at the checkout's root
(``bash -c``, no virtualenv activated, nothing on PYTHONPATH, no ONCEONLY_* of ours but
free ports and a temporary run directory, the same in both terminals), terminal 1's in the
background until the stack says it is ready, then terminal 2's. The report must say, in the
README's own words (its sample output, "…" standing for what differs run to run), what
became of each delivery.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from onceonly.processors.mail.outbox import OUTBOX_FILE
from tests.integration.devstack.history import seed_ledger
from tests.integration.devstack.running_up import (
    ROOT,
    Shell,
    fresh_shell_env,
    running_in_shell,
    wait_for,
)
from tests.readme import plain_blocks, section, sh_commands

pytestmark = pytest.mark.integration

README = ROOT / "README.md"
FIRST_FIVE_MINUTES = "The first five minutes"


def _first_five_minutes() -> str:
    return section(README.read_text(encoding="utf-8"), FIRST_FIVE_MINUTES)


def _commands() -> tuple[str, str]:
    """Terminal 1's command and terminal 2's, as the README's block has them."""
    commands = sh_commands(_first_five_minutes())
    assert len(commands) == 2, f"the block is terminal 1 then terminal 2: {commands}"
    return commands[0], commands[1]


def _report_lines() -> list[re.Pattern[str]]:
    """The README's sample report of send (its block that starts with ``posted``), one
    pattern per line, "…" matching anything; the reply's text line left out (it wraps)."""
    [sample] = [b for b in plain_blocks(_first_five_minutes()) if b.startswith("posted ")]
    return [
        re.compile(".*?".join(re.escape(part) for part in line.split("…")) + "$")
        for line in sample.splitlines()
        if line and not line.startswith(" ")
    ]


def _unmatched(expected: list[re.Pattern[str]], printed: str) -> list[str]:
    """The expected lines not found in ``printed``, in order (a subsequence of its lines)."""
    lines, at, missing = printed.splitlines(), 0, []
    for pattern in expected:
        found = next((n for n in range(at, len(lines)) if pattern.match(lines[n])), None)
        if found is None:
            missing.append(pattern.pattern)
        else:
            at = found + 1
    return missing


@pytest.fixture(scope="module")
def terminal_1(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shell]:
    if not (ROOT / ".venv" / "bin" / "python").exists():
        pytest.fail(
            f"no virtualenv at {ROOT / '.venv'}: run make install (the README's "
            "commands run the checkout's .venv)"
        )
    stale = subprocess.run(["make", "-q", ".venv/.installed-stamp"], cwd=ROOT, check=False)
    if stale.returncode != 0:
        pytest.fail(
            "the checkout's .venv is older than its lock: run make install first "
            "(make run would rebuild it)"
        )
    tmp = tmp_path_factory.mktemp("newcomer")
    run, _ = _commands()
    with running_in_shell(run, tmp, fresh_shell_env(tmp)) as shell:
        wait_for(lambda: "worker ready" in shell.output(), 180, "the worker", shell.log)
        yield shell


def _terminal_2(shell: Shell, command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", command],
        cwd=ROOT,
        env=shell.env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_readme_block_typed_in_two_fresh_shells_reports_what_the_readme_says(
    terminal_1: Shell,
) -> None:
    _, send = _commands()

    typed = _terminal_2(terminal_1, send)

    assert typed.returncode == 0, f"{send!r} as typed:\n{typed.stdout}\n{typed.stderr}"
    printed = typed.stdout
    assert "no reply recorded yet" not in printed, printed
    assert _unmatched(_report_lines(), printed) == [], printed
    assert printed.count("    reply: ") == 1, printed


#: how long after the reply's send (the dry-run outbox written) send may take to report it:
#: the ledger's and the dedupe changelog's last writes, and a poll; reading the whole ledger
#: again (what it did) takes longer than this with the history below
REPORTED_WITHIN_S = 3.0


def test_send_finds_the_replies_in_a_ledger_whose_history_outlasts_its_wait(
    terminal_1: Shell,
) -> None:
    """A stack that has answered for a while: its ledger holds 400,000 records of earlier
    replies, more than a read of the whole ledger gets through within --wait. The report
    still says what became of each delivery, and ends as soon as that is known."""
    seed_ledger(terminal_1.env, records=400_000)
    command = ".venv/bin/python -m devstack send --wait 12"

    typed = _terminal_2(terminal_1, command)
    ended = time.time()

    assert typed.returncode == 0, typed.stderr
    printed = typed.stdout
    assert "no reply recorded yet" not in printed, printed
    assert "not every outcome was known" not in printed, printed
    assert _unmatched(_report_lines(), printed) == [], printed
    outbox = Path(terminal_1.env["ONCEONLY_RUN_DIR"]) / OUTBOX_FILE
    after_s = ended - outbox.stat().st_mtime
    assert after_s < REPORTED_WITHIN_S, f"reported {after_s:.1f} s after the send: {printed}"
