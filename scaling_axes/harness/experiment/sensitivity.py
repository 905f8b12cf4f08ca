"""Which verdicts hang on a threshold: every fixed threshold a claim's arms pass through before its test, with where
its value came from, moved SHIFT down and up, and separately every claim's tolerance; each time every claim in the
family is judged again from the committed files (its arms' blocks and its tests computed again, the family's
control with them), and every verdict that changes is listed, to and from `unstable` and `not_learning` included.
It reports; it changes no verdict. Alpha is never moved."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from scaling_axes.harness.claims.judge import claim_status, judge_plan, read_scale
from scaling_axes.harness.claims.plan import AnalysisPlan
from scaling_axes.harness.stability import (
    LEARNED_NATS,
    LEARNED_POINTS,
    OUTLIER_NATS,
    OUTLIER_Z,
    SPIKE_NATS,
    STABILITY_FILTER,
    STABILITY_OFF,
    VAL_RISE_NATS,
    Thresholds,
)

SHIFT = 0.25  # each threshold moved this fraction down and up


@dataclasses.dataclass(frozen=True)
class Threshold:
    """A fixed threshold a verdict passes through: its field of `Thresholds`, its value, and where it came from."""

    name: str
    field: str
    value: float
    source: str


THRESHOLDS = (
    Threshold(
        "SPIKE_NATS",
        "spike_nats",
        SPIKE_NATS,
        "per-step curves (issue 46): stable runs' hardest batch rose up to 0.75 nats above the moving average, runs "
        "past the edge of stability from 0.90; set in that gap, on the runs it judges (docs/methodology.md)",
    ),
    Threshold(
        "VAL_RISE_NATS",
        "val_rise_nats",
        VAL_RISE_NATS,
        "a few times the 0.02-0.03 nats a validation loss moves between evaluations of a stable run at cpu scale",
    ),
    Threshold(
        "OUTLIER_NATS",
        "outlier_nats",
        OUTLIER_NATS,
        "ten times the assumed one-run noise floor (0.02 nats), so that only a seed that trained differently, not one "
        "drawn wide, leaves the noise",
    ),
    Threshold("OUTLIER_Z", "outlier_z", OUTLIER_Z, "the usual robust-outlier cut (Iglewicz and Hoaglin)"),
    Threshold(
        "LEARNED_NATS",
        "learned_nats",
        LEARNED_NATS,
        "a bigram statistic gains about a nat below the unigram floor on these corpora, sampling noise a few "
        "hundredths: half of that gain",
    ),
    Threshold(
        "LEARNED_POINTS",
        "learned_points",
        LEARNED_POINTS,
        "a classifier's top-1 this far above chance: well clear of guessing on ten or a thousand classes",
    ),
    Threshold("tolerance", "tolerance_scale", 1.0, "each claim's own, in the plan (its source there), as a factor"),
)


def moved(plan: AnalysisPlan) -> list[tuple[str, Thresholds]]:
    """(what was moved, the thresholds with it moved) for each threshold, SHIFT down then up; and the stability
    policy the other way from the plan's rules: off where it vetoes (every seed kept, spikes and outliers included:
    what its policy set aside), on where it keeps every seed (the stability-filtered result)."""
    policy = ("the stability policy off (unstable seeds kept)", STABILITY_OFF)
    if not plan.rules.stability_veto:
        policy = ("the stability filter on (unstable arms' claims set aside)", STABILITY_FILTER)
    return [policy] + [
        (f"{t.name} {'-' if sign < 0 else '+'}{SHIFT:.0%} ({t.value * (1 + sign * SHIFT):.3g})", replaced)
        for t in THRESHOLDS
        for sign in (-1, 1)
        for replaced in [dataclasses.replace(Thresholds(), **{t.field: t.value * (1 + sign * SHIFT)})]
    ]


def changed_verdicts(scale_dir: Path, plan: AnalysisPlan, nominal: Mapping[str, str]) -> list[str]:
    """Each verdict of the family (`nominal`: claim id -> its status) that a moved threshold changes, in words."""
    experiments, of = read_scale(scale_dir, plan), {c.id: c for c in plan.claims}
    out = []
    for what, thresholds in moved(plan):
        judged_claims, decisions = judge_plan(experiments, plan, thresholds)
        for claim_id, before in nominal.items():
            after = claim_status(of[claim_id], judged_claims.get(claim_id), decisions.get(claim_id))[0]
            if after != before:
                out.append(f"{claim_id}: {before} -> {after} with {what}")
    return out
