"""The hostile-input suite's requests: provider signing, hypothesis strategies, and how
an answer is judged."""

from __future__ import annotations

import base64
import gzip
import hashlib
import hmac
import json
import string
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import standardwebhooks.webhooks
import stripe
import svix.webhooks
from hypothesis import strategies as st

from onceonly.ingest.app import KNOWN_PROVIDERS
from testkit import signing
from tests.integration.ingest.hostile_live import (
    MAX_BODY,
    PAYLOAD_CHECKS,
    POST_STATUSES,
    ROUTES,
    SECRETS,
    VERIFICATION_CHECKS,
    Answer,
    LiveIngest,
    http_request,
)

# -- signing, as the providers do -------------------------------------------------------


#: the providers that sign as Svix does (an id, a timestamp, a signature): their library's
#: Webhook, and the secret ingest is configured with
SCHEMES: dict[str, tuple[Any, str]] = {
    "agentmail": (svix.webhooks.Webhook, signing.SVIX_SECRET),
    "standard": (standardwebhooks.webhooks.Webhook, signing.STANDARD_SECRET),
}


def sign(
    provider: str, body: bytes, *, at: float, msg_id: str, wrong_secret: bool = False
) -> list[tuple[str, str]]:
    """The verification headers of ``body`` with the providers' own signing code."""
    text = body.decode("utf-8", "replace")  # a non-UTF-8 body is refused before any HMAC
    moment = datetime.fromtimestamp(at, UTC)
    other = "whsec_" + base64.b64encode(b"not-the-configured-secret!").decode()
    if provider in SCHEMES:  # the same scheme, each with its own library and secret
        scheme, secret = SCHEMES[provider]
        signature = scheme(other if wrong_secret else secret).sign(msg_id, moment, text)
        values = (msg_id, str(int(at)), signature)
        return list(zip(SIGNATURE_HEADERS[provider], values, strict=True))
    if provider == "stripe":
        secret = other if wrong_secret else signing.STRIPE_SECRET
        header = stripe.WebhookSignature.generate_signature_header(text, secret, timestamp=int(at))
        return [("Stripe-Signature", header)]
    secret = "not-the-secret" if wrong_secret else signing.NYLAS_SECRET
    if provider == "github":
        secret = "not-the-secret" if wrong_secret else signing.GITHUB_SECRET
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    if provider == "github":
        return [("X-Hub-Signature-256", f"sha256={digest}")]
    return [("X-Nylas-Signature", digest)]


SIGNATURE_HEADERS = {
    "agentmail": ("svix-id", "svix-timestamp", "svix-signature"),
    "standard": ("webhook-id", "webhook-timestamp", "webhook-signature"),
    "stripe": ("Stripe-Signature",),
    "nylas": ("X-Nylas-Signature",),
    "github": ("X-Hub-Signature-256",),
}


# -- strategies ---------------------------------------------------------------------------

TCHAR = string.ascii_letters + string.digits + "!#$%&'*+-.^_`|~"
#: Headers that change the framing, the route or the connection, and those aiohttp's parser
#: refuses twice (its SINGLETON_HEADERS): tried with raw bytes only.
FRAMING = {
    "content-length",
    "transfer-encoding",
    "content-encoding",
    "host",
    "connection",
    "expect",
    "upgrade",
    "te",
    "trailer",
    "keep-alive",
    "proxy-connection",
    "content-location",
    "content-range",
    "content-type",
    "etag",
    "max-forwards",
    "server",
    "user-agent",
}


def header_text(*, latin1: bool, max_size: int = 60) -> st.SearchStrategy[str]:
    """What an HTTP client sends as a header value: no CR, LF or other C0 control.

    C1 controls (0x80-0x9f) and the rest of 0xa0-0xff are obs-text on the wire.
    """
    visible = st.characters(
        max_codepoint=0xFF if latin1 else 0x10FFFF, exclude_categories=("Cc", "Cs")
    )
    extra = st.sampled_from("\t") | st.characters(min_codepoint=0x80, max_codepoint=0x9F)
    return st.text(alphabet=visible | extra, max_size=max_size)


