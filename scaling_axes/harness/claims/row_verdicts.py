"""What the judge writes of each claim row (`judge`): a claim judged at its seeds (`ClaimJudged`), each row's
verdict (its claim's decision, or why it has none: not planned, outside the family, blocked, untested), a row no plan
decides described by its mean margin and interval, and the row as the table stores it (`written`)."""

from __future__ import annotations

import dataclasses
import statistics

from scaling_axes.harness.claims.blocks import blocked
from scaling_axes.harness.claims.contrasts import RowTest, own_spread
from scaling_axes.harness.claims.decisions import Decision, Tested, judged
from scaling_axes.harness.claims.notes import DATA_NOTE, NOTE_PARTS
from scaling_axes.harness.claims.observed import Experiment, Observed
from scaling_axes.harness.claims.plan import AnalysisPlan, PlannedClaim
from scaling_axes.harness.claims.plan_records import excluded_status
from scaling_axes.harness.results import fmt
from scaling_axes.harness.stability import Thresholds
from scaling_axes.significance import ALPHA, t_critical


@dataclasses.dataclass(frozen=True)
class RowVerdict:
    """What the judge says of one claim row: its status, its own estimate and 95% interval (the two one-sided
    bounds at ALPHA), its seeds, its claim's p and adjusted p, what was measured and why it stands as it does."""

    status: str
    ours: float | None = None
    low: float | None = None
    high: float | None = None
    seeds: int | None = None
    p: float | None = None
    q: float | None = None
    measured: str = ""
    why: str = ""


@dataclasses.dataclass(frozen=True)
class ClaimJudged:
    """One planned claim at its seeds: its rows, what blocks each (empty status: nothing), each row's test and the
    claim's combined test (None: not tested, p = 1 in its family)."""

    claim: PlannedClaim
    rows: list[Observed]
    blocks: dict[str, tuple[str, str]]
    tests: dict[str, RowTest | None]
    tested: Tested | None


def described(row: Observed, ex: Experiment, why: str, t: Thresholds) -> RowVerdict:
    """A row no plan decides: what blocks it, else its mean margin and 95% interval on its own spread."""
    status, blocked_why = blocked(row, ex, list(row.margins), None, t)
    test = own_spread(list(row.margins.values()))
    numbers = _numbers(test) if test else {"ours": statistics.fmean(row.margins.values()) if row.margins else None}
    return RowVerdict(
        status or "insufficient",
        **numbers,
        seeds=len(row.margins) or None,
        measured=_measured(row, test),
        why=blocked_why or why,
    )


def _numbers(test: RowTest) -> dict[str, float]:
    half = t_critical(test.df, ALPHA) * test.se
    return {"ours": test.estimate, "low": test.estimate - half, "high": test.estimate + half}


def _measured(row: Observed, test: RowTest | None, seeds: list[int] | None = None) -> str:
    """What a row's test rests on: its margin, each seed's, its standard error, degrees of freedom and model."""
    if test is None:
        return ""
    seeds = list(row.margins) if seeds is None else seeds
    margins = ", ".join(f"{row.margins[k]:+.4g}" for k in seeds)
    return (
        f"margin {test.estimate:+.4g} {row.unit} (seeds {', '.join(map(str, seeds))}: {margins}), "
        f"standard error {test.se:.3g} on {test.df:g} degrees of freedom ({test.how})"
    )


def row_verdict(
    row: Observed,
    ex: Experiment,
    plan: AnalysisPlan,
    judged_claims: dict[str, ClaimJudged],
    decisions: dict[str, Decision],
    t: Thresholds,
) -> RowVerdict:
    """One row's verdict: its claim's, or why it has none (not planned, outside the family, blocked)."""
    claim = plan.claim_of(ex.name, row.where)
    if claim is None:
        return described(
            row, ex, "not in the plan: no verdict (a claim is decided only by a plan made before its runs)", t
        )
    if not claim.in_family:
        status = excluded_status(claim)
        why = "; ".join(filter(None, (f"outside the family: {claim.excluded}", row.held_why)))
        return dataclasses.replace(described(row, ex, "", t), status=status, why=why)
    judged_claim = judged_claims[claim.id]
    source = claim.same_measurement.get(row.where, row.where)
    decision = decisions[claim.id]
    if status_why := judged_claim.blocks.get(source):
        status, why = status_why
        if status:
            return dataclasses.replace(described(row, ex, "", t), status=status, why=why)
    if judged_claim.tested is None:
        worst = next(
            ((w, s, y) for w, (s, y) in judged_claim.blocks.items() if s), (source, "insufficient", "not tested")
        )
        return dataclasses.replace(
            described(row, ex, "", t),
            status="insufficient",
            why=f"its claim is not tested: {worst[0]} is {worst[1]} ({worst[2]}); it enters its family at p = 1",
        )
    test = judged_claim.tests[source]
    source_row = next(r for r in judged_claim.rows if r.where == source)
    mine = judged(test, claim, plan.alpha, claim.tolerance * t.tolerance_scale, plan.rules)
    same = f"one measurement with {source}, judged there; " if source != row.where else ""
    return RowVerdict(
        decision.verdict,
        mine.estimate,
        mine.low,
        mine.high,
        test.seeds,
        decision.p,
        decision.adjusted,
        same + _measured(source_row, test, list(plan.experiments[claim.experiment].seeds)),
        _claim_words(claim, judged_claim.tested, decision, plan.rules.each_steps),
    )


def _claim_words(claim: PlannedClaim, tested: Tested, decision: Decision, each_steps: str) -> str:
    """What decided the claim: its kind and tolerance, its combined bounds and both one-sided p, its control."""
    kind = claim.kind.replace("_", "-") + (f" within {claim.tolerance:g}" if claim.tolerance else "")
    steps = {
        "each": f"every step (intersection-union; fails on one step reversed, {each_steps.capitalize()})",
        "average": "the average",
        "one": "one row",
    }
    return (
        f"claim {claim.id} ({claim.role}, {kind}, {steps[claim.combine]}): bounds [{tested.low:+.4g}, "
        f"{tested.high:+.4g}], p that it holds {tested.p_hold:.3g}, that it fails {tested.p_fail:.3g}; "
        f"{decision.control}: adjusted {decision.adjusted:.3g} against {ALPHA:g}"
    )


def written(row: dict[str, str], verdict: RowVerdict) -> dict[str, str]:
    """`row` as the verdict writes it: its numbers, status and note (its statement | what was measured | why),
    the data it was judged on kept at the end."""
    statement = row["note"].partition(DATA_NOTE)[0].partition(NOTE_PARTS)[0]
    data = row["note"].partition(DATA_NOTE)[2]
    note = NOTE_PARTS.join(part for part in (statement, verdict.measured, verdict.why) if part)
    numbers = {
        "ours": verdict.ours,
        "low": verdict.low,
        "high": verdict.high,
        "seeds": verdict.seeds,
        "p": verdict.p,
        "q": verdict.q,
    }
    return {
        **row,
        **{k: fmt(v) for k, v in numbers.items()},
        "status": verdict.status,
        "note": note + (DATA_NOTE + data if data else ""),
    }
