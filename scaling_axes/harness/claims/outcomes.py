"""The rows of what a test does not decide: an exact property checked at each seed, a loss never reached, a claim
out of this scale's reach."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

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