def _b64(size: int) -> st.SearchStrategy[str]:
    return st.binary(min_size=size, max_size=size).map(lambda b: base64.b64encode(b).decode())


def _hex(size: int) -> st.SearchStrategy[str]:
    return st.binary(min_size=size, max_size=size).map(bytes.hex)


def timestamps() -> st.SearchStrategy[str]:
    return st.one_of(
        st.integers(-(10**30), 10**30).map(str),
        st.floats().map(str),
        st.sampled_from(
            ["", "0", "-0", "nan", "inf", "1e99", "0x10", "\u0661\u0662", "\uff11\uff12"]
        ),
        st.integers(-(10**9), 10**9).map(lambda d: str(int(time.time()) + d)),
    )


def garbage_for(header: str, *, latin1: bool) -> st.SearchStrategy[str]:
    """Values shaped like the header's format, and values that are not."""
    text = header_text(latin1=latin1)
    name = header.lower()
    if name.endswith("-timestamp"):
        shaped = timestamps()
    elif name.endswith("-signature") and name != "x-nylas-signature":
        entry = st.tuples(st.sampled_from(["v1", "v1a", "v2", "", "V1"]), _b64(32) | text)
        shaped = st.one_of(
            st.lists(entry, min_size=1, max_size=3).map(
                lambda es: " ".join(f"{v},{s}" for v, s in es)
            ),
            text.map(lambda t: "v1" + t),  # a signature entry with no comma
            st.lists(entry, max_size=3).map(lambda es: "  ".join(f"{v},{s}" for v, s in es)),
        )
    elif name == "stripe-signature":
        item = st.tuples(st.sampled_from(["t", "v1", "v0", "", "T", "t "]), text | _hex(32))
        shaped = st.lists(item, max_size=4).map(lambda xs: ",".join(f"{k}={v}" for k, v in xs))
        shaped = shaped | st.builds(lambda t, v: f"t={t},v1={v}", timestamps(), _hex(32) | text)
    elif name in ("x-nylas-signature", "x-hub-signature-256"):
        hexes = _hex(32) | _hex(31) | st.text(alphabet="0123456789abcdefABCDEF", max_size=70)
        prefixed = st.builds(
            lambda p, h: p + h, st.sampled_from(["sha256=", "sha1=", "=", ""]), hexes
        )
        shaped = prefixed | st.builds(lambda h: h.upper(), _hex(32))
    else:
        shaped = text
    if latin1:  # what http.client can send; the UTF-8 transport sends any of them
        shaped = shaped.filter(_latin1)
    return shaped | text


def _latin1(value: str) -> bool:
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return True


#: JSON texts that have broken parsers and normalisers before.
HOSTILE_JSON = [
    '"\\ud800"',
    '"\\udcff\\ud800x"',
    '"\\u0000"',
    '""',
    '" "',
    "null",
    "true",
    "0",
    "-1",
    "1" + "0" * 400,
    "-" + "9" * 400,
    "1" * 4301,
    "1e400",
    "-1e400",
    "NaN",
    "Infinity",
    "-Infinity",
    "1.5",
    "[]",
    "{}",
    "[" * 1500 + "]" * 1500,
    '{"a":' * 700 + "1" + "}" * 700,
    '"2026-13-45T99:99:99Z"',
    '"9999-12-31T23:59:59+14:00"',
    '"\\n\\r\\t\\"\\\\"',
    '"' + "\u2603" * 50 + '"',
    '"' + "x" * 2000 + '"',
]

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)
hostile_json = st.sampled_from(HOSTILE_JSON) | json_values.map(json.dumps)

