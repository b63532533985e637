"""One format for everything: structlog's lines and the standard library's alike."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import structlog

from onceonly.foundation.logs import CHATTY, TRANSIENT, configure_logging


class Stderr:
    """What the test wrote to stderr so far (configure_logging binds sys.stderr as it is)."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys

    def getvalue(self) -> str:
        return self.capsys.readouterr().err


@pytest.fixture
def stderr(capsys: pytest.CaptureFixture[str]) -> Iterator[Stderr]:
    """Undoes configure_logging afterwards: it binds the stream capsys closes at the end."""
    root = logging.getLogger()
    saved_root = (root.handlers[:], root.level)
    named = [logging.getLogger(n) for n in (*CHATTY, "httpx", *(t for t, _ in TRANSIENT))]
    saved = [(logger, logger.level, logger.filters[:]) for logger in named]
    saved_structlog = structlog.get_config()
    yield Stderr(capsys)
    root.handlers[:], root.level = saved_root
    for logger, level, filters in saved:
        logger.setLevel(level)
        logger.filters[:] = filters
    structlog.configure(**saved_structlog)


def test_a_standard_library_line_is_rendered_as_structlog_renders_ours(
    stderr: Stderr,
) -> None:
    configure_logging("INFO")
    logging.getLogger("some.library").warning("disk %s", "full")

    assert "[warning  ] disk full" in stderr.getvalue()


def test_a_standard_library_line_is_json_when_the_logs_are(stderr: Stderr) -> None:
    configure_logging("INFO", json=True)
    logging.getLogger("some.library").warning("disk full")

    assert '"event": "disk full"' in stderr.getvalue()


def test_faust_info_lines_are_not_shown_at_info(stderr: Stderr) -> None:
    configure_logging("INFO")
    logging.getLogger("faust.tables.recovery").info("Highwater for active changelog partitions")

    assert stderr.getvalue() == ""


def test_faust_info_lines_are_shown_at_debug(stderr: Stderr) -> None:
    configure_logging("DEBUG")
    logging.getLogger("faust.tables.recovery").info("Highwater for active changelog partitions")

    assert "Highwater" in stderr.getvalue()


def test_the_group_coordinator_not_yet_there_is_not_an_error_at_start(
    stderr: Stderr,
) -> None:
    configure_logging("INFO")
    logging.getLogger("aiokafka.consumer.group_coordinator").error(
        "Group Coordinator Request failed: [Error 15] GroupCoordinatorNotAvailableError"
    )

    assert stderr.getvalue() == ""


def test_another_aiokafka_error_is_still_shown(stderr: Stderr) -> None:
    configure_logging("INFO")
    logging.getLogger("aiokafka.consumer.group_coordinator").error("OffsetCommit failed")

    assert "OffsetCommit failed" in stderr.getvalue()
