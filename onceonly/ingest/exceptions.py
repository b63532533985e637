"""Errors raised while accepting a webhook delivery.

Both carry a ``check``: a short, fixed reason string that is safe to use as a
Prometheus label and a log field. The message is for humans: it says what
failed and what to do, and never contains a secret or a signature.
"""

from typing import Literal

from onceonly.foundation.errors import OnceOnlyError

VerificationCheck = Literal[
    "missing_header",
    "malformed_header",
    "bad_signature",
    "timestamp_out_of_tolerance",
    "body_not_utf8",
]
PayloadCheck = Literal["not_json", "no_event_id", "bad_shape"]


class IngestError(OnceOnlyError):
    """Base class of the ingest service's errors."""


class VerificationError(IngestError):
    """A delivery's signature could not be verified, so it must not be recorded.

    ``check`` says which step failed: ``missing_header``, ``malformed_header``,
    ``bad_signature``, ``timestamp_out_of_tolerance`` or ``body_not_utf8``.
    """

    def __init__(self, check: VerificationCheck, message: str) -> None:
        super().__init__(message)
        self.check: VerificationCheck = check


class PayloadError(IngestError):
    """A verified body is not what the provider sends.

    ``check`` is ``not_json``, ``no_event_id`` or ``bad_shape``.
    """

    def __init__(self, check: PayloadCheck, message: str) -> None:
        super().__init__(message)
        self.check: PayloadCheck = check
