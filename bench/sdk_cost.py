"""``python -m bench.sdk_cost``: the agentmail SDK's CPU per reply alone, (5) of the
processor benchmark, without its broker: ``AgentMailSender.reply`` against the instant mail
server through ``ApiClient``'s direct path and the whole httpx way (its baseline, before
issue 46), alternated in one process; prints both and their ratio."""

from __future__ import annotations

import tempfile
from pathlib import Path

import click

from bench._proc_report import sdk_cost_pair
from bench._proc_stack import serve_mail
from bench._procs import console


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--calls", default=8000, show_default=True, help="Replies per variant.")
@click.option("--rounds", default=8, show_default=True, help="Alternations of the two.")
def main(calls: int, rounds: int) -> None:
    """Time the SDK's reply call both ways; print ms of CPU per reply and the ratio."""
    with tempfile.TemporaryDirectory() as work:
        mail, port = serve_mail(Path(work) / "mail.log")
        try:
            direct, whole = sdk_cost_pair(f"http://127.0.0.1:{port}", calls, rounds)
        finally:
            mail.stop()
    console.print(f"direct path:          {direct:.3f} ms of CPU per reply")
    console.print(f"the whole httpx way:  {whole:.3f} ms of CPU per reply")
    console.print(f"direct / whole httpx: {direct / whole:.3f}")


if __name__ == "__main__":
    main()
