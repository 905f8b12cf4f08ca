"""The rows of what a test does not decide: an exact property checked at each seed, a loss never reached, a claim
out of this scale's reach, a diagnosis's final losses."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from scaling_axes.harness.claims.margins import seeds_of
from scaling_axes.harness.claims.notes import NOTE_PARTS
from scaling_axes.harness.results import Row


def exact_check(
    table: str,
    row: str,
    statement: str,
    deviations: Mapping[int, float],
    tolerance: float,
    unit: str,
    runs: Sequence[str] = (),
) -> Row:
    """An exact property (growth preserves the function), checked at each seed (seed -> its deviation): it passes
    where every seed's |deviation| is within `tolerance`. Not a claim a test decides: no margin, interval or p, and
    not counted among the claims (metric `check`; REPORT.md lists the checks apart)."""
    if not deviations:
        return Row(
            table=table, row=row, metric="check", unit=unit, run=",".join(runs), status="not_run", note=statement
        )
    worst = max(abs(d) for d in deviations.values())
    return Row(
        table=table,
        row=row,
        metric="check",
        ours=worst,
        seeds=len(deviations),
        unit=unit,
        run=",".join(runs),
        status="check_passes" if worst <= tolerance else "check_fails",
        note=f"{statement} | largest |deviation| {worst:.3g} {unit} over {len(deviations)} "
        f"seed{'s' * (len(deviations) != 1)} (tolerance {tolerance:g})",
    )


def never_reached(table: str, row: str, statement: str, gaps: Mapping[int, float], runs: Sequence[str]) -> Row:
    """A claim measured where a run reaches a loss, at seeds where it never did within its budget (seed -> the gap:
    the loss minus the run's lowest, negative): an outcome of its own, its margin the mean gap, without interval or
    p (a resource saved at a crossing that did not happen is not a number)."""
    n, gap = len(gaps), statistics.fmean(gaps.values())
    return Row(
        table=table,
        row=row,
        metric="claim",
        ours=gap,
        seeds=n,
        unit="nats/token",
        run=",".join(runs),
        status="never_reached",
        note=f"{statement} | never reached within the budget at seed"
        f"{'s' * (n != 1)} {', '.join(map(str, gaps))}: mean gap {gap:+.4g} nats/token",
    )


def out_of_reach(table: str, row: str, statement: str, unit: str, why: str, runs: Sequence[str] = ()) -> Row:
    """A claim not judged (nor trained for) at this scale, and why."""
    return Row(
        table=table,
        row=row,
        metric="claim",
        unit=unit,
        run=",".join(runs),
        status="out_of_reach",
        note=NOTE_PARTS.join((statement, "", why)),
    )


def final_losses(
    table: str, runs: Sequence[Any], results: dict[str, dict], describe: Callable[[Any], str]
) -> list[Row]:
    """Each run's final validation and test loss (read on the whole split), the mean over its seeds, each seed in the
    note after `describe(run)`: a diagnosis's measures, no claim."""
    rows = []
    for run in runs:
        for metric in ("val_loss", "test_loss"):
            values = {k: each.get(metric) for k, each in seeds_of(results.get(run.name)).items()}
            values = {k: v for k, v in values.items() if v is not None}
            rows.append(
                Row(
                    table=table,
                    row=run.name,
                    metric=metric,
                    ours=statistics.fmean(values.values()) if values else None,
                    seeds=len(values) or None,
                    unit="nats/token",
                    run=run.name,
                    status="measured" if values else "not_run",
                    note=describe(run)
                    + "seeds "
                    + ", ".join(f"{k}: {v:.4f}" for k, v in sorted(values.items()))
                    + "; the whole split",
                )
            )
    return rows