#: The fields each normaliser reads, with sane JSON values.
TEMPLATES: dict[str, dict[str, Any]] = {
    "agentmail": {
        "type": '"event"',
        "event_type": '"message.received"',
        "event_id": '"evt_1"',
        "message": {
            "inbox_id": '"support@agentmail.to"',
            "thread_id": '"thr_1"',
            "message_id": '"<m1@example.com>"',
            "timestamp": '"2026-11-29T10:00:00.000Z"',
            "text": '"Can you move our meeting?"',
        },
    },
    "nylas": {
        "id": '"notif-1"',
        "type": '"message.created"',
        "time": "1737500935555",
        "data": {
            "object": {
                "id": '"msg-1"',
                "thread_id": '"thread-1"',
                "grant_id": '"grant-1"',
                "object": '"message"',
            }
        },
    },
    "stripe": {
        "id": '"evt_1"',
        "type": '"invoice.paid"',
        "created": "1764410000",
        "account": '"acct_1"',
        "data": {"object": {"id": '"in_1"', "invoice": '"in_1"'}},
    },
    "github": {
        "action": '"opened"',
        "issue": {"number": "7"},
        "pull_request": {"number": "8"},
        "repository": {"full_name": '"acme/widgets"'},
        "installation": {"id": "42"},
    },
    "standard": {
        "type": '"case.updated"',
        "timestamp": '"2026-11-29T10:00:00Z"',
        "data": {"id": '"obj-1"', "thread_id": '"case-9"'},
    },
}


def _render(draw: st.DrawFn, node: dict[str, Any] | str) -> str:
    """The template as JSON text, each value kept, replaced by hostile JSON, or left out."""
    if isinstance(node, str):
        keep = draw(st.sampled_from([True, True, False]))
        return node if keep else draw(hostile_json)
    items = []
    for key, value in node.items():
        choice = draw(st.sampled_from(["keep", "keep", "keep", "hostile", "omit"]))
        if choice == "omit":
            continue
        text = draw(hostile_json) if choice == "hostile" else _render(draw, value)
        items.append(f"{json.dumps(key)}:{text}")
    return "{" + ",".join(items) + "}"


@st.composite
def shaped_body(draw: st.DrawFn, provider: str) -> bytes:
    template = TEMPLATES[provider]
    if draw(st.booleans()):
        return _render_sane(template).encode()
    return _render(draw, template).encode()


def _render_sane(node: dict[str, Any] | str) -> str:
    if isinstance(node, str):
        return node
    return "{" + ",".join(f"{json.dumps(k)}:{_render_sane(v)}" for k, v in node.items()) + "}"


@st.composite
def bodies(draw: st.DrawFn, provider: str) -> bytes:
    kind = draw(
        st.sampled_from(
            ["shaped", "shaped", "json", "text", "binary", "boundary", "oversize", "not_utf8"]
        )
    )
    if kind == "shaped":
        return draw(shaped_body(provider))
    if kind == "json":
        return json.dumps(draw(json_values)).encode()
    if kind == "text":
        return draw(st.text(max_size=200)).encode()
    if kind == "binary":
        return draw(st.binary(max_size=300))
    base = _render_sane(TEMPLATES[provider]).encode()
    if kind == "boundary":  # JSON allows trailing whitespace: a valid body of the limit's size
        return base + b" " * (MAX_BODY + draw(st.integers(-2, 1)) - len(base))
    if kind == "oversize":
        size = draw(st.integers(MAX_BODY + 1, 3 * MAX_BODY))
        return base + draw(st.sampled_from([b" ", b"x", b"\xff"])) * (size - len(base))
    # not UTF-8: a lone byte, latin-1 text, UTF-16, a BOM
    how = draw(st.sampled_from(["byte", "latin1", "utf16", "bom"]))
    if how == "byte":
        at = draw(st.integers(0, len(base)))
        return (
            base[:at]
            + draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80"]))
            + base[at:]
        )
    if how == "latin1":
        return base.replace(b"Can", "Ç\u00e0n".encode("latin-1"))[:-1] + "é}".encode("latin-1")
    if how == "utf16":
        return base.decode().encode("utf-16")
    return b"\xef\xbb\xbf" + base  # UTF-8 with a BOM: valid UTF-8, not JSON


