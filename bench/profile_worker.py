"""Profile the worker a benchmark starts: ``python -m bench.profile_worker --out P -- CMD``
attaches py-spy to the command's ``onceonly worker`` after ``--after`` replies and writes
``P.raw.txt``, ``P.svg`` and ``P.json`` (CPU ms per reply over the window)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import click

from bench._proc_stack import scrape
from bench._procs import cpu_seconds, stat_fields, thread_seconds, tree_pids
from bench._runner import loadavg

REPLIES = "onceonly_replies_sent_total"
#: The worker's argv ends with these (``bench._proc_phases.Bench.start_worker``).
WORKER_ARGV = ["-m", "onceonly", "worker"]


@dataclass(frozen=True, slots=True)
class Window:
    """What the worker spent over the profiled window."""

    pid: int
    seconds: float
    cpu_s: float
    replies: float
    load_start: str
    load_end: str
    threads_cpu_s: dict[str, float]
    #: of ``cpu_s``, the kernel's (system time): the socket writes' and reads' real cost,
    #: which py-spy's samples overstate (a thread in a system call is sampled running)
    system_s: float = float("nan")

    @property
    def ms_per_reply(self) -> float:
        return 1000 * self.cpu_s / self.replies if self.replies else float("nan")


def find_worker(ancestor: int) -> int | None:
    """The pid of an ``onceonly worker`` descending from ``ancestor``, or None."""
    for pid in sorted(tree_pids(ancestor)):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if [a.decode(errors="replace") for a in argv if a][-3:] == WORKER_ARGV:
            return pid
    return None


def worker_port(pid: int) -> int:
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    for item in environ:
        name, _, value = item.decode(errors="replace").partition("=")
        if name == "ONCEONLY_WORKER_PORT":
            return int(value)
    raise click.ClickException(f"worker {pid} has no ONCEONLY_WORKER_PORT in its environment")


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds per thread, keyed by name and thread id."""
    return {f"{comm}:{tid}": cpu for tid, (comm, cpu) in thread_seconds(pid).items()}


def replies(port: int) -> float | None:
    found = scrape(port)
    return None if found is None else found.get(REPLIES, 0.0)


def wait_for_worker(bench: subprocess.Popen[bytes], after: float) -> tuple[int, int]:
    """(pid, metrics port) of the benchmark's worker once it has sent ``after`` replies."""
    pid = port = None
    while bench.poll() is None:
        pid = pid or find_worker(bench.pid)
        if pid is not None:
            port = port or worker_port(pid)
            sent = replies(port)
            if sent is not None and sent >= after:
                return pid, port
        time.sleep(0.5)
    raise click.ClickException(f"the benchmark ended (status {bench.returncode}) first")


def system_seconds(pid: int) -> float:
    """System CPU seconds of a process (all its threads) so far; NaN if unreadable."""
    fields = stat_fields(pid)
    return float("nan") if fields is None else int(fields[12]) / os.sysconf("SC_CLK_TCK")


def profile(pid: int, port: int, out: Path, spy: tuple[str, int, float, bool]) -> Window:
    binary, rate, duration, gil = spy
    common = ["record", "--pid", str(pid), "--rate", str(rate), "--duration", f"{duration:g}"]
    common += ["--nonblocking", *(["--gil"] if gil else [])]
    load_start, cpu0, sent0, t0 = loadavg(), cpu_seconds(pid), replies(port), time.monotonic()
    system0 = system_seconds(pid)
    threads0 = thread_cpu(pid)
    spies = [
        subprocess.Popen([binary, *common, "--format", fmt, "--output", str(path)])
        for fmt, path in (
            ("raw", out.with_suffix(".raw.txt")),
            ("flamegraph", out.with_suffix(".svg")),
        )
    ]
    time.sleep(duration)
    cpu1, sent1, t1 = cpu_seconds(pid), replies(port), time.monotonic()
    system = system_seconds(pid) - system0
    threads = {k: round(v - threads0.get(k, 0.0), 2) for k, v in thread_cpu(pid).items()}
    for process in spies:
        process.wait()
    sent = (sent1 or 0) - (sent0 or 0)
    return Window(pid, t1 - t0, cpu1 - cpu0, sent, load_start, loadavg(), threads, system)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--out", type=click.Path(path_type=Path), required=True, help="Path without suffix.")
@click.option("--duration", type=click.FloatRange(1, 600), default=20.0, show_default=True)
@click.option("--rate", type=click.IntRange(1, 1000), default=200, show_default=True)
@click.option("--after", type=float, default=100, show_default=True, help="Replies first.")
@click.option("--py-spy", "binary", default="py-spy", show_default=True)
@click.option("--gil", is_flag=True, help="Sample only the thread holding the GIL (py-spy --gil).")
@click.argument("command", nargs=-1, required=True)
def main(
    out: Path,
    duration: float,
    rate: int,
    after: float,
    binary: str,
    gil: bool,
    command: tuple[str, ...],
) -> None:
    """Run COMMAND (a benchmark) and profile the worker it starts."""
    out.parent.mkdir(parents=True, exist_ok=True)
    bench = subprocess.Popen(list(command))
    try:
        pid, port = wait_for_worker(bench, after)
        window = profile(pid, port, out, (binary, rate, duration, gil))
    except BaseException:
        bench.terminate()
        raise
    summary = {**asdict(window), "ms_per_reply": window.ms_per_reply, "command": list(command)}
    out.with_suffix(".json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    click.echo(
        f"worker {pid}: {window.cpu_s:.2f} CPU s / {window.replies:.0f} replies over "
        f"{window.seconds:.1f} s = {window.ms_per_reply:.2f} ms per reply "
        f"({window.system_s:.2f} s of it system); "
        f"load {window.load_start} -> {window.load_end}",
        err=True,
    )
    sys.exit(bench.wait())


if __name__ == "__main__":
    main()
