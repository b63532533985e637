"""Chaos run: many messages through real processes while things break; every one answered once.

::

    make chaos          # 10,000 messages, 500 threads, 5 inboxes, 2 workers, 5 kills,
                        # 1 broker restart
    make chaos-cluster  # the same on a 3-node cluster: instead of the broker restart,
                        # a leader SIGKILL and a rolling restart
    make chaos-ci       # the CI size: 500 messages, 50 threads, 1 kill, 1 broker restart
    python -m chaos.run --help

    # the full size, each at window 0 and at onceonly's default window (--window-ms 2000):
    python -m chaos.run                       # keys honoured: kills, broker restart, ...
    python -m chaos.run --pauses 3            # keys ignored: pauses, no kills

**Set-up**, every part a real process, in a fresh run directory (a temporary one unless
``--run-dir``): a Kafka broker (``python -m devstack broker``, the embedded single-node KRaft
broker,
on free ports), the topics (``onceonly topics``), the fake AgentMail server
(``python -m testkit.fakes.agentmail_server``) seeded over its control API with every message
of every inbox, ``onceonly ingest`` (a ``whsec_`` secret; ``ONCEONLY_PRODUCE_TIMEOUT_MS``
3000, so a broker outage answers 503 within 3 s) and ``--workers`` ``onceonly worker``
processes, each with its own data directory, web port and ``ONCEONLY_WORKER_ID``.

**The reply writer** (``--writer slow``, the default): ``chaos.writers:slow``, a model that
takes ``--writer-s`` seconds (1-8 at full size), ``--writer-long-share`` of its calls
``--writer-long-s`` (3 % of them 30-60 s), and writes a new, random text every call; the
workers run ``--writer-concurrency`` (256) calls at once. Every call is logged under
``writer-calls/`` of the run directory, so the run knows which calls are in flight (a pause
waits for them, the drain waits until none is) and the report gives the writer calls per
message. ``--writer instant``: onceonly's own acknowledgement.

**The mail API's keys** (``--keys``): ``honoured`` (a resend with the same Idempotency-Key
is replayed, not sent again) or ``ignored`` (the fake's ``--ignore-idempotency-keys``:
every reply call sends), so the run counts what onceonly prevents by itself. ``ignored``
is the default with ``--pauses``; then the faults only the keys can absorb (a SIGKILL
between a send and its record, a broker restart, a response lost after sending, a send
timed out while the server still sends) default to 0.

**On a cluster** (``--nodes 3``): instead of the single broker, ``python -m devstack broker --nodes
3``'s cluster (devstack's ``LocalCluster``, run from the chaos process so that one node at a
time can be killed and started: ``chaos/brokers.py``), three combined broker + controller
JVMs on a run of free ports; ``onceonly topics``, ingest and the workers get the whole
bootstrap list, and the run checks that the topics have 3 replicas and
``min.insync.replicas=2`` (what onceonly does on 3 brokers or more) before it goes on.

**Load**: ``--messages`` distinct AgentMail ``message.received`` events over ``--threads``
threads and ``--inboxes`` inboxes, POSTed to ingest as Svix would: signed at send time with
the ``svix`` package's own ``Webhook.sign`` (``testkit.signing.svix_headers``), and every
answer other than 2xx retried with backoff until ingest answers 204. New messages start at
``--rate`` per second, in a random interleaving of the threads; a thread's deliveries go
one after the other (each waits for the 204 of the one before), so the order in which they
reach Kafka is the planned one. ``--out-of-order`` (20 %) of the messages arrive after a
later message of their own thread (a message moved 1 to 3 places back; the count is exact).
``--duplicates`` (30 %) of the messages are delivered twice: half of them as two concurrent
POSTs, half re-sent ``--late-duplicate-delay-s`` to 1.5 times that later ("minutes later":
120 s at full size), with the same Svix id and body.

**Faults during the run**: ``--kills`` SIGKILLs of a random live worker at random moments of
the load (each restarted at once with the same data directory and worker id);
``--broker-restarts`` clean restarts of the broker (SIGTERM, ``--broker-down-s`` down, then
started again on the same port and data); on a cluster these are replaced by the broker
faults of a cluster, one after the other (``chaos/broker_faults.py``, planned in
``chaos/plan.py``): ``--leader-kills`` (1) SIGKILLs of the node that leads the most
partitions of the deliveries topic (from a metadata request), 20-35 % into the time new
messages arrive, started again after ``--broker-down-s`` on its data, the run waiting until
no partition is under-replicated; then ``--broker-restarts`` (1) rolling restarts, 45-55 %
in: every node in turn SIGTERMed (a controlled shutdown) and started again, the next one
only once every partition of every topic is back in sync; the fake AgentMail server, every
second, answers a ``--fail-rate`` share of the reply calls with a 5xx without sending, and a
``--lose-rate`` share with a 500 *after* sending (a lost response), with a random latency of
up to ``--latency-ms`` on every call, and ``--latency-spikes`` one-second spikes longer than
the workers' send timeout (``--send-timeout-s``), so sends time out while the server still
sends. A worker that exits on its own is restarted, like a supervisor would, and counted.
``--pauses`` SIGSTOPs (``chaos/pauses.py``), one in each slice of 10-80 % of the time new
messages arrive: the worker with the most writer calls in flight (waiting up to 30 s for
one to have any) is stopped for ``--pause-s`` (15-20 s, past its 10 s broker session, so
its partitions go to the other worker), then continued; it *survived* if the same process
still runs 30 s later. ``--lost`` (1 %) of the messages, among those with no duplicate,
lose their webhook: it is never POSTed, and only the catch-up below can find them.

**Approvals** (``--approvals SHARE``, ``make chaos-approvals``): the workers run with
``ONCEONLY_APPROVAL=writer`` and the slow writer returns ``Draft`` for that share of the
messages (from the seed and the message id: ``chaos/approvals.py``); a decider
(``chaos/decider.py``) lists the drafts (``GET /approvals`` on a live worker) and, after a
random delay, approves, edits or rejects each, 30 % of them twice (the API twice, the API
and ``onceonly approvals`` at once, an approval and an edit at once), while the workers are
killed. A rejected message is answered by its decline (no email); every approved draft
must have one email, with the approved text (the edit, if one was applied).

**Then**: wait until the workers are idle (consumer lag 0 and the outbox unchanged for a
while), ``onceonly replay --from-offset 0`` (the whole deliveries topic), wait again,
``onceonly catch-up --inbox <inbox> --since <run start>`` for every inbox, all at once (it
answers the lost webhooks' messages; each command's summary line is read, or the run fails),
wait again.

**Verdict**: the fake's outbox, counted per (inbox, replied-to message id). The run prints
the counts (messages, deliveries, emails, distinct answered, missing, doubled, kills, broker
restarts, duration, ...) and three figures: the **longest 503 window** (ingest-wide: from a
refused POST, while no window is open, to the next 204 answered to any POST: a time when
ingest accepted nothing), the **longest refused delivery** (one delivery, from its first 503
to its 204: how long a sender kept retrying), and the **longest gap in replies** (the
longest interval between consecutive emails in the fake's outbox, by the send time it
records, among those sent during the load phase). It exits 0 only if every message has
exactly one email (or is covered by one, below), none went to anything else, and every
delivery was accepted, and no dead letter names a message that was answered all the same.
Besides, the report gives the writer calls per message (mean and max: a call counts for every
message of its burst; a rewrite, a retry or a takeover asks again), the pauses and the
longest survived, and the lost webhooks answered after the catch-up began. Exit 1: the
verdict failed; exit 2: the run itself could not be carried out. The run directory (every
process's log, ``events.log`` with the timeline of faults, ``writer-calls/``,
``summary.txt``, ``findings.txt`` for each missing or doubled email with the log lines that
name it, its writer calls, which call wrote each of its emails, and the pause it was in
flight at) is kept whenever the run does not pass, and its path printed; ``--keep`` keeps
it anyway. ``--record`` also writes the summary to ``chaos/results/<date>-<size>.md``
(``<size>`` e.g. ``full``, ``full-3-nodes``, ``full-window-2000-pauses-keys-ignored``).

**Why one email per message is the right count**: the workers run with
``ONCEONLY_REORDER_WINDOW_MS=0`` (``--window-ms``), so nothing is held and no burst forms
by waiting; almost every message gets its own reply. With a window, a burst of one
thread's messages gets one reply, to the latest, and the others are recorded *covered* by
it; ``--window-ms N`` runs that way. Even at 0, a reply whose thread has newer messages
queued on its lane once its text is written takes them in (``ONCEONLY_SUPERSEDE_MAX``) and
covers the older: that happens when a thread's messages come faster than its replies go
out, as on a cluster (acks from two replicas) or after a stall. So the verdict counts a
message answered if it has its own email *or* the ledger records it covered by a message
that has exactly one, and wants emails == messages - covered.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import signal
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

import click

from chaos.common import (
    RESULTS_DIR,
    ROOT,
    ChaosError,
)
from chaos.drill import Chaos
from chaos.options import KEYS_HONOURED, KEYS_IGNORED, WRITER_INSTANT, WRITER_SLOW, Options
from chaos.verdict import Verdict
from chaos.writers import parse_range


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--messages", default=10_000, show_default=True, help="Distinct messages.")
@click.option("--threads", default=500, show_default=True)
@click.option("--inboxes", default=5, show_default=True)
@click.option("--workers", default=2, show_default=True, help="onceonly worker processes.")
@click.option(
    "--kills",
    type=int,
    default=None,
    help="Worker SIGKILLs during the load [default: 5; 0 with --keys ignored].",
)
@click.option(
    "--broker-restarts",
    type=int,
    default=None,
    help="Restarts of the broker; on a cluster, rolling restarts of every node "
    "[default: 1; 0 with --keys ignored].",
)
@click.option(
    "--nodes",
    type=click.IntRange(1, 5),
    default=1,
    show_default=True,
    help="1: the single embedded broker; 3 to 5: a local cluster "
    "(python -m devstack broker --nodes N).",
)
@click.option(
    "--leader-kills",
    default=1,
    show_default=True,
    help="On a cluster: SIGKILLs of the node leading the most deliveries partitions.",
)
@click.option(
    "--pauses",
    default=0,
    show_default=True,
    help="SIGSTOPs of the worker with the most writer calls in flight, each past its 10 s "
    "session, then SIGCONT.",
)
@click.option("--pause-s", default="15-20", show_default=True, help="How long each pause lasts.")
@click.option(
    "--keys",
    type=click.Choice([KEYS_HONOURED, KEYS_IGNORED]),
    default=None,
    help="Whether the fake AgentMail honours Idempotency-Key; ignored, every reply call sends, "
    "and the faults only the keys absorb (kills, broker restarts, lost responses, latency "
    "spikes) default to 0 [default: ignored with --pauses, else honoured].",
)
@click.option(
    "--writer",
    type=click.Choice([WRITER_SLOW, WRITER_INSTANT]),
    default=WRITER_SLOW,
    show_default=True,
    help="slow: chaos.writers:slow (seconds to a minute, a new text each call); instant: "
    "onceonly's acknowledgement.",
)
@click.option("--writer-s", default=None, help="Most writer calls [default: 1-8; 1-4 small].")
@click.option(
    "--writer-long-s", default=None, help="The long writer calls [default: 30-60; 10-20 small]."
)
@click.option(
    "--writer-long-share",
    type=float,
    default=None,
    help="Share of long writer calls [default: 0.03; 0.1 small].",
)
@click.option(
    "--writer-concurrency",
    default=256,
    show_default=True,
    help="ONCEONLY_WRITER_CONCURRENCY of the workers.",
)
@click.option(
    "--lost",
    type=float,
    default=None,
    help="Share of the messages whose webhook never comes; the catch-up must answer them "
    "[default: 0.01; 0.05 small].",
)
@click.option("--duplicates", default=0.30, show_default=True, help="Share delivered twice.")
@click.option("--out-of-order", default=0.20, show_default=True, help="Share out of order.")
@click.option("--rate", default=40.0, show_default=True, help="New messages per second.")
@click.option(
    "--late-duplicate-delay-s",
    type=float,
    default=None,
    help="Late duplicates come this to 1.5x this later [default: 120 at 10,000 messages or "
    "more, else 20].",
)
@click.option(
    "--window-ms",
    default=0,
    show_default=True,
    help="ONCEONLY_REORDER_WINDOW_MS of the workers (0: no bursts, one email per message).",
)
@click.option("--fail-rate", default=0.03, show_default=True, help="Reply calls answered 5xx.")
@click.option(
    "--lose-rate",
    type=float,
    default=None,
    help="Replies sent, answer lost [default: 0.02; 0 with --keys ignored].",
)
@click.option("--latency-ms", default=30.0, show_default=True, help="Random latency up to.")
@click.option(
    "--latency-spikes",
    default=None,
    type=int,
    help="Spikes past the send timeout [default: 3, 1 below 10,000 messages; 0 with --keys "
    "ignored].",
)
@click.option("--send-timeout-s", default=3.0, show_default=True)
@click.option("--broker-down-s", default=5.0, show_default=True)
@click.option("--concurrency", default=64, show_default=True, help="POSTs in flight at most.")
@click.option("--delivery-timeout-s", default=600.0, show_default=True)
@click.option("--drain-timeout-s", default=1200.0, show_default=True)
@click.option("--seed", type=int, default=None, help="Random seed (printed; default: random).")
@click.option(
    "--approvals",
    default=0.0,
    show_default=True,
    help="Share of the messages whose replies are drafts (ONCEONLY_APPROVAL=writer) that a "
    "decider approves, edits or rejects at random times, sometimes twice (chaos/decider.py).",
)
@click.option("--run-dir", type=click.Path(path_type=Path), default=None)
@click.option("--keep", is_flag=True, help="Keep the run directory even if the run passes.")
@click.option("--record", is_flag=True, help="Write chaos/results/<date>-<size>.md too.")
def main(**kwargs: Any) -> None:
    """Chaos run: real broker, ingest, workers and a faulty AgentMail; exactly one email per
    message at the end, or a non-zero exit."""
    opts = _options(kwargs)
    if opts.run_dir is not None:
        opts.run_dir.mkdir(parents=True, exist_ok=True)
        run_dir = opts.run_dir.resolve()
    else:
        run_dir = Path(tempfile.mkdtemp(prefix=f"onceonly-chaos-{opts.size}-"))
    chaos = Chaos(opts, run_dir)

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    code = 2
    verdict: Verdict | None = None
    try:
        verdict = asyncio.run(chaos.run())
        code = 0 if verdict.passed else 1
    except ChaosError as exc:
        click.echo(f"chaos: the run could not be carried out: {exc}", err=True)
    except KeyboardInterrupt:
        click.echo("chaos: interrupted", err=True)
        code = 130
    except Exception:
        click.echo("chaos: the run broke:\n" + traceback.format_exc(), err=True)
    finally:
        for worker in chaos.workers:
            worker.stop(10)
        for proc in (chaos.ingest, chaos.mail):
            if proc is not None:
                proc.stop(10)
        chaos.broker.stop()
    if verdict is not None:
        text = "\n".join(verdict.lines())
        (run_dir / "summary.txt").write_text(text + "\n", encoding="utf-8")
        if verdict.findings:
            (run_dir / "findings.txt").write_text("\n".join(verdict.findings), encoding="utf-8")
        click.echo("")
        click.echo(text)
        if opts.record:
            RESULTS_DIR.mkdir(parents=True, exist_ok=True)
            path = RESULTS_DIR / f"{verdict.started:%Y-%m-%d}-{opts.size}.md"
            path.write_text(verdict.markdown(), encoding="utf-8")
            click.echo(f"recorded in {path.relative_to(ROOT)}")
    if code == 0 and not opts.keep:
        shutil.rmtree(run_dir, ignore_errors=True)
    else:
        click.echo(f"run directory kept: {run_dir}")
    sys.exit(code)


def _options(kwargs: dict[str, Any]) -> Options:
    """The options, with the defaults that depend on the size; refuses what cannot run."""
    big = kwargs["messages"] >= 10_000
    if kwargs["late_duplicate_delay_s"] is None:
        kwargs["late_duplicate_delay_s"] = 120.0 if big else 20.0
    if kwargs["keys"] is None:
        kwargs["keys"] = KEYS_IGNORED if kwargs["pauses"] > 0 else KEYS_HONOURED
    honoured = kwargs["keys"] == KEYS_HONOURED
    defaults: dict[str, Any] = {
        # only the mail API's keys absorb these: with the keys ignored they are off
        "kills": 5 if honoured else 0,
        "broker_restarts": 1 if honoured else 0,
        "lose_rate": 0.02 if honoured else 0.0,
        "latency_spikes": (3 if big else 1) if honoured else 0,
        "writer_s": "1-8" if big else "1-4",
        "writer_long_s": "30-60" if big else "10-20",
        "writer_long_share": 0.03 if big else 0.1,
        "lost": 0.01 if big else 0.05,
    }
    for name, value in defaults.items():
        if kwargs[name] is None:
            kwargs[name] = value
    for name in ("pause_s", "writer_s", "writer_long_s"):
        try:
            kwargs[name] = parse_range(kwargs[name])
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint=f"--{name.replace('_', '-')}") from exc
    if kwargs["seed"] is None:
        kwargs["seed"] = random.SystemRandom().randrange(1_000_000)
    opts = Options(**kwargs)
    if opts.messages < 1 or opts.workers < 1 or opts.rate <= 0:
        raise click.BadParameter("need at least one message, one worker and a positive rate")
    if not 0 <= opts.lost < 1 or not 0 <= opts.writer_long_share <= 1:
        raise click.BadParameter("--lost and --writer-long-share are shares (0 to 1)")
    if not 0 <= opts.approvals <= 1 or (opts.approvals and opts.writer != WRITER_SLOW):
        raise click.BadParameter("--approvals is a share (0 to 1) and needs --writer slow")
    if opts.writer_calls_longest_s >= WRITER_TIMEOUT_S:
        raise click.BadParameter(
            f"writer calls must end within the workers' writer timeout ({WRITER_TIMEOUT_S:g} s)"
        )
    if opts.nodes == 2:
        raise click.BadParameter("--nodes 2 keeps one replica per topic: give 1 or 3 or more")
    return opts


#: ONCEONLY_WRITER_TIMEOUT_S's default, which the chaos workers keep
WRITER_TIMEOUT_S = 120.0

if __name__ == "__main__":
    main()