@dataclass(repr=False)
class Hostile:
    """One request of the property test, and what is known about it before sending it."""

    method: str
    path: str
    target: str  # a provider, "unconfigured" or "get"
    shape: str  # the provider whose body and headers it imitates
    transport: str  # "aiohttp" (UTF-8 headers) or "latin1" (raw socket, http.client style)
    body: bytes = b""
    chunk_size: int | None = None
    encoding: str = "identity"  # "gzip", "gzip-garbage", "deflate-garbage"
    signature: str = "none"  # none, garbage, valid, stale, future, tampered:<how>
    msg_id: str = "msg_1"
    offset_s: int = 0
    unsigned: list[tuple[str, str]] = field(default_factory=list)  # before the signature
    garbage: list[tuple[str, str]] = field(default_factory=list)
    extra: list[tuple[str, str]] = field(default_factory=list)  # after the signature
    params: dict[str, str] | None = None

    def __repr__(self) -> str:
        body = self.body if len(self.body) <= 300 else self.body[:300] + b"..."
        return (
            f"Hostile({self.method} {self.path} via {self.transport}, shape={self.shape}, "
            f"signature={self.signature}, encoding={self.encoding}, chunk={self.chunk_size}, "
            f"msg_id={self.msg_id!r}, unsigned={self.unsigned!r}, garbage={self.garbage!r}, "
            f"extra={self.extra!r}, params={self.params!r}, body[{len(self.body)}]={body!r})"
        )

    @property
    def label(self) -> str:
        """The provider label ingest counts this request under."""
        name = self.path.removeprefix("/webhooks/")
        return name[:64]

    @property
    def decoded_size(self) -> int:
        return len(self.body)

    @property
    def utf8(self) -> bool:
        try:
            self.body.decode("utf-8")
        except UnicodeDecodeError:
            return False
        return True


ID_ALPHABET = string.ascii_letters + string.digits + "_-."


def valid_request(shape: str) -> Hostile:
    """A well-formed, validly signed delivery to ``shape``'s route: the property test's
    explicit examples, so every run has its 204s whatever the draws (a run of 300 drew none
    once)."""
    request = Hostile("POST", ROUTES[shape], shape, shape, "aiohttp")
    request.body = _render_sane(TEMPLATES[shape]).encode()
    request.signature = "valid"
    request.msg_id = f"msg_example_{shape}"
    request.offset_s = 30
    request.unsigned.append(("Content-Type", "application/json"))
    return request


@st.composite
def hostile_requests(draw: st.DrawFn) -> Hostile:
    target = draw(st.sampled_from([*ROUTES, "unconfigured", "get"]))
    transport = draw(st.sampled_from(["aiohttp", "latin1"]))
    latin1 = transport == "latin1"
    if target == "get":
        return draw(get_requests())
    if target == "unconfigured":
        name = draw(st.text(alphabet=ID_ALPHABET + "~", min_size=1, max_size=90))
        name = name if name.strip(".") else name + "x"
        if draw(st.booleans()):
            path = "/webhooks/standard/" + (name if name != "crm" else "crm2")
        else:
            path = "/webhooks/" + (name if name not in ROUTES else name + "2")
            path = path if path != "/webhooks/standard" else path + "2"
        shape = draw(st.sampled_from(sorted(ROUTES)))
    else:
        path = ROUTES[target]
        shape = target
    request = Hostile("POST", path, target, shape, transport)
    request.body = draw(bodies(shape))
    request.chunk_size = draw(st.none() | st.integers(1, 4096))
    request.encoding = draw(
        st.sampled_from(
            ["identity", "identity", "identity", "gzip", "gzip-garbage", "deflate-garbage"]
        )
    )
    modes = ["none", "garbage", "valid", "valid", "tampered"]
    if shape in ("agentmail", "standard", "stripe"):
        modes += ["stale", "future"]
    request.signature = draw(st.sampled_from(modes))
    if request.signature == "tampered":
        hows = ["body", "signature", "drop", "secret"]
        if shape in ("agentmail", "standard", "stripe"):
            hows += ["timestamp"]
        if shape in ("agentmail", "standard"):
            hows += ["id"]
        request.signature = "tampered:" + draw(st.sampled_from(hows))
    if request.signature == "garbage":
        for header in SIGNATURE_HEADERS[shape]:
            if draw(st.integers(0, 4)):
                request.garbage.append((header, draw(garbage_for(header, latin1=latin1))))
    ids = st.text(alphabet=ID_ALPHABET, min_size=1, max_size=40)
    if not latin1:  # UTF-8 both ways: any id survives; http.client's latin-1 would not
        ids = ids | header_text(latin1=False, max_size=40).filter(lambda s: s.strip() == s != "")
    request.msg_id = draw(ids)
    request.offset_s = draw(st.integers(30, 10**8))
    if shape == "github":  # not covered by the signature
        for header in ("X-GitHub-Delivery", "X-GitHub-Event"):
            if draw(st.integers(0, 3)):
                value = draw(st.just(str(uuid.uuid4())) | header_text(latin1=latin1))
                request.unsigned.append((header, value))
    content_type = draw(
        st.sampled_from(
            [
                "application/json",
                "application/json",
                "text/plain",
                "application/x-www-form-urlencoded",
                "multipart/form-data; boundary=x",
                "application/json; charset=utf-16",
                "",
            ]
        )
        | header_text(latin1=latin1, max_size=30)
    )
    request.unsigned.append(("Content-Type", content_type))
    names = st.text(alphabet=TCHAR, min_size=1, max_size=24).filter(
        lambda n: n.lower() not in FRAMING
    )
    request.extra = draw(st.lists(st.tuples(names, header_text(latin1=latin1)), max_size=4))
    return request


