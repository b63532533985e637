"""Errors of the processors."""

from __future__ import annotations

from enum import StrEnum

from onceonly.foundation.errors import OnceOnlyError


class ProcessorError(OnceOnlyError):
    """Base class of the processors' errors."""


class SendFailure(StrEnum):
    RETRY = "retryable"  #: 429, 5xx, timeout: back off, same key, up to the attempts
    #: 409, the first send with this key is still running: back off, same key, for up to
    #: the policy's in-flight wait whatever the attempts (that send may yet succeed)
    IN_FLIGHT = "in_flight"
    CONFLICT = "key_conflict"  #: 409, the key was used with different content: never retry
    REJECTED = "rejected"  #: any other 4xx: a bug or a refused message; dead-letter


class SendError(ProcessorError):
    """The mail API did not confirm a send; ``failure`` says what the policy does next."""

    def __init__(self, failure: SendFailure, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.failure = failure
        self.status = status

    @property
    def retryable(self) -> bool:
        """Whether the same call, with the same key, may be tried again."""
        return self.failure in (SendFailure.RETRY, SendFailure.IN_FLIGHT)


class Rebalancing(ProcessorError):
    """A rebalance began while a reply was being retried: the worker must let it go.

    Retrying on would hold up the rebalance (faust waits for every record in flight)
    past the group's rebalance timeout, and the partition's next owner would answer the
    same record while this worker still writes to its ledger. The worker exits instead,
    without acknowledging the record, and the next owner resumes the reply from the
    ledger with the same key.
    """


class WriterFailed(ProcessorError):
    """The reply writer raised or timed out on every attempt; the burst is dead-lettered."""

    def __init__(self, message: str, *, attempts: int, last_error: str) -> None:
        super().__init__(message)
        self.attempts = attempts
        self.last_error = last_error


class ThreadUnread(ProcessorError):
    """With approval on, a burst whose thread the mail API did not list, while the ledger
    holds a draft its reply would have to recall (one still waiting, or one marked
    superseded by the burst): only the thread holds the draft's messages. The burst is
    tried again, then dead-lettered; the letter's retry, once the thread reads, writes the
    reply with them (the simulator's finding F43)."""


class Fenced(Rebalancing):
    """This worker no longer owns the partition it was working for (its session expired
    during a pause, or the group moved the partition): it writes and sends nothing more
    for it, and leaves the records to the partition's owner."""


class BrokerUnavailable(ProcessorError):
    """A changelog write failed with a Kafka error that is not the broker refusing that one
    record (``runtime.broker_errors``): faust's producer sent it again for
    ``producer_request_timeout`` (20 minutes) and gave up, or the producer is closed or
    refused. Not the record's failure, and no dead letter: the write may have landed or not, and
    this worker's store does not hold it. The worker exits without acknowledging its
    records (``runtime.worker._fatal``); restarted, it recovers its tables from the
    changelogs (what landed included) and reads the records again, as after a crash."""


class LedgerUnreadable(BrokerUnavailable):
    """A read of the ledger topic (a take-over's, arbitration's, an audit's) that the broker
    did not answer for ``ledger_topic.READ_PATIENCE_S`` (5 minutes), or refused for good (a
    topic missing, credentials refused). On a lane, the worker's failure, as a write's: it
    exits and reads its records again, no dead letter. The audit skips it: the next audit,
    or a lane's take-over, reads again."""
