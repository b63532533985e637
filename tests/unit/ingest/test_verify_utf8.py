"""A Svix / Standard Webhooks header that is not valid UTF-8 (a lone surrogate, as aiohttp's
surrogateescape decoding can give) is a malformed header, checked before any library:
standardwebhooks 1.x raised UnicodeEncodeError for it (found by CI's test-newest)."""

from __future__ import annotations

import base64
import time

import pytest

from onceonly.ingest.verify import VerificationError, verify_standard, verify_svix

SECRET = "whsec_" + base64.b64encode(b"k" * 24).decode()


@pytest.mark.parametrize(
    ("verify", "prefix"), [(verify_standard, "webhook"), (verify_svix, "svix")]
)
def test_a_header_with_a_lone_surrogate_is_a_malformed_header(verify, prefix) -> None:  # type: ignore[no-untyped-def]
    headers = {
        f"{prefix}-id": "msg_\udacd",
        f"{prefix}-timestamp": str(int(time.time())),
        f"{prefix}-signature": "v1," + base64.b64encode(b"s" * 32).decode(),
    }

    with pytest.raises(VerificationError) as raised:
        verify(b"{}", headers, SECRET)

    assert raised.value.check == "malformed_header"