@st.composite
def get_requests(draw: st.DrawFn) -> Hostile:
    path = draw(
        st.sampled_from(["/webhooks/nylas", "/webhooks/nylas", "/healthz", "/readyz", "/metrics"])
    )
    params: dict[str, str] = draw(
        st.dictionaries(
            st.text(alphabet=ID_ALPHABET, min_size=1, max_size=10).filter(
                lambda k: k != "challenge"
            ),
            st.text(max_size=20),
            max_size=2,
        )
    )
    if path == "/webhooks/nylas" and draw(st.integers(0, 4)):
        params["challenge"] = draw(
            st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=80)
        )
    names = st.text(alphabet=TCHAR, min_size=1, max_size=24).filter(
        lambda n: n.lower() not in FRAMING
    )
    extra = draw(st.lists(st.tuples(names, header_text(latin1=False)), max_size=3))
    return Hostile("GET", path, "get", "nylas", "aiohttp", extra=extra, params=params)


def _flip(value: str) -> str:
    """A signature with its first significant character changed (never a padding bit)."""
    prefix = next((p for p in ("sha256=", "v1,") if value.startswith(p)), "")
    if value.startswith("t="):
        prefix = value[: value.index("v1=") + 3]
    first = value[len(prefix)]
    return prefix + ("1" if first == "0" else "0") + value[len(prefix) + 1 :]


def _wire(request: Hostile) -> tuple[list[tuple[str, str]], bytes]:
    """The headers and body bytes of a POST, signed at the moment it is sent."""
    body, shape = request.body, request.shape
    headers = list(request.unsigned)
    mode, _, how = request.signature.partition(":")
    now = time.time()
    if mode in ("valid", "tampered"):
        signed = sign(shape, body, at=now, msg_id=request.msg_id, wrong_secret=how == "secret")
        if how == "body":
            body = body[:-1] + bytes([body[-1] ^ 0x01]) if body else b"x"
        elif how == "signature":
            signed[-1] = (signed[-1][0], _flip(signed[-1][1]))
        elif how == "drop":
            signed.pop(len(signed) // 2)
        elif how == "timestamp" and shape == "stripe":
            _, _, rest = signed[0][1].partition(",")
            signed = [("Stripe-Signature", f"t={int(now) + 1},{rest}")]
        elif how == "timestamp":
            signed = [(k, str(int(v) + 1) if k.endswith("-timestamp") else v) for k, v in signed]
        elif how == "id":
            signed = [(k, v + "x" if k.endswith("-id") else v) for k, v in signed]
        headers += signed
    elif mode in ("stale", "future"):
        tolerance = 300
        shift = tolerance + request.offset_s
        headers += sign(
            shape, body, at=now - shift if mode == "stale" else now + shift, msg_id=request.msg_id
        )
    elif mode == "garbage":
        headers += request.garbage
    headers += request.extra
    if request.encoding == "gzip":
        body = gzip.compress(body)
        headers.append(("Content-Encoding", "gzip"))
    elif request.encoding == "gzip-garbage":
        headers.append(("Content-Encoding", "gzip"))
    elif request.encoding == "deflate-garbage":
        headers.append(("Content-Encoding", "deflate"))
    return headers, body


def _send(live: LiveIngest, request: Hostile) -> Answer | None:
    if request.method == "GET":
        return live.run(
            live.request("GET", request.path, headers=request.extra, params=request.params)
        )
    headers, body = _wire(request)
    if request.transport == "aiohttp":
        return live.run(
            live.request(
                "POST", request.path, headers=headers, body=body, chunk_size=request.chunk_size
            )
        )
    data = http_request("POST", request.path, list(headers), body, chunk_size=request.chunk_size)
    return live.run(live.raw(data))


@dataclass
class Tally:
    accepted: Counter[str] = field(default_factory=Counter)
    rejected: Counter[tuple[str, str]] = field(default_factory=Counter)
    statuses: Counter[tuple[str, int]] = field(default_factory=Counter)


def _judge(request: Hostile, answer: Answer | None, tally: Tally) -> None:
    """Every answer: documented, never 5xx, 204 only when validly signed; count it."""
    assert answer is not None, "the server closed the connection without answering"
    assert answer.status < 500, (answer.status, answer.body[:500])
    for secret in SECRETS:
        assert secret.encode() not in answer.body
    tally.statuses[(request.target, answer.status)] += 1
    if request.method == "GET":
        _judge_get(request, answer)
        return
    assert answer.status in POST_STATUSES - {503}, answer
    mode = request.signature.partition(":")[0]
    if answer.status == 204:
        assert mode == "valid", f"{request.signature} delivery accepted"
        assert request.utf8
        assert request.encoding in ("identity", "gzip")
        tally.accepted[request.label] += 1
        return
    garbled = request.encoding in ("gzip-garbage", "deflate-garbage")
    if garbled and (answer.status, answer.content_type) == (400, "text/plain"):
        return  # the decoder failed inside aiohttp's parser: refused before any route
    check = answer.error()["check"]
    if request.target == "unconfigured":
        assert (answer.status, check) == (404, "not_configured")
        # a route no provider has is counted under one label, so a scan cannot grow /metrics
        label = request.label if request.label in KNOWN_PROVIDERS else "unknown"
        tally.rejected[(label, check)] += 1
        return
    tally.rejected[(request.label, check)] += 1
    assert answer.status != 404
    if garbled:
        assert answer.status in (400, 401, 413)
        return
    if request.decoded_size > MAX_BODY:
        assert (answer.status, check) == (413, "body_too_large") or (
            request.encoding == "gzip" and answer.status == 401
        )
        return
    assert answer.status != 413, "a body within the limit refused as too large"
    if request.encoding == "gzip" and answer.status == 401:
        return  # signed over the decoded bytes; an ingest that does not decode refuses it
    if mode == "valid" and request.utf8:
        assert answer.status == 400, answer
        assert check in PAYLOAD_CHECKS
    elif mode in ("stale", "future") and request.utf8:
        assert (answer.status, check) == (401, "timestamp_out_of_tolerance")
    else:
        assert answer.status == 401, answer
        assert check in VERIFICATION_CHECKS


def _judge_get(request: Hostile, answer: Answer) -> None:
    if request.path == "/webhooks/nylas":
        assert request.params is not None
        if "challenge" in request.params:
            assert answer.status == 200
            assert answer.content_type == "text/plain"
            assert answer.body.decode() == request.params["challenge"]
        else:
            assert (answer.status, answer.error()["check"]) == (400, "no_challenge")
    elif request.path == "/metrics":
        assert answer.status == 200
        assert answer.content_type == "text/plain"
    else:
        assert answer.status == 200, answer
        assert answer.content_type == "application/json"
