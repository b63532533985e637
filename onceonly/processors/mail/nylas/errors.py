"""The one seam where the nylas SDK's and requests' errors become our send policy.

The SDK is imported when the first error is classified, not with this module: importing
``nylas`` costs about 0.5 s of CPU, which every worker start and ``onceonly`` command paid
whether or not it used Nylas."""

from __future__ import annotations

import requests

from onceonly.processors.exceptions import SendError, SendFailure
from onceonly.processors.mail.nylas.messages import is_replay


def classify(exc: BaseException) -> SendError:
    """The one seam where the SDK's and requests' errors become our send policy."""
    from nylas.models.errors import (  # type: ignore[import-untyped]
        AbstractNylasApiError,
        AbstractNylasSdkError,
        NylasApiError,
        NylasSdkTimeoutError,
    )

    if isinstance(exc, NylasSdkTimeoutError):
        return SendError(SendFailure.RETRY, f"Nylas did not answer in time: {exc}")
    if isinstance(exc, NylasApiError):
        status = int(exc.status_code or 0)
        kind = str(getattr(exc, "type", "") or "")
        if kind == "api.invalid_idempotent_request":
            return SendError(
                SendFailure.CONFLICT,
                f"409 {kind}: the key was used with a different payload; "
                "this is a bug, not a retry: inspect the dead letter",
                status=409,
            )
        if kind == "api.concurrent_idempotent_request":
            return SendError(
                SendFailure.IN_FLIGHT, f"409 {kind}: the first send is in flight", status=409
            )
        if kind == "api.invalid_idempotency_key":
            return SendError(
                SendFailure.REJECTED,
                f"400 {kind}: the key is not one Nylas takes (a bug)",
                status=400,
            )
        if status == 409:
            return SendError(SendFailure.CONFLICT, f"409 {kind or 'conflict'}: {exc}", status=409)
        if status in (408, 429) or status >= 500:
            if is_replay(exc.headers):
                return SendError(
                    SendFailure.REJECTED,
                    f"Nylas replayed the first attempt's {status} from its idempotency cache; "
                    "the key answers the same for up to 1 h: retry the dead letter after that",
                    status=status,
                )
            return SendError(SendFailure.RETRY, f"Nylas answered {status} {kind}", status=status)
        return SendError(
            SendFailure.REJECTED, f"Nylas refused: {status} {kind}: {exc}", status=status
        )
    if isinstance(exc, AbstractNylasApiError):
        return SendError(SendFailure.REJECTED, f"Nylas refused: {exc}", status=exc.status_code)
    if isinstance(exc, requests.RequestException | AbstractNylasSdkError):
        return SendError(SendFailure.RETRY, f"Nylas unreachable: {exc!r}")
    if isinstance(exc, KeyError | TypeError | ValueError):  # an answer the SDK cannot read
        return SendError(SendFailure.RETRY, f"Nylas' answer could not be read: {exc!r}")
    raise exc
