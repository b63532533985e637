"""Flow control for the model, as pure state: the group's rate limits and the model's pauses.

Nothing here sleeps or reads a clock: every method is given ``now`` (seconds, monotonic),
so the decisions are unit-tested with a clock of the test's own.

* :class:`Gcra`: the generic cell rate algorithm (a token bucket kept as one number, the
  *theoretical arrival time*). A call may start while ``tat <= now + tolerance``; starting
  moves ``tat`` on by ``cost / rate``. The cost is added *after* the check, so a call
  dearer than the whole burst still starts (once the budget is back to zero), and the
  long-run rate holds whatever the costs.
* :class:`Limits`: ``ONCEONLY_MODEL_RPM`` and ``ONCEONLY_MODEL_TPM`` together, at this
  worker's share of the group's budget. Tokens are charged when a call starts at the
  estimate (the mean of the writer's reported usage so far, ``ONCEONLY_MODEL_TOKENS_ESTIMATE``
  before the first report) and corrected by the reported usage when it ends.
* :class:`Pause`: the model's own back-pressure. A 429 with ``Retry-After`` stops new
  calls until then; after it one call goes alone (the probe), and the others start when
  it succeeds, so a model still limiting sees one call per pause, not every waiting call.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any

INF = math.inf


@dataclass
class Gcra:
    """A rate of ``rate`` units a second, ``burst`` units at once (at least one call)."""

    rate: float
    burst: float = 1.0
    tat: float = -INF

    @property
    def tolerance(self) -> float:
        return max(0.0, self.burst - 1.0) / self.rate if self.rate > 0 else 0.0

    def delay(self, now: float) -> float:
        """How long until a call may start (0: now; ``inf``: the rate is zero)."""
        if self.rate <= 0:
            return INF
        return max(0.0, self.tat - self.tolerance - now)

    def take(self, now: float, cost: float = 1.0) -> None:
        """A call starts now and costs ``cost`` units."""
        if self.rate > 0:
            self.tat = max(self.tat, now) + cost / self.rate

    def adjust(self, now: float, cost: float) -> None:
        """Charge (or give back, if negative) ``cost`` units for a call already started."""
        if self.rate > 0:
            self.tat = max(self.tat + cost / self.rate, now - self.tolerance)


@dataclass
class Limits:
    """The group's requests and tokens per minute, at this worker's ``share`` of them."""

    rpm: float | None = None
    tpm: float | None = None
    share: float = 1.0
    #: a minute's budget is spread over this long: a request reaches the model a moment
    #: after its admission, and the margin keeps any 60 s at the model within the limit
    #: through up to ``spread_s - 60`` seconds of that jitter (the rate 0.8 % lower)
    spread_s: float = 60.5
    #: tokens a call is charged before any call reported its usage
    estimate: float = 1000.0
    _requests: Gcra | None = None
    _tokens: Gcra | None = None
    _reported: list[float] = field(default_factory=lambda: [0.0, 0.0])  # total, count

    def __post_init__(self) -> None:
        self._requests = Gcra(0.0) if self.rpm else None
        self._tokens = Gcra(0.0) if self.tpm else None
        self.set_share(self.share)

    @property
    def active(self) -> bool:
        return self._requests is not None or self._tokens is not None

    def set_share(self, share: float, now: float | None = None) -> None:
        """This worker's part of the group's budget (its partitions / the topic's).

        Requests are paced at whole calls a minute, ``floor(rpm x share)`` (at least one):
        paced evenly at that many a minute, no 60 s at the model holds more, and the
        workers' whole numbers add up to at most the rpm, where their fractions, each
        rounded up at a window's edge, did not. A share that rises from zero (``now``
        given: the worker's partitions were revoked, or it has just started) first waits
        out its last call's interval at the old pace, then one interval at the new: the
        partitions it takes were paced by their last owner until a moment ago."""
        rising = self.share == 0.0 and share > 0.0
        self.share = max(0.0, min(1.0, share))
        requests = self._requests
        if requests is not None and self.rpm:
            quota = math.floor(self.rpm * self.share + 1e-9)
            if self.share > 0.0:
                quota = max(1, quota)
            requests.rate = quota / self.spread_s
            if rising and now is not None and requests.rate > 0:
                requests.tat = max(requests.tat, now) + 1.0 / requests.rate
        if self._tokens is not None and self.tpm:
            self._tokens.rate = self.tpm * self.share / self.spread_s

    def tokens_per_call(self) -> float:
        total, count = self._reported
        return total / count if count else self.estimate

    def delay(self, now: float) -> float:
        return max(
            self._requests.delay(now) if self._requests else 0.0,
            self._tokens.delay(now) if self._tokens else 0.0,
        )

    def take(self, now: float) -> float:
        """A call starts: charge it; returns the tokens charged (for :meth:`settle`)."""
        charged = self.tokens_per_call()
        if self._requests is not None:
            self._requests.take(now)
        if self._tokens is not None:
            self._tokens.take(now, charged)
        return charged

    def settle(self, now: float, charged: float, used: float | None) -> None:
        """A call ended having used ``used`` tokens (None: not reported)."""
        if used is None:
            return
        self._reported[0] += used
        self._reported[1] += 1
        if self._tokens is not None:
            self._tokens.adjust(now, used - charged)


@dataclass
class Pause:
    """The model said 429 and how long to wait: new calls wait, then one probes."""

    until: float = -INF
    #: after a pause, until a call succeeds: only one call (the probe) at a time
    probing: bool = False
    probe_out: bool = False
    throttles: int = 0  #: 429s answered so far: which pause a probe was sent in

    def throttled(self, now: float, retry_after_s: float) -> bool:
        """A call was answered 429; returns True when this starts (or extends) a pause."""
        until = now + max(0.0, retry_after_s)
        self.throttles += 1
        self.probing = True
        self.probe_out = False
        if until <= self.until:
            return False
        self.until = until
        return True

    def delay(self, now: float) -> float | None:
        """Seconds until a call may start; None: wait for the probe's outcome."""
        if now < self.until:
            return self.until - now
        if self.probing and self.probe_out:
            return None
        return 0.0

    def start(self) -> bool:
        """A call starts (``delay`` said 0); True if it is the probe."""
        if self.probing:
            self.probe_out = True
            return True
        return False

    def ended(self, probe: bool, ok: bool) -> None:
        """A call that was not throttled ended (``ok``: the model answered)."""
        if probe:
            self.probe_out = False
            if ok:
                self.probing = False

    def answered_late(self, throttles: int) -> None:
        """A probe given up at its timeout was answered after it, in its thread (a sync
        writer's), and no 429 came since it started (``throttles`` then): the model
        answers again, so the probing ends, as it would had the probe been in time."""
        if throttles == self.throttles:
            self.probing = False


def retry_after_s(exc: BaseException, now_epoch: float) -> float | None:
    """The pause a model asked for: a 429 whose response says ``Retry-After`` (seconds or
    an HTTP date) or ``retry-after-ms``; None for any other failure. Works with the
    ``openai`` SDK's ``RateLimitError`` (and any error with ``status_code`` and
    ``response.headers``), and with :class:`~onceonly.processors.exceptions.ModelThrottled`."""
    if isinstance(exc, ModelThrottled):
        return max(0.0, float(exc.retry_after_s))
    if getattr(exc, "status_code", None) != 429:  # an SDK's error: duck-typed, none imported
        return None
    headers: Any = getattr(getattr(exc, "response", None), "headers", None) or {}
    try:
        millis = headers.get("retry-after-ms")
        if millis is not None:
            return max(0.0, float(millis) / 1000)
        value = headers.get("retry-after")
    except AttributeError:
        return None
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(str(value)).timestamp() - now_epoch)
    except (TypeError, ValueError, IndexError):
        return None


def model_of(exc: BaseException) -> str | None:
    """The model a throttled call asked for, where the error says: ``model`` on the error
    (:class:`ModelThrottled`), else the JSON body of the request it carries (the
    ``openai`` SDK's errors carry their ``httpx`` request)."""
    if isinstance(exc, ModelThrottled) and exc.model:
        return exc.model
    content = getattr(getattr(exc, "request", None), "content", None)
    if not isinstance(content, bytes | bytearray) or b'"model"' not in content:
        return None
    try:
        model = json.loads(content).get("model")
    except (ValueError, AttributeError):
        return None
    return str(model) if model else None


class ModelThrottled(Exception):
    """What a writer (not on the openai SDK) raises for a model's 429: the worker pauses
    new calls for ``retry_after_s`` and tries this one again, without counting an attempt."""

    def __init__(
        self, retry_after_s: float, message: str = "the model answered 429", model: str = ""
    ) -> None:
        super().__init__(f"{message}; retry after {retry_after_s:g} s")
        self.retry_after_s = retry_after_s
        self.model = model
