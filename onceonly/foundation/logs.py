"""structlog configuration, applied once by the CLI at start-up (never at import).

structlog's own lines and the standard library's (faust, aiokafka, librdkafka through
``onceonly.foundation.kafka``) go through one renderer, so ingest and the worker log alike.
"""

from __future__ import annotations

import logging
import sys

import structlog

#: libraries whose INFO lines are start-up chatter (faust prints its subscriptions and
#: recovery offsets as box-drawn tables); they log at WARNING and above unless at DEBUG
CHATTY = ("faust", "mode", "aiokafka")


#: (logger, text) of ERROR lines that only mean "the broker is still starting": shown at INFO
TRANSIENT = (("aiokafka.consumer.group_coordinator", "GroupCoordinatorNotAvailableError"),)


class Transient(logging.Filter):
    """Demotes a known start-up ERROR (the group coordinator not there yet) to INFO."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        if self.text in record.getMessage():
            record.levelno, record.levelname = logging.INFO, "INFO"
            return logging.getLogger(record.name).isEnabledFor(logging.INFO)
        return True


def _renderer(json: bool) -> structlog.types.Processor:
    if json:
        return structlog.processors.JSONRenderer()
    return structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())


def configure_logging(level: str = "INFO", *, json: bool = False) -> None:
    """Route structlog and the standard library's logging to stderr at ``level``."""
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        numeric = logging.INFO
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                _renderer(json),
            ],
        )
    )
    logging.basicConfig(level=numeric, handlers=[handler], force=True)
    for name in CHATTY:
        logging.getLogger(name).setLevel(numeric if numeric <= logging.DEBUG else logging.WARNING)
    for name, text in TRANSIENT:
        logger = logging.getLogger(name)
        logger.filters = [f for f in logger.filters if not isinstance(f, Transient)]
        logger.addFilter(Transient(text))
    # httpx logs every request at INFO: one line per reply is noise, and costs CPU
    logging.getLogger("httpx").setLevel(max(numeric, logging.WARNING))
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, _renderer(json)],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )
