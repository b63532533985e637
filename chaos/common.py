"""What every part of a chaos run shares: paths, names, sizes, the clock."""

from __future__ import annotations

import re
import time
from datetime import datetime
from pathlib import Path

from foundation.settings import DEFAULT_TOPICS

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "chaos" / "results"
APP_ID = "onceonly-chaos"
PARTITIONS = 8
DELIVERIES_TOPIC = DEFAULT_TOPICS["deliveries"]
LEDGER_TOPIC = DEFAULT_TOPICS["ledger"]
DEAD_LETTER_TOPIC = DEFAULT_TOPICS["dead_letters"]
PRODUCE_TIMEOUT_MS = 3000
SEND_ATTEMPTS = 12


CATCH_UP_LINE = re.compile(
    r"found (\d+), answered (\d+), skipped (\d+) \((\d+) sent by the agent, (\d+) already "
    r"answered\), pending (\d+)"
)


class ChaosError(Exception):
    """The run could not be carried out (not a verdict): exit 2."""


def now() -> float:
    return time.monotonic()


def iso(when: datetime) -> str:
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")
