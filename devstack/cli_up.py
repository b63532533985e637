"""``python -m devstack up``: what ``make run`` runs, the whole local stack in the foreground."""

from __future__ import annotations

import os

import click

from onceonly.cli.startup import run_until_signal, settings_from_env


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
    from devstack.up import local_stack
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
    with local_stack(settings, click.echo):

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
            run_until_signal(serve(settings, ready=announce))
