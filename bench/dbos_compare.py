"""onceonly's worker beside a DBOS Transact app (``python -m bench.dbos_compare``,
``make bench-dbos``): the same envelopes, writer and faults, one after the other; a steady
run, then a run with a SIGKILL halfway. Targets (issue 17): replies/s >= DBOS's, p99 <=
its, exactly 1 email per message, fewer model calls per message after the kill.
Report: ``<--out>/dbos-<date>.md``."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from bench import _dbos_figures as fig
from bench import _dbos_stack as stack
from bench._agent_load import AgentBench
from bench._model import CALLS_ENV
from bench._options import Float, Int, Opt, Values, with_partitions
from bench._proc_records import thread_records
from bench._procs import Broker, console
from bench._report import contended, verdict_report
from bench._runner import Scenario, command


def worker_settings(opts: Values) -> dict[str, str]:
    return {
        "ONCEONLY_REPLY_WRITER": "bench._model:counted",
        "ONCEONLY_REORDER_WINDOW_MS": "0",
        "ONCEONLY_WRITER_CONCURRENCY": str(opts.concurrency),
    }


@dataclass(frozen=True, slots=True)
class Load:
    """The envelopes, built once, that both contenders are fed."""

    warm: list[stack.Message]
    steady: list[stack.Message]
    kill: list[stack.Message]

    @classmethod
    def build(cls, opts: Values, tag: str) -> Load:
        steady_n = int(opts.rate * opts.duration_s)
        kill_n = int(opts.rate * opts.kill_duration_s)
        return cls(
            list(thread_records(f"{tag}w", range(2 * opts.partitions))),
            list(thread_records(tag, range(steady_n))),
            list(thread_records(tag, range(steady_n, steady_n + kill_n))),
        )

    @property
    def measured(self) -> list[str]:
        return [m for m, _ in self.steady + self.kill]


def contend(c: stack.Contender, opts: Values, load: Load) -> fig.SystemRun:
    """Warm-up, steady run, kill run and the counts, for one contender."""
    run = fig.SystemRun(c.label)
    with c.bench.running():
        c.bench.start_mail()
        c.start(c)
        console.print(f"({c.label}) warm-up …")
        stack.warm_up(c, load.warm)
        console.print(f"({c.label}) {len(load.steady):,} messages at {opts.rate:g}/s …")
        stack.steady(c, load.steady, opts.rate, run)
        console.print(
            f"({c.label}) {run.replies_per_s:.1f} replies/s, p50 {run.p(0.5):.2f} s, "
            f"p99 {run.p(0.99):.2f} s; {len(load.kill):,} more with a SIGKILL halfway …"
        )
        killed, restarted = stack.kill_run(c, load.kill, opts.rate, run)
        stack.count(c, load.measured, killed, restarted, run)
    console.print(
        f"({c.label}) emails per message {run.emails.describe()}; model calls per message "
        f"{run.calls.describe()}; first reply {run.first_reply_after_restart_s:.1f} s "
        "after the restart"
    )
    return run


def run_onceonly(opts: Values, broker: Broker, work: Path, load: Load) -> fig.SystemRun:
    bench = AgentBench.fresh(broker, work, "onceonly", opts.partitions)
    bench.extra = worker_settings(opts) | {CALLS_ENV: str(bench.work / "model-calls.txt")}
    return contend(stack.Contender("onceonly worker", bench, stack.start_onceonly), opts, load)


def run_dbos(opts: Values, broker: Broker, work: Path, load: Load) -> tuple[fig.SystemRun, str]:
    from bench._postgres import postgres

    bench = AgentBench.fresh(broker, work, "dbos", opts.partitions)
    with postgres() as pg:
        url = pg.dsn.rsplit("/", 1)[0] + f"/dbos_bench_{bench.tag}"
        start = stack.dbos_starter(url, f"onceonly-bench-dbos-{bench.tag}")
        c = stack.Contender("DBOS app", bench, start, {"postgres": pg.pid}, name="app")
        return contend(c, opts, load), pg.version


WHEN = "during a steady run (`other` above)"
EFFECT = "latencies and CPU per reply are higher than on an idle machine"


def notes(opts: Values, a: fig.SystemRun, b: fig.SystemRun, pg_version: str) -> list[str]:
    return [
        f"load: {opts.rate:g} records/s by the clock, {opts.duration_s:g} s steady, then "
        f"{opts.kill_duration_s:g} s with a SIGKILL halfway; every record a distinct AgentMail "
        f"message.received in a thread of its own; {opts.partitions} partitions; the very same "
        "envelopes for both, each system on a deliveries topic of its own",
        "latency: from the broker's acknowledgement of the record (acks=all) to the mail server "
        "receiving the email, both on this machine's clock",
        "onceonly: "
        + ", ".join(f"{k}={v}" for k, v in worker_settings(opts).items())
        + "; window 0 because DBOS has no reorder by payload time to compare with",
        f"DBOS: dbos {_version('dbos')} (its own virtualenv, .venv-dbos), `@DBOS.kafka_consumer` "
        "with its defaults (ordering none, the internal queue polled every 1 s, librdkafka's "
        f"45 s session timeout), PostgreSQL {pg_version} (Debian's, fsync on) as its system "
        "database; the send through the agentmail SDK's own httpx client",
        "CPU per reply: CPU seconds of each process of the system over the steady run (from "
        "its first record to its last reply) over its replies; PostgreSQL counts with every "
        "backend; the broker is the same JVM for both. Memory: PSS at the end of the steady run",
        "emails per message: distinct idempotency keys the mail server was sent per message "
        "(AgentMail sends one email per key), over the steady and the kill run; send requests "
        "count replays of a key too; model calls per message: calls started (a call cut short "
        "by the kill counts), over the kill run",
        "model calls: a call in flight at the kill is made again after the restart by "
        "either system (onceonly has no ledger record before the writer returns, DBOS no step "
        "checkpoint); a call that had returned is not made again (the ledger's pending record, "
        "the step's checkpoint; the row of repeats counts any): calls per message after a "
        "kill follow the calls in flight at that moment",
        *(f"({a.label}) {n}" for n in a.notes),
        *(f"({b.label}) {n}" for n in b.notes),
        *filter(None, [contended([a.other_cpu, b.other_cpu], WHEN, EFFECT)]),
    ]


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:  # it lives in .venv-dbos, not here
        return _dbos_version()


def _dbos_version() -> str:
    found = sorted(
        (stack.DBOS_PYTHON.parent.parent / "lib").glob("python*/site-packages/dbos-*.dist-info")
    )
    return found[-1].name.removeprefix("dbos-").removesuffix(".dist-info") if found else "unknown"


Contest = tuple[fig.SystemRun, fig.SystemRun, str]  #: onceonly's, the DBOS app's, PostgreSQL's


def collect(opts: Values, broker: Broker, work: Path) -> Contest:
    load = Load.build(opts, secrets.token_hex(3))
    a = run_onceonly(opts, broker, work, load)
    b, pg_version = run_dbos(opts, broker, work, load)
    return a, b, pg_version


def report_lines(opts: Values, run: Contest) -> list[str]:
    a, b, pg_version = run
    return verdict_report(fig.headers(a, b), fig.rows(a, b), notes(opts, a, b, pg_version))


def about_dbos(run: Contest, _seconds: float) -> list[tuple[str, str]]:
    return [("DBOS", f"dbos {_version('dbos')}, PostgreSQL {run[2]}")]


OPTIONS = (
    Opt("--rate", Float(1, 500), help="Records/s", sizes=(50.0, 20.0)),
    Opt("--duration", Float(2, 600), help="Steady run, s", dest="duration_s", sizes=(60.0, 15.0)),
    Opt(
        "--kill-duration",
        Float(4, 600),
        help="Kill run, s",
        dest="kill_duration_s",
        sizes=(60.0, 20.0),
    ),
    Opt("--concurrency", Int(1, 1024), 64),
)
DBOS = Scenario(
    "dbos",
    "onceonly vs DBOS Transact",
    OPTIONS,
    with_partitions,
    collect,
    report_lines,
    smoke="A run of a few minutes (20/s, 15 s, 20 s).",
    about=about_dbos,
)
main = command(
    DBOS, "onceonly's worker and a DBOS Transact app on the same records, then a SIGKILL each."
)


if __name__ == "__main__":
    main()
