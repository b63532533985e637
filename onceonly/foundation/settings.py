"""One frozen settings object, read from ``ONCEONLY_*`` variables at start-up.

Every command builds a :class:`Settings` once (``Settings.from_env()``) and
passes it down; nothing else in the code base reads the environment. Every
variable is documented in the "Configuration" page of the docs (docs/configuration.md).
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from onceonly.foundation.errors import ConfigError
from onceonly.foundation.providers import CATCHUP_LOOK_BACK, NAMES


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity), as ``auto`` counts them."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


#: Nylas sends bodies above ~1 MB as ``message.created.truncated``; Svix/AgentMail,
#: Stripe and Standard Webhooks payloads are far smaller. 2 MiB leaves headroom.
DEFAULT_MAX_BODY_BYTES = 2 * 1024 * 1024
#: the defaults other modules share (the local broker, the Nylas region, the topics)
DEFAULT_KAFKA_PORT = 9092
DEFAULT_BROKER_HEAP_MB = 512
NYLAS_US_API_URI = "https://api.us.nylas.com"
DEFAULT_TOPICS = {
    "deliveries": "onceonly.deliveries",
    "ledger": "onceonly.replies",
    "dead_letters": "onceonly.dead-letters",
    "decisions": "onceonly.decisions",
}


#: the providers ingest verifies, as envelopes name them (besides ``standard.<source>``)
PROVIDERS = NAMES


def parse_pairs(value: object, variable: str, form: str) -> object:
    """``name=value`` pairs separated by commas (a non-string passes through)."""
    if not isinstance(value, str):
        return value
    pairs: dict[str, str] = {}
    entries = [part.strip() for part in value.split(",") if part.strip()]
    for n, item in enumerate(entries, 1):
        name, sep, rest = item.partition("=")
        if not sep or not name.strip() or not rest.strip():
            # never quote the entry: in a list of secrets, it may be one
            raise ValueError(
                f"{variable} takes {form} pairs separated by commas; entry {n} of "
                f"{len(entries)} lacks {pair_side(name, sep)}: write it as {form}"
            )
        pairs[name.strip()] = rest.strip()
    return pairs


def pair_side(name: str, sep: str) -> str:
    """Which side of ``name=value`` an entry lacks, in words (never its text)."""
    if not sep:
        return "the '=' between name and value"
    return "a name before '='" if not name.strip() else "a value after '='"


class Settings(BaseSettings):
    """All of onceonly's configuration. Frozen: build it once, pass it down."""

    model_config = SettingsConfigDict(
        env_prefix="ONCEONLY_",
        frozen=True,
        extra="ignore",
        case_sensitive=False,
        # VAR= (as compose's ${VAR:-} gives) means unset, not an empty secret
        env_ignore_empty=True,
        # a bad value's error never quotes the value: it may be a secret
        hide_input_in_errors=True,
    )

    # --- Kafka -----------------------------------------------------------
    kafka_bootstrap: str = f"127.0.0.1:{DEFAULT_KAFKA_PORT}"
    partitions: int = Field(default=8, ge=1)
    #: replicas of onceonly's topics and faust's changelogs; None: 3 on 3+ brokers, else 1
    replication_factor: int | None = Field(default=None, ge=1)
    deliveries_topic: str = DEFAULT_TOPICS["deliveries"]
    ledger_topic: str = DEFAULT_TOPICS["ledger"]
    dead_letter_topic: str = DEFAULT_TOPICS["dead_letters"]
    #: the worker's skips (duplicates, its own mail, ...), for onceonly trace and /ops
    decisions_topic: str = DEFAULT_TOPICS["decisions"]
    decisions_retention: timedelta = timedelta(days=7)
    produce_timeout_ms: int = Field(default=5000, ge=100)
    produce_linger_ms: int = Field(default=5, ge=0, le=1000)
    #: how every client connects (see onceonly/foundation/kafka/_security.py)
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    kafka_sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = "SCRAM-SHA-256"
    kafka_sasl_username: str | None = None
    kafka_sasl_password: SecretStr | None = None
    kafka_ssl_ca_file: Path | None = None
    #: with it set, every envelope written carries its HMAC and the worker dead-letters
    #: a record without a valid one (a forged or corrupted record never reaches a writer)
    envelope_secret: SecretStr | None = None

    # --- local files -------------------------------------------------------
    run_dir: Path = Path(".run")
    broker_heap_mb: int = Field(default=DEFAULT_BROKER_HEAP_MB, ge=128, le=512)

    # --- ingest ----------------------------------------------------------
    ingest_host: str = "127.0.0.1"
    ingest_port: int = Field(default=8000, ge=0, le=65535)
    max_body_bytes: int = Field(default=DEFAULT_MAX_BODY_BYTES, ge=1024)
    #: an idle connection is closed after this; aiohttp's timer also runs from the connection's
    #: start, so it is the time a client has to send its (first) request's headers too
    ingest_keepalive_s: float = Field(default=75.0, gt=0)
    #: time allowed to receive a whole body once its headers arrived; 408 past it
    ingest_read_timeout_s: float = Field(default=10.0, gt=0)
    #: open connections at most; connections past it are answered 503 and closed at once
    ingest_max_connections: int = Field(default=1024, ge=1)
    #: ingest processes on the one port (SO_REUSEPORT) under one parent; "auto": the usable cores
    ingest_processes: int = Field(default=1, ge=1, le=256)
    stripe_tolerance_s: int = Field(default=300, ge=1)
    agentmail_webhook_secret: SecretStr | None = None
    nylas_webhook_secret: SecretStr | None = None
    stripe_webhook_secret: SecretStr | None = None
    github_webhook_secret: SecretStr | None = None
    standard_webhook_secrets: Annotated[dict[str, SecretStr], NoDecode] = Field(
        default_factory=dict
    )

    # --- worker (processors) ---------------------------------------------
    app_id: str = "onceonly"
    worker_host: str = "127.0.0.1"
    worker_port: int = Field(default=6066, ge=0, le=65535)
    data_dir: Path = Path(".run/worker")
    #: where ``onceonly index`` keeps the operator index (RocksDB); None: no index, the
    #: operator reads scan the topics
    index_dir: Path | None = None
    worker_id: str | None = None
    #: warm copies of each table partition kept by other workers (faust's table standbys);
    #: 1, faust's own default: a takeover replays only what the copy missed
    standby_replicas: int = Field(default=1, ge=0)
    dedupe_retention: timedelta = timedelta(days=7)
    #: provider -> its own dedupe retention (the others keep ``dedupe_retention``)
    dedupe_retention_by_provider: Annotated[dict[str, timedelta], NoDecode] = Field(
        default_factory=dict
    )
    #: faust's stream_buffer_maxsize: records buffered per stream, and for the changelog
    #: replay of a recovery (one queue for every changelog partition)
    stream_buffer_maxsize: int = Field(default=4096, ge=64)
    #: a changelog partition at least this many records behind is loaded in bulk before
    #: faust replays the rest record by record (0: faust's replay alone)
    restore_bulk_min_records: int = Field(default=10_000, ge=0)
    #: how often each partition sweeps expired entries (default: 1/100 of the retention)
    dedupe_sweep_s: float | None = Field(default=None, gt=0)
    #: how often the worker reads its ledger partitions for another writer's late record
    #: of a key it settled, and settles the key again after it (TableLedger.audit)
    ledger_audit_s: float = Field(default=30.0, gt=0)
    #: how long after a reply is recorded failed, its sends' outcomes unknown (timeouts,
    #: lost answers), the worker reads its thread again and records it sent if the email
    #: went out after all (0: never); checked on the ledger audit's timer
    late_send_check_s: float = Field(default=960.0, ge=0)
    reorder_window_ms: int = Field(default=2000, ge=0)
    send_attempts: int = Field(default=5, ge=1)
    #: how long a send answered "the first send with this key is in flight" (409) is
    #: retried, past send_attempts: that first send may still succeed
    send_in_flight_wait_s: float = Field(default=60.0, gt=0)
    #: records the agent loop takes from its stream at once (it only routes them)
    batch_max: int = Field(default=256, ge=1)
    #: how long the agent loop waits to fill a batch before it routes what it has
    batch_wait_ms: int = Field(default=5, ge=1)
    #: records taken and not yet finished, at most; the worker stops reading past it
    max_pending: int = Field(default=4096, ge=1)
    #: reply writer (model) calls in flight per worker: the knob for a model's rate limit
    writer_concurrency: int = Field(default=64, ge=1)
    #: one writer call past this is a failure (retried); a sync writer's thread runs on
    writer_timeout_s: float = Field(default=120.0, gt=0)
    #: the model's requests / tokens per minute for the whole worker group (unset: no
    #: limit); each worker takes its share by the deliveries partitions it owns
    model_rpm: float | None = Field(default=None, gt=0)
    model_tpm: float | None = Field(default=None, gt=0)
    #: tokens a call is charged against model_tpm until a writer reports its usage
    model_tokens_estimate: int = Field(default=1000, ge=1)
    #: who shares the writer slots fairly: "inbox" (inbox or grant) or an envelope field
    tenant_key: str = "inbox"
    #: writer calls in flight per tenant, at most (unset: up to writer_concurrency)
    tenant_concurrency: int | None = Field(default=None, ge=1)
    #: writer calls per reply before the burst is dead-lettered (writer_failed)
    writer_attempts: int = Field(default=3, ge=1)
    #: first backoff between writer attempts (random exponential, at most 30 s)
    writer_backoff_s: float = Field(default=1.0, ge=0)
    #: rewrites when newer messages of the thread arrive while a reply is being written
    supersede_max: int = Field(default=2, ge=0)
    #: on a rebalance or shutdown, how long running work may finish before it is dropped
    drain_grace_s: float = Field(default=10.0, ge=0)
    #: a deliveries partition whose records wait while its oldest unfinished record has not
    #: moved for this long is logged once as stalled (onceonly.processors.stalls)
    stall_warn_s: float = Field(default=600.0, gt=0)
    send_timeout_s: float = Field(default=10.0, gt=0)
    reply_writer: str = "onceonly.processors.writer:acknowledge"
    #: never: every reply is sent; always: every reply is a draft a person approves;
    #: writer: the replies the writer returns as Draft(text, reason) are
    approval: Literal["never", "always", "writer"] = "never"
    #: a draft waiting this long (from its ledger record) is declined or alerted on
    approval_timeout: timedelta = timedelta(hours=24)
    #: how far back ``onceonly catch-up`` without --since lists at least (unset: the
    #: provider's documented horizon, onceonly.operations.catchup.LOOK_BACK)
    catchup_lookback: timedelta | None = Field(default=None, gt=timedelta(0))
    approval_on_timeout: Literal["alert", "decline"] = "alert"
    #: how long a settled reply's ledger record is kept after it settled (and a message
    #: older than this is never answered): the longest catch-up look-back (7 days) plus
    #: the deliveries topic's retention (7 days) plus a day (docs/configuration.md)
    ledger_retention: timedelta = timedelta(days=15)
    event_handler: str | None = None
    agentmail_base_url: str | None = None
    agentmail_webhook_id: str | None = None
    #: the operator page's token: with it unset, /ops is read-only (no retries)
    ops_token: SecretStr | None = None
    webhook_poll_s: float = Field(default=60.0, gt=0)
    agentmail_api_key: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("AGENTMAIL_API_KEY", "agentmail_api_key")
    )
    nylas_api_key: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("NYLAS_API_KEY", "nylas_api_key")
    )
    #: the US region by default; the EU region or a local server for tests
    nylas_api_uri: str = NYLAS_US_API_URI
    #: the grant's own address (its outbound mail is never answered); unset: read the grant
    nylas_grant_email: str | None = None
    #: shifts the worker's clock; for drills and tests that move time (e.g. expiry)
    clock_offset_s: float = 0.0
    rocksdb_block_cache_bytes: int = Field(default=8 * 1024 * 1024, ge=1024 * 1024)
    rocksdb_write_buffer_bytes: int = Field(default=4 * 1024 * 1024, ge=1024 * 1024)

    # --- logging -----------------------------------------------------------
    log_level: str = "INFO"
    log_json: bool = False

    @field_validator("standard_webhook_secrets", mode="before")
    @classmethod
    def _parse_secrets(cls, value: object) -> object:
        """``source=secret`` pairs separated by commas, e.g. ``billing=whsec_a,crm=whsec_b``."""
        return parse_pairs(value, "ONCEONLY_STANDARD_WEBHOOK_SECRETS", "source=secret")

    @field_validator("dedupe_retention_by_provider", mode="before")
    @classmethod
    def _parse_retentions(cls, value: object) -> object:
        """``provider=duration`` pairs, e.g. ``agentmail=P2D,stripe=P4D``."""
        pairs = parse_pairs(value, "ONCEONLY_DEDUPE_RETENTION_BY_PROVIDER", "provider=duration")
        for provider in pairs if isinstance(pairs, dict) else ():
            if provider not in PROVIDERS and not provider.startswith("standard."):
                raise ValueError(
                    f"ONCEONLY_DEDUPE_RETENTION_BY_PROVIDER names {provider!r}, which is no "
                    f"provider; use one of {', '.join(PROVIDERS)} or standard.<source>"
                )
        return pairs

    @field_validator("dedupe_retention_by_provider")
    @classmethod
    def _positive(cls, value: dict[str, timedelta]) -> dict[str, timedelta]:
        for provider, retention in value.items():
            if retention <= timedelta(0):
                raise ValueError(
                    f"ONCEONLY_DEDUPE_RETENTION_BY_PROVIDER: the retention of {provider!r} "
                    "must be longer than zero"
                )
        return value

    @field_validator(
        "dedupe_retention",
        "decisions_retention",
        "approval_timeout",
        "ledger_retention",
        mode="before",
    )
    @classmethod
    def _seconds(cls, value: object) -> object:
        """A plain number of seconds, as the README allows, beside ISO 8601 (``P7D``)."""
        if isinstance(value, str) and value.strip().replace(".", "", 1).isdigit():
            return float(value)
        return value

    @field_validator("ingest_processes", mode="before")
    @classmethod
    def _auto_processes(cls, value: object) -> object:
        return usable_cores() if str(value).strip().lower() == "auto" else value

    @model_validator(mode="after")
    def _sasl_needs_credentials(self) -> Settings:
        if self.kafka_security_protocol.startswith("SASL_") and not (
            self.kafka_sasl_username and self.kafka_sasl_password
        ):
            raise ValueError(
                f"ONCEONLY_KAFKA_SECURITY_PROTOCOL={self.kafka_security_protocol} needs "
                "ONCEONLY_KAFKA_SASL_USERNAME and ONCEONLY_KAFKA_SASL_PASSWORD"
            )
        return self

    @model_validator(mode="after")
    def _ledger_outlives_the_paths_that_ask(self) -> Settings:
        """A settled record outlives every path that could bring its message again."""
        look_back = self.catchup_lookback or max(CATCHUP_LOOK_BACK.values())
        dedupe = max([self.dedupe_retention, *self.dedupe_retention_by_provider.values()])
        floors = (
            (look_back, "catch-up look-back", "ONCEONLY_CATCHUP_LOOKBACK"),
            (dedupe, "dedupe retention", "ONCEONLY_DEDUPE_RETENTION(_BY_PROVIDER)"),
        )
        for floor, name, variable in floors:
            if self.ledger_retention < floor:
                raise ValueError(
                    f"ONCEONLY_LEDGER_RETENTION ({self.ledger_retention}) is shorter than the "
                    f"{name} ({floor}): a message that path brings again could find its "
                    f"reply's record removed; raise ONCEONLY_LEDGER_RETENTION to at least "
                    f"{floor.total_seconds():g} seconds or shorten {variable}"
                )
        return self

    @field_validator("tenant_key")
    @classmethod
    def _tenant_field(cls, value: str) -> str:
        from onceonly.schemas.envelope import Envelope

        fields = ["inbox", *Envelope.__dataclass_fields__]
        if value not in fields:
            raise ValueError(
                f"ONCEONLY_TENANT_KEY={value!r} names no envelope field; use one of "
                + ", ".join(fields)
            )
        return value

    @field_validator("log_level")
    @classmethod
    def _upper(cls, value: str) -> str:
        return value.upper()

    @classmethod
    def from_env(cls, **overrides: object) -> Settings:
        """Read the environment once; a bad value becomes a :class:`ConfigError`."""
        try:
            return cls(**overrides)  # type: ignore[arg-type]
        except ValueError as exc:  # pydantic.ValidationError is a ValueError
            raise ConfigError(f"invalid onceonly configuration: {exc}") from exc

    @property
    def record_max_bytes(self) -> int:
        """Largest Kafka record we produce: the body JSON-escaped (at most 2x) plus the envelope."""
        return 2 * self.max_body_bytes + 64 * 1024

    @property
    def envelope_mac_key(self) -> bytes | None:
        """ONCEONLY_ENVELOPE_SECRET as the key of every envelope's MAC (None: unset)."""
        secret = self.envelope_secret
        return secret.get_secret_value().encode() if secret is not None else None

    @property
    def is_local_broker(self) -> bool:
        """True when the bootstrap names this machine, so ``make run`` may start a broker."""
        host = self.kafka_bootstrap.split(",")[0].rsplit(":", 1)[0]
        return host in {"127.0.0.1", "localhost", "::1", "[::1]"}
