"""The one long results format (`Row`), the papers' published numbers, and the figures beside a table (REPORT.md,
which gathers the tables, is `experiment.report`'s).

Every experiment writes rows ``experiment, table, row, metric, paper, ours, low, high, seeds, p, q, unit, scale,
run, status, note`` to ``results/<scale>/<experiment>.csv``. Status: ``match`` (ours within the stated tolerance of the
paper's), ``differs``, ``not_comparable`` (not the paper's measure: a time on another machine, a loss learned on an
embedded stand-in), ``not_run`` (the run has not finished), ``analytic`` (ours is a formula or a count, not a
training result), ``measured`` (a training result the paper gives no number for), ``cited`` (a paper's number for a
model this suite does not build, such as the Pythia rows of a comparison table, shown for reference only), and for a
paper's claims (metric ``claim``, see `harness.claims`; ``ours`` the mean margin, ``low``/``high`` its 95% interval,
``seeds`` how many, ``p`` its two-sided p, ``q`` the same adjusted for the false-discovery rate over every claim
the scale declares, `experiment.family`) ``claim_holds``, ``claim_fails``, ``never_reached`` (the loss it is
measured at was not reached within the budget: ``ours`` the final-loss gap, no interval), ``fragile`` (decided one
way where an arm's claim seeds fell back below its sweep's choice and otherwise at the choice, each after the
family's control), ``unmatched`` (its arms differ in what the claim holds equal: parameters, residual size),
``insufficient``,
``out_of_reach`` (not trained at this scale: its effect is below what the scale can detect), ``not_learning`` (a run
it compares did not learn) or
``unstable`` (a run it compares spiked, or ended as an outlier among its seeds: `harness.stability`); a row whose
runs passed over their data more often than allowed (``--allow-repeats``) is ``memorisation``, and one whose runs on
disk were trained with other settings than the code now declares is ``stale``, whatever it was judged. Exact
checks (metric ``check``, `claims.outcomes.exact_check`) are ``check_passes`` or ``check_fails``. Each claim's
margin per seed and each run's final metrics per seed are in ``results/<scale>/seeds/<experiment>.csv``.
"""

from __future__ import annotations

import csv
import dataclasses
import importlib.resources
import io
import math
from pathlib import Path
from typing import Any

from scaling_axes.harness.scales import Scale
from scaling_axes.io import atomic_write

COLUMNS = (
    "experiment",
    "table",
    "row",
    "metric",
    "paper",
    "ours",
    "low",
    "high",
    "seeds",
    "p",
    "q",
    "unit",
    "scale",
    "run",
    "status",
    "note",
)
VERDICTS = (
    "claim_holds",
    "claim_fails",
    "never_reached",
    "plan_changed",
    "unmatched",
    "insufficient",
    "out_of_reach",
    "not_learning",
    "unstable",
    "control_failed",
    "not_planned",
    "out_of_budget",
)  # a claim's, in this order (a new one last: the forest plot's colours go by position)
CHECKS = ("check_passes", "check_fails")  # an exact property's (`claims.outcomes.exact_check`): not a statistical claim
STATUSES = (
    "match",
    "differs",
    "not_comparable",
    "not_run",
    "analytic",
    "measured",
    "cited",
    *VERDICTS,
    *CHECKS,
    "memorisation",
    "stale",
)
# Where outputs go, one rule: `runs/` and `results/` under the output root, the working directory unless a command
# is given --out-dir. The papers' numbers are package data (`scaling_axes.published`, the checkout's
# results/published/), so an installed wheel reads them wherever it runs.
RESULTS_DIR = Path("results")


@dataclasses.dataclass(frozen=True)
class Evidence:
    """What a claim row was judged from, committed in its per-seed file so that the scale's plan judges it from the
    files alone: its margin at each seed (positive: the paper's direction) and, where the margin is a contrast of
    its arms' values of one `measure` (margin = sum of coefficient x value, per seed), that contrast and the arm
    values, which the experiment's arm x seed model pools (`claims.contrasts`)."""

    statement: str
    margins: tuple[float, ...]
    seeds: tuple[int, ...]  # the seed of each margin
    contrast: dict[str, float] = dataclasses.field(default_factory=dict)  # arm -> coefficient (empty: no contrast)
    measure: str = ""  # what the arm values are (val_loss, train_loss, a downstream metric); never two data sets
    arm_values: dict[str, dict[int, float]] = dataclasses.field(default_factory=dict)  # arm -> seed -> value
    fails_because: str | None = None  # a part of the claim the runs contradict whatever the margin
    unmatched: str | None = None  # how the arms are not matched on what the claim is stated at (parameters, residual)
    before_training: bool = False  # measured on the models before they train (at a growth): what training does to
    # them later, a spike included, cannot change it


