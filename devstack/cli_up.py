"""``python -m devstack up``: what ``make run`` runs, the whole local stack in the foreground."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Coroutine
from typing import Any

import click

from devstack.children import Stopping
from onceonly.cli.startup import settings_from_env

#: ingest's own stop (aiohttp waits up to 60 s for requests in flight) is cut after this
INGEST_STOP_S = 3.0


@click.command()
def up() -> None:
    """Everything for a local stack: broker (if local), topics, worker, ingest. Ctrl-C stops all."""
    from devstack.dev_secret import (
        FILE_NAME,
        VARIABLE,
        dev_secret_env,
        ensure_dev_secret,
        has_any_secret,
        with_dev_secret,
    )
    from devstack.up import STOP_BUDGET_S, local_stack
    from onceonly.foundation.providers import ALL
    from onceonly.ingest.app import serve
    from onceonly.processors.mail.outbox import OUTBOX_FILE
    from onceonly.processors.mail.registry import dry_runs

    settings = settings_from_env()
    dev_secret = None
    if not has_any_secret(settings):  # a first run: make a secret so a first event works
        dev_secret = ensure_dev_secret(settings.run_dir)
        settings = with_dev_secret(settings, dev_secret)
        # the processes started below read their settings from the environment
        os.environ.update(dev_secret_env(dev_secret))
    stopping = Stopping(STOP_BUDGET_S)
    with local_stack(settings, click.echo, stopping):

        def announce(url: str) -> None:
            click.echo("")
            click.echo(f"kafka      {settings.kafka_bootstrap}")
            if dev_secret is not None:
                click.echo(
                    f"secret     {VARIABLE}={dev_secret} (a development secret, kept in "
                    f"{settings.run_dir / FILE_NAME}; set a secret of your own to replace it)"
                )
                click.echo(
                    "try        make send   "
                    "(in another terminal: signs and posts a sample AgentMail event)"
                )
            for route in ALL:
                click.echo(f"webhook    POST {url}/webhooks/{route}")
            click.echo(f"metrics    {url}/metrics (ingest)")
            worker_url = f"http://{settings.worker_host}:{settings.worker_port}"
            click.echo(f"metrics    {worker_url}/metrics (worker)")
            writable = "" if settings.ops_token else ", read-only: no ONCEONLY_OPS_TOKEN"
            click.echo(f"operator   {worker_url}/ops (worker{writable})")
            for entry in dry_runs(settings):
                click.echo(
                    f"mail       dry run: no {entry.key_variable}, replies are recorded in "
                    f"{settings.run_dir / OUTBOX_FILE}"
                )
            click.echo(f"health     {url}/healthz  {url}/readyz")
            click.echo("Ctrl-C stops everything.")

        if settings.ingest_processes > 1:
            from onceonly.ingest.processes import run_processes

            run_processes(settings, ready=announce)
        else:
            run_until_signal(serve(settings, ready=announce), stopping)


def run_until_signal(coro: Coroutine[Any, Any, None], stopping: Stopping) -> None:
    """Ingest in the foreground until SIGINT or SIGTERM, which begins the stack's stop: the
    worker is asked to stop at that moment, beside ingest, and ingest's own stop is cut
    after INGEST_STOP_S (a request still in flight is not answered; its sender retries)."""

    async def runner() -> None:
        task = asyncio.ensure_future(coro)
        loop = asyncio.get_running_loop()

        def stop() -> None:
            stopping.begin()
            task.cancel()
            loop.call_later(INGEST_STOP_S, task.cancel)

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop)
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(runner())
