"""REPORT.md's "Every arm's final loss": each planned experiment's arms at the plan's seeds, their final test and
validation losses (mean and seed SD), from the per-seed files. A contrast judges two arms; the arms beside it say
what else the experiment trained, so a claim that holds against one arm is read next to the others (the RMT against
the muP Transformer, and the standard Transformer of the same shape a row above)."""

from __future__ import annotations

import statistics

from scaling_axes.harness.claims.observed import Experiment
from scaling_axes.harness.claims.plan import AnalysisPlan


def arm_lines(experiments: dict[str, Experiment], plan: AnalysisPlan) -> list[str]:
    """The section: one table per planned experiment with a per-seed file, one row an arm, best test loss first."""
    out = []
    for name, planned in sorted(plan.experiments.items()):
        runs = experiments[name].runs if name in experiments else {}
        rows = []
        for arm, rate in planned.arms.items():
            seeds = [runs.get(arm, {}).get(k, {}) for k in planned.seeds]
            test, val = ([s[m] for s in seeds if m in s] for m in ("test_loss", "val_loss"))
            if test:
                rows.append((statistics.fmean(test), arm, rate, len(test), _spread(test), _spread(val)))
        if rows:
            out += [f"### {name}", "", "| arm | rate | seeds | test loss | validation loss |", "|---|---|---|---|---|"]
            out += [f"| {arm} | {_rate(rate)} | {n} | {test} | {val} |" for _, arm, rate, n, test, val in sorted(rows)]
            out.append("")
    if not out:
        return []
    head = [
        "## Every arm's final loss",
        "",
        "Each planned arm at the plan's seeds: its final loss on the whole test and validation splits, mean +- seed "
        "SD (nats/token), lowest test loss first. A claim's contrast is two of these rows; the others are what else "
        "its experiment trained.",
        "",
    ]
    return head + out


def _spread(values: list[float]) -> str:
    if not values:
        return "-"
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):.4f} +- {sd:.4f}"


def _rate(lr: float | None) -> str:
    return "declared" if lr is None else f"{lr:g}"