@dataclasses.dataclass(frozen=True, kw_only=True)
class Row:
    """One result: `ours` beside the `paper`'s value of `metric` in `table`'s `row`, built by keyword."""

    table: str
    row: str
    metric: str
    paper: float | None = None
    ours: float | None = None
    low: float | None = None  # a claim's 95% interval of its mean margin
    high: float | None = None
    seeds: int | None = None  # the seeds a claim's margin was measured at
    p: float | None = None  # a claim's one-sided p in the direction decided (`claims.decisions`)
    q: float | None = None  # the same adjusted by its paper's control (Holm, or Benjamini-Yekutieli's q)
    unit: str = ""
    run: str = ""
    status: str = "analytic"
    note: str = ""
    evidence: Evidence | None = dataclasses.field(default=None, repr=False)  # a claim's: what it was judged from

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


def fmt(value: float | None) -> str:
    """A number as a results CSV writes it: an integer plainly, else six significant digits; None empty."""
    if value is None:
        return ""
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.6g}"


def csv_row(experiment: str, scale: Scale, r: Row) -> dict[str, str]:
    """`r` as its CSV row, by column."""
    values = (
        experiment,
        r.table,
        r.row,
        r.metric,
        fmt(r.paper),
        fmt(r.ours),
        fmt(r.low),
        fmt(r.high),
        fmt(r.seeds),
        fmt(r.p),
        fmt(r.q),
        r.unit,
        scale.name,
        r.run,
        r.status,
        r.note,
    )
    return dict(zip(COLUMNS, values, strict=True))


def write_rows(
    experiment: str, scale: Scale, rows: list[Row], results_dir: Path = RESULTS_DIR, table_dir: Path | None = None
) -> Path:
    """Write `results/<scale>/<experiment>.csv` atomically (into `table_dir` where given: a scale's pilot)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(csv_row(experiment, scale, r) for r in rows)
    path = Path(table_dir or Path(results_dir) / scale.name) / f"{experiment}.csv"
    atomic_write(path, buffer.getvalue())
    return path


def pyplot() -> Any:
    """matplotlib.pyplot on the file-only Agg backend (no display on build machines and cluster nodes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: Path) -> None:
    """Lay out, legend every axis that has labelled lines, and write the PNG atomically. An axis with nothing to
    show yet (no run finished) is drawn linear: matplotlib cannot lay out a log axis of no data."""
    for ax in fig.axes:
        if ax.get_legend_handles_labels()[1]:
            _legend(ax)
        if not any(len(line.get_xdata()) for line in ax.get_lines()):
            ax.set(xscale="linear", yscale="linear")
        label_log_ticks(ax)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120, metadata={"Software": None})
    pyplot().close(fig)
    atomic_write(path, buffer.getvalue())


def _legend(ax: Any) -> None:
    """The legend at its best place inside the axes, else, wider than them (long run names), below them: a legend
    that spills over its axes covers their tick labels and its neighbour's."""
    from matplotlib.transforms import offset_copy

    legend = ax.legend(fontsize=7)
    renderer = ax.figure.canvas.get_renderer()
    if legend.get_window_extent(renderer).width <= ax.get_window_extent(renderer).width:
        return
    legend.remove()
    below = (ax.get_window_extent(renderer).y0 - ax.get_tightbbox(renderer).y0) * 72 / ax.figure.dpi  # points
    under_labels = offset_copy(ax.transAxes, fig=ax.figure, y=-below, units="points")  # fixed whatever the layout
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, 0), bbox_transform=under_labels, frameon=False)


LOG_TICKS = 4  # a log axis labels at least this many ticks (matplotlib labels only whole decades by default)


def label_log_ticks(ax: Any) -> None:
    """Label each log axis of `ax` at LOG_TICKS or more round values (1, 2, 5 per decade, else 1, 2, 3, 5, 7, else
    round values evenly spaced). Never every digit: 7, 8 and 9 crowd the top of a decade and their labels overlap."""
    for axis, scale, limits in ((ax.xaxis, ax.get_xscale(), ax.get_xlim()), (ax.yaxis, ax.get_yscale(), ax.get_ylim())):
        low, high = sorted(limits)
        if scale != "log" or low <= 0:
            continue
        decades = range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
        for mantissas in ((1,), (1, 2, 5), (1, 2, 3, 5, 7)):
            ticks = [m * 10.0**e for e in decades for m in mantissas if low <= m * 10.0**e <= high]
            if len(ticks) >= LOG_TICKS:
                break
        else:  # less than a decade wide: round values evenly spaced
            from matplotlib.ticker import MaxNLocator

            ticks = [t for t in MaxNLocator(LOG_TICKS + 1).tick_values(low, high) if low <= t <= high]
        axis.set_ticks(ticks, [f"{t:g}" for t in ticks])
        axis.set_minor_locator(pyplot().NullLocator())  # a tick mark with no label reads as a missing value


def published_file(name: str) -> Path:
    """A file of the papers' published numbers (`results/published/<name>` in the checkout)."""
    return Path(str(importlib.resources.files("scaling_axes.published") / name))


def published(paper: str) -> dict[tuple[str, str, str], float]:
    """(table, row, metric) -> value from `results/published/<paper>.csv`."""
    with open(published_file(f"{paper}.csv"), newline="") as f:
        return {(r["table"], r["row"], r["metric"]): float(r["value"]) for r in csv.DictReader(f)}
