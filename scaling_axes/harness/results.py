"""The one long results format, the papers' published numbers, and REPORT.md.

Every experiment writes rows ``experiment, table, row, metric, paper, ours, unit, scale, run, status, note`` to
``results/<scale>/<experiment>.csv``. Status: ``match`` (ours within the stated tolerance of the paper's),
``differs``, ``not_run`` (the run has not finished), ``analytic`` (ours is a formula or a count, not a training
result), ``measured`` (a training result the paper gives no number for), ``cited`` (a paper's number for a model
this suite does not build, such as the Pythia rows of a comparison table, shown for reference only), and for a
paper's claims (metric ``claim``, see `harness.claims`) ``claim_holds``, ``claim_fails`` or ``insufficient``; a row
whose runs passed over their data more often than allowed (``--allow-repeats``) is ``memorisation``, and one whose runs
on disk were trained with other settings than the code now declares is ``stale``, whatever it was judged.
"""

from __future__ import annotations

import csv
import dataclasses
import importlib.resources
import io
from pathlib import Path
from typing import Any

from scaling_axes.harness.scales import SCALES, Scale
from scaling_axes.io import atomic_write

COLUMNS = ("experiment", "table", "row", "metric", "paper", "ours", "unit", "scale", "run", "status", "note")
STATUSES = ("match", "differs", "not_run", "analytic", "measured", "cited", "claim_holds", "claim_fails",
            "insufficient", "memorisation", "stale")  # fmt: skip
# Where outputs go, one rule: `runs/` and `results/` under the output root, the working directory unless a command
# is given --out-dir. The papers' numbers are package data (`scaling_axes.published`, the checkout's
# results/published/), so an installed wheel reads them wherever it runs.
RESULTS_DIR = Path("results")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Row:
    """One result: `ours` beside the `paper`'s value of `metric` in `table`'s `row`, built by keyword."""

    table: str
    row: str
    metric: str
    paper: float | None = None
    ours: float | None = None
    unit: str = ""
    run: str = ""
    status: str = "analytic"
    note: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status={self.status!r}; allowed: {', '.join(STATUSES)}")


def compare(paper: float | None, ours: float | None, rel_tol: float) -> str:
    """Status of a trained number against the paper's."""
    if ours is None:
        return "not_run"
    if paper is None:
        return "measured"
    return "match" if abs(ours - paper) <= rel_tol * abs(paper) else "differs"


def _fmt(value: float | None) -> str:
    if value is None:
        return ""
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.6g}"


def write_rows(experiment: str, scale: Scale, rows: list[Row], results_dir: Path = RESULTS_DIR) -> Path:
    """Write `results/<scale>/<experiment>.csv` atomically."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS)
    for r in rows:
        values = (
            experiment,
            r.table,
            r.row,
            r.metric,
            _fmt(r.paper),
            _fmt(r.ours),
            r.unit,
            scale.name,
            r.run,
            r.status,
            r.note,
        )
        writer.writerow(values)
    path = Path(results_dir) / scale.name / f"{experiment}.csv"
    atomic_write(path, buffer.getvalue())
    return path


def pyplot() -> Any:
    """matplotlib.pyplot on the file-only Agg backend (no display on build machines and cluster nodes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: Path) -> None:
    """Lay out, legend every axis that has labelled lines, and write the PNG atomically."""
    for ax in fig.axes:
        if ax.get_legend_handles_labels()[1]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120)
    pyplot().close(fig)
    atomic_write(path, buffer.getvalue())


def line_figure(path: Path, series: dict[str, list[tuple[float, float]]], *, markers: bool = True,
                **axes: Any) -> None:  # fmt: skip
    """One line per series (label -> points, plotted in order), axis settings as `Axes.set` keywords."""
    fig, ax = pyplot().subplots(figsize=(6.5, 4.2))
    for label, points in series.items():
        if points:
            ax.plot(*zip(*points, strict=True), "-o" if markers else "-", label=label, markersize=4, linewidth=1.2)
    ax.set(**axes)
    save_figure(fig, path)


def published_file(name: str) -> Path:
    """A file of the papers' published numbers (`results/published/<name>` in the checkout)."""
    return Path(str(importlib.resources.files("scaling_axes.published") / name))


def published(paper: str) -> dict[tuple[str, str, str], float]:
    """(table, row, metric) -> value from `results/published/<paper>.csv`."""
    with open(published_file(f"{paper}.csv"), newline="") as f:
        return {(r["table"], r["row"], r["metric"]): float(r["value"]) for r in csv.DictReader(f)}


def write_report(results_dir: Path = RESULTS_DIR, scale: Scale | None = None, header: tuple[str, ...] = ()) -> Path:
    """Regenerate REPORT.md: per experiment, the table of the largest scale that has results; with `scale`, that
    scale's alone into `results/<scale>/REPORT.md`, opening with `header` (the machine and commit) and the scale's
    scope."""
    results_dir = Path(results_dir)
    latest: dict[str, Path] = {}
    for each in [scale] if scale else SCALES.values():  # later scales overwrite earlier ones
        for path in sorted((results_dir / each.name).glob("*.csv")):
            latest[path.stem] = path
    tables = {path.stem: _read(path) for path in latest.values()}
    lines = [
        f"# Results{f' at {scale} scale' if scale else ''}",
        "",
        *header,
        *([scale.scope, ""] if scale and scale.scope else []),
        "Regenerated by `python -m scaling_axes report` (and by every experiment's `--report`). Each section shows the",
        "largest scale that has run. **smoke** results come from tiny models on the embedded data: they prove the",
        "pipeline and are never a reproduction. Paper numbers and their sources: `results/published/`.",
        "",
        *_claims_table(tables),
    ]
    for name, path in sorted(latest.items()):
        rows = tables[name]
        shown = rows[0]["scale"] if rows else path.parent.name
        lines += [f"## {name} ({shown} scale)", ""]
        if (path.with_suffix(".png")).exists():
            lines += [f"![{name}]({path.stem if scale else f'{path.parent.name}/{path.stem}'}.png)", ""]
        lines += [
            "| table | row | metric | paper | ours | unit | status | note |",
            "|---|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['table']} | {r['row']} | {r['metric']} | {r['paper']} | {r['ours']} | {r['unit']} | {r['status']} "
            f"| {r['note']} |"
            for r in rows
        ]
        lines.append("")
    report = results_dir / (f"{scale}/REPORT.md" if scale else "REPORT.md")
    atomic_write(report, "\n".join(lines))
    return report


def _read(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _claims_table(tables: dict[str, list[dict[str, str]]]) -> list[str]:
    """Every paper claim, its statement, the scale it was judged at and its status: the report's first table."""
    claims = [(name, r) for name, rows in sorted(tables.items()) for r in rows if r["metric"] == "claim"]
    if not claims:
        return []
    lines = [
        "## Claims",
        "",
        "| experiment: row | claim | scale | status | margin | how judged |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in claims:
        statement, _, how = r["note"].partition(" | ")
        cells = (f"{name}: {r['row']}", statement, r["scale"], r["status"], f"{r['ours']} {r['unit']}", how)
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]
