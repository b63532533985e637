"""``python -m bench.mutation_report`` (``make mutate``): mutmut over the decision core, then
``bench/results/mutation-<date>.md``: per-module scores and every survivor, explained by
``bench/mutation_notes.toml``. ``--no-run`` only writes the report from the last run."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import tomllib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import click

from bench._options import Opt, cli
from bench._procs import ROOT
from bench._report import RESULTS_DIR

NOTES = Path(__file__).resolve().parent / "mutation_notes.toml"

#: mutmut 3's exit codes (mutmut.__main__.status_by_exit_code); a timeout is a kill
KILLED = {1, 3, -24, 24, 36, 152, 255}
SURVIVED = {0}
NO_TESTS = {5, 33}


@dataclass(frozen=True, slots=True)
class Mutant:
    name: str  #: e.g. onceonly.processors.dedupe.decisions.x_decide__mutmut_3
    module: str  #: the file, e.g. onceonly/processors/dedupe/decisions.py
    status: str  #: killed, survived, no tests, or another mutmut status


@dataclass(frozen=True, slots=True)
class Notes:
    equivalent: dict[str, str]  #: behaves as the original: left out of the score
    killed_by: dict[str, str]
    harmless: dict[str, str]  #: a survivor accepted, with why: still counted as survived


def status_of(exit_code: int | None) -> str:
    if exit_code in KILLED:
        return "killed"
    if exit_code in SURVIVED:
        return "survived"
    if exit_code in NO_TESTS:
        return "no tests"
    return "not checked" if exit_code is None else f"exit {exit_code}"


def modules_under_test(root: Path = ROOT) -> list[str]:
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    return list(config["tool"]["mutmut"]["only_mutate"])


def load_mutants(root: Path, modules: list[str]) -> list[Mutant]:
    out: list[Mutant] = []
    for module in modules:
        meta = root / "mutants" / f"{module}.meta"
        codes = json.loads(meta.read_text(encoding="utf-8"))["exit_code_by_key"]
        out += [Mutant(name, module, status_of(code)) for name, code in sorted(codes.items())]
    return out


def load_notes(path: Path = NOTES) -> Notes:
    data = tomllib.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    return Notes(
        dict(data.get("equivalent", {})),
        dict(data.get("killed_by", {})),
        dict(data.get("harmless", {})),
    )


def tally(mutants: list[Mutant], notes: Notes) -> Counter[str]:
    """Counts of killed, survived (no tests included) and equivalent mutants."""
    counts: Counter[str] = Counter()
    for m in mutants:
        if m.status == "killed":
            counts["killed"] += 1
        elif m.name in notes.equivalent:
            counts["equivalent"] += 1
        else:
            counts["survived"] += 1
    return counts


def score(counts: Counter[str]) -> float:
    """Killed over the non-equivalent mutants, in %; 100 when there are none."""
    total = counts["killed"] + counts["survived"]
    return 100.0 * counts["killed"] / total if total else 100.0


def diff_of(mutant: Mutant) -> str:
    """The mutated line(s) as ``old`` -> ``new`` (mutmut's diff; run from the repository root)."""
    from mutmut.__main__ import get_diff_for_mutant

    shown = get_diff_for_mutant(mutant.name, path=mutant.module).splitlines()
    old = [line[1:].strip() for line in shown if line.startswith("-") and line[:3] != "---"]
    new = [line[1:].strip() for line in shown if line.startswith("+") and line[:3] != "+++"]
    return f"`{' '.join(old)}` → `{' '.join(new)}`".replace("|", "\\|")


def render(
    mutants: list[Mutant],
    notes: Notes,
    *,
    seconds: float | None,
    when: str,
    diff: Callable[[Mutant], str] = diff_of,
    remark: str = "",
) -> str:
    modules = list(dict.fromkeys(m.module for m in mutants))
    lines = [f"# Mutation testing of the decision core, {when}", ""]
    if seconds is not None:
        lines += [f"`make mutate` ran mutmut in {seconds / 60:.1f} min (one child, nice 5).", ""]
    if remark:
        lines += [remark, ""]
    lines += [
        "| module | mutants | killed | survived | equivalent | score |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for module in [*modules, None]:
        chosen = [m for m in mutants if module is None or m.module == module]
        c = tally(chosen, notes)
        label = "**all**" if module is None else f"`{module}`"
        lines.append(
            f"| {label} | {len(chosen)} | {c['killed']} | {c['survived']} | "
            f"{c['equivalent']} | {score(c):.1f} % |"
        )
    lines += [
        "",
        "Score: killed / (mutants - equivalent). A mutant no unit test reaches counts as",
        "survived; a timeout counts as killed.",
        "",
    ]
    return "\n".join(lines + _listing(mutants, notes, diff)) + "\n"


def _listing(mutants: list[Mutant], notes: Notes, diff: Callable[[Mutant], str]) -> list[str]:
    by_name = {m.name: m for m in mutants}
    lines = ["## Survivors of the unit tests, and what became of them", ""]
    lines += ["| mutant | change | verdict |", "| --- | --- | --- |"]
    listed = [m for m in mutants if m.status != "killed" or m.name in notes.killed_by]
    for m in listed:
        if m.name in notes.equivalent and m.status != "killed":
            verdict = f"equivalent: {notes.equivalent[m.name]}"
        elif m.status == "killed":
            verdict = f"killed by `{notes.killed_by[m.name]}`"
        elif m.name in notes.harmless:
            verdict = f"survives, harmless: {notes.harmless[m.name]}"
        else:
            verdict = f"**{m.status}, unexplained**"
        lines.append(f"| `{m.name}` | {diff(m)} | {verdict} |")
    noted = {**notes.equivalent, **notes.killed_by, **notes.harmless}
    stale = sorted(n for n in noted if n not in by_name)
    if stale:
        lines += ["", "Notes for mutants that no longer exist: " + ", ".join(stale)]
    return lines


def run_mutmut(root: Path = ROOT) -> float:
    """A clean ``mutmut run`` under nice with one child; its wall time in seconds."""
    shutil.rmtree(root / "mutants", ignore_errors=True)
    started = time.monotonic()
    subprocess.run(
        ["nice", "-n", "5", sys.executable, "-m", "mutmut", "run", "--max-children", "1"],
        cwd=root,
        check=True,
    )
    return time.monotonic() - started


OPTIONS = (
    Opt("--no-run", help="Only write the report from the last run.", flag=True),
    Opt("--seconds", float, help="With --no-run: the last run's wall time."),
    Opt("--remark", None, "", "A paragraph under the run time (e.g. re-runs)."),
)


@cli(OPTIONS, "Run mutmut over the decision core and write the report of its scores.")
def main(no_run: bool, seconds: float | None, remark: str) -> None:
    if not no_run:
        seconds = run_mutmut()
    mutants = load_mutants(ROOT, modules_under_test())
    when = datetime.now(UTC).date().isoformat()
    report = RESULTS_DIR / f"mutation-{when}.md"
    text = render(mutants, load_notes(), seconds=seconds, when=when, remark=remark)
    report.write_text(text, encoding="utf-8")
    counts = tally(mutants, load_notes())
    click.echo(f"{report}: score {score(counts):.1f} % ({dict(counts)})")


if __name__ == "__main__":
    main()
