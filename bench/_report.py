"""The benchmarks' one report writer: ratios to the baselines, the tables, the markdown report
(with its chart or without), built by pure functions; :mod:`bench._runner` runs them."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

RESULTS_DIR = Path(__file__).resolve().parent / "results"

#: CPU of other processes, in % of one core, above which a figure is reported as contended.
CONTENDED_PERCENT = 20.0

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Figure:
    """One variant's throughput (per second) and, for servers, its latency at that rate."""

    key: str
    label: str
    rate: float
    p50_ms: float = math.nan
    p99_ms: float = math.nan

    @property
    def has_latency(self) -> bool:
        return not (math.isnan(self.p50_ms) and math.isnan(self.p99_ms))


@dataclass(frozen=True, slots=True)
class Comparison:
    """onceonly's figure (``subject``) next to each baseline measured in the same run;
    ``targets``: the least ``subject / baseline`` throughput ratio asked for, by key."""

    unit: str
    subject: Figure
    baselines: tuple[Figure, ...]
    targets: dict[str, float] = field(default_factory=dict)


def ratio(value: float, base: float) -> float:
    """``value / base``; NaN when either is missing (NaN) or the base is not positive."""
    if math.isnan(value) or math.isnan(base) or base <= 0:
        return math.nan
    return value / base


def ratios(comparison: Comparison) -> dict[str, float]:
    """The subject's throughput as a ratio to each baseline's, by baseline key."""
    return {b.key: ratio(comparison.subject.rate, b.rate) for b in comparison.baselines}


def fmt(value: float, spec: str) -> str:
    """``value`` formatted by ``spec``; "n/a" for NaN."""
    return "n/a" if math.isnan(value) else format(value, spec)


def fmt_ratio(value: float) -> str:
    """Three significant digits (0.51, 0.0136, 1.23); "n/a" for NaN."""
    return "n/a" if math.isnan(value) else f"{value:.3g}"


def fmt_rate(value: float) -> str:
    return fmt(value, ",.0f")


def fmt_ms(value: float) -> str:
    return fmt(value, ".2f")


def met(ok: bool) -> str:
    return "met" if ok else "NOT met"


def contended(others: Iterable[float], when: str, effect: str) -> str | None:
    """A warning when the rest of the machine (``other``, % of one core) took CPU while
    figures were measured: up to how much, ``when``, and ``effect``; None below
    :data:`CONTENDED_PERCENT`."""
    worst = max(others, default=0.0)
    if worst < CONTENDED_PERCENT:
        return None
    return f"other work on this machine took up to {worst:.0f}% of a core {when}: {effect}"


def thin(points: Sequence[T], most: int) -> list[T]:
    """At most ``most`` of ``points``, evenly spaced, the first and the last among them."""
    if len(points) <= most:
        return list(points)
    step = (len(points) - 1) / (most - 1)
    return [points[round(i * step)] for i in range(most)]


def fmt_cpu(cpu: dict[str, float]) -> str:
    """CPU shares as ``name value · …`` (% of one core), NaNs left out."""
    return " · ".join(f"{name} {value:.0f}" for name, value in cpu.items() if not math.isnan(value))


def ratio_table(comparison: Comparison) -> list[str]:
    """A markdown table, one row per baseline: its figures, the subject's, and the
    subject's as ratios to it (throughput; p50 and p99 too when both have latencies)."""
    s = comparison.subject
    latency = s.has_latency and any(b.has_latency for b in comparison.baselines)
    header = [
        "baseline",
        comparison.unit,
        f"{s.label}, {comparison.unit}",
        f"{s.key} / baseline, {comparison.unit}",
    ]
    align = ["---", "---:", "---:", "---:"]
    if latency:
        header += ["baseline p99 ms", f"{s.key} / baseline, p50", f"{s.key} / baseline, p99"]
        align += ["---:", "---:", "---:"]
    header.append("target")
    align.append("---")
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    by_key = ratios(comparison)
    for b in comparison.baselines:
        r = by_key[b.key]
        row = [b.label, fmt_rate(b.rate), fmt_rate(s.rate), fmt_ratio(r)]
        if latency:
            row += [
                fmt_ms(b.p99_ms),
                fmt_ratio(ratio(s.p50_ms, b.p50_ms)),
                fmt_ratio(ratio(s.p99_ms, b.p99_ms)),
            ]
        target = comparison.targets.get(b.key)
        row.append(
            "" if target is None else f">= {target:g}: {met(not math.isnan(r) and r >= target)}"
        )
        lines.append("| " + " | ".join(row) + " |")
    return lines


@dataclass(slots=True)
class Section:
    """One benchmark's part of the report."""

    heading: str
    comparison: Comparison | None
    body: list[str]  #: markdown: the figures table and what it says
    how: list[str]  #: bullets: how the figures were measured
    invalid: str | None = None  #: why the figures do not stand, if they do not


def sections_body(sections: Sequence[Section]) -> list[str]:
    """The body of a report in sections: any invalid figures flagged first, each section
    (its ratios to the baselines, then its own lines), then how each was measured."""
    lines = []
    for section in sections:
        if section.invalid:
            lines += [f"**INVALID {section.heading.upper()} FIGURES: {section.invalid}**", ""]
    for section in sections:
        lines += [f"## {section.heading}", ""]
        if section.comparison is not None:
            s = section.comparison.subject
            lines += [
                f"onceonly's figure, {s.label}, as a ratio to each baseline of the same run:",
                "",
                *ratio_table(section.comparison),
                "",
            ]
            if s.has_latency:
                lines += [
                    f"Latency ratios are {s.key}'s p50 and p99 over the baseline's, each at its "
                    "own peak: above 1 is slower.",
                    "",
                ]
        lines += [*section.body, ""]
    lines += ["## How", ""]
    for section in sections:
        lines += [f"- {section.heading.lower()}:", *(f"  - {item}" for item in section.how)]
    return lines


def render(
    title: str,
    body: Sequence[str],
    about: Sequence[tuple[str, str]],
    command: str,
    chart_file: str | None = None,
) -> str:
    """The whole markdown report: ``title``, the command (from the repository root), ``body``,
    the chart if there is one, the machine."""
    lines = [f"# {title}", "", command, "", *body, ""]
    if chart_file is not None:
        lines += ["## Chart", "", f"![throughput and latency of every variant]({chart_file})", ""]
    return "\n".join([*lines, *machine_table(about)])


def chart(comparisons: Sequence[Comparison], path: Path, title: str) -> None:
    """A PNG: for each comparison, a bar per variant of its throughput, and for those
    with latencies, p50 and p99 bars next to it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels: list[tuple[Comparison, str]] = []
    for c in comparisons:
        panels.append((c, "rate"))
        if c.subject.has_latency:
            panels.append((c, "latency"))
    fig, axes = plt.subplots(1, max(len(panels), 1), figsize=(5.2 * max(len(panels), 1), 4.6))
    axes_list = list(axes.flat) if hasattr(axes, "flat") else [axes]
    for ax, (c, kind) in zip(axes_list, panels, strict=False):
        figures = [*c.baselines, c.subject]
        names = [f.label for f in figures]
        colours = ["#9aa5b1"] * len(c.baselines) + ["#d9480f"]
        positions = list(range(len(figures)))
        if kind == "rate":
            values = [0.0 if math.isnan(f.rate) else f.rate for f in figures]
            bars = ax.bar(positions, values, color=colours)
            ax.bar_label(bars, labels=[fmt_rate(f.rate) for f in figures], fontsize=8)
            ax.set_ylabel(c.unit)
            ax.set_title(f"throughput, {c.unit}", fontsize=10)
            positive = [v for v in values if v > 0]
            if positive and max(positive) / min(positive) > 30:
                ax.set_yscale("log")
        else:
            width = 0.38
            for name, side, colour in (("p50", -1, "#4c6ef5"), ("p99", 1, "#e8590c")):
                ms = [getattr(f, f"{name}_ms") for f in figures]
                at = [x + side * width / 2 for x in positions]
                bars = ax.bar(
                    at, [0.0 if math.isnan(v) else v for v in ms], width, label=name, color=colour
                )
                ax.bar_label(bars, labels=[fmt_ms(v) for v in ms], fontsize=7)
            ax.set_ylabel("ms")
            ax.set_title("latency at peak, ms", fontsize=10)
            ax.legend(fontsize=8)
        ax.set_xticks(positions)
        ax.set_xticklabels(names, rotation=20, ha="right", fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def machine_table(items: Sequence[tuple[str, str]]) -> list[str]:
    """The report's "Machine" section as a two-column table."""
    return ["## Machine", "", "| | |", "| --- | --- |", *(f"| {k} | {v} |" for k, v in items), ""]


def verdict_table(
    headers: Sequence[str], rows: Iterable[Sequence[str]], *, verdict: bool = True
) -> list[str]:
    """A table of figures in markdown: the first column (the figure) and, with ``verdict``,
    the last aligned left, the figures between right."""
    last = len(headers) - 1 if verdict else 0
    align = ["---" if i in (0, last) else "---:" for i in range(len(headers))]
    return [_row(headers), _row(align), *(_row(row) for row in rows)]


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def verdict_report(
    headers: Sequence[str], rows: Sequence[Sequence[str]], notes: Sequence[str]
) -> list[str]:
    """A table of figures (:func:`verdict_table`) and its notes as bullets."""
    return [*verdict_table(headers, rows), "", *(f"- {line}" for line in notes)]


def command_line(module: str) -> str:
    args = sys.argv[1:]
    return f"python -m {module}" + (" " + " ".join(args) if args else "")


def report_path(results_dir: Path, name: str, date: str) -> Path:
    """``<name>-<date>.md``, or ``<name>-<date>-2.md``, ``-3`` ... when the day has one
    already: a second run on the same day never overwrites a report that a note or the
    README cites."""
    md = results_dir / f"{name}-{date}.md"
    run = 1
    while md.exists():
        run += 1
        md = results_dir / f"{name}-{date}-{run}.md"
    return md


def write_report(
    out: Path,
    name: str,
    title: str,
    command: str,
    body: Sequence[str],
    about: Sequence[tuple[str, str]],
    *,
    charts: Sequence[Comparison] = (),
    smoke: bool = False,
) -> Path:
    """``<out>/<name>-<date>.md`` (``<name>-<date>-smoke.md`` for a smoke run, which never
    overwrites a full run's; see :func:`report_path`) and, with ``charts``, its ``.png``
    beside it: :func:`render`'s report, whose body is printed on the console too."""
    from bench._procs import console

    date = datetime.now(UTC).date().isoformat()
    out.mkdir(parents=True, exist_ok=True)
    path = report_path(out, name, f"{date}-smoke" if smoke else date)
    title = f"{title}, {date}{' (smoke size)' if smoke else ''}"
    png = path.with_suffix(".png") if charts else None
    if png is not None:
        chart(charts, png, title)
    console.print("\n".join(body), markup=False)
    path.write_text(render(title, body, about, command, png and png.name), encoding="utf-8")
    return path
