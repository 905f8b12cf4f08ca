"""A scale's claims judged by its plan, from its committed files alone (`observed`): what blocks each row (its runs'
own verdict, the thresholds on its arms at the plan's seeds, a missing seed, a plan changed after the data), each row
tested on its experiment's model or on its own spread (`contrasts`), each claim's rows combined and each paper's
claims controlled (`decisions`). Without a plan the rows are described, never decided.

    judge_scale(Path("results/cpu"), CPU, plan_for(CPU))   # every claim row's numbers, status and note rewritten
"""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path

from scaling_axes.harness.claims.blocks import blocked
from scaling_axes.harness.claims.contrasts import RowTest, fit_model, own_spread
from scaling_axes.harness.claims.decisions import Decision, Tested, combined, judged, paper_decisions
from scaling_axes.harness.claims.notes import DATA_NOTE, NOTE_PARTS
from scaling_axes.harness.claims.observed import Experiment, Observed, read_experiment
from scaling_axes.harness.claims.plan import AnalysisPlan, PlannedClaim
from scaling_axes.harness.results import COLUMNS, fmt
from scaling_axes.harness.scales import Scale
from scaling_axes.harness.stability import Thresholds
from scaling_axes.io import write_csv
from scaling_axes.significance import ALPHA, t_critical

NO_PLAN = "exploratory: no analysis plan decides anything at this scale (docs/results.md, 'The plan')"


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


def row_tests(rows: list[Observed], seeds: list[int], test: str) -> dict[str, RowTest | None]:
    """where -> each row's test at `seeds`: on the experiment's arm x seed model, one per measure (`test` "model":
    the contrast rows), else on its own spread."""
    out: dict[str, RowTest | None] = {}
    by_measure: dict[str, list[Observed]] = {}
    for row in rows:
        if test == "model" and row.contrast and all(set(seeds) <= set(row.arm_values.get(a, {})) for a in row.contrast):
            by_measure.setdefault(row.measure, []).append(row)
        else:
            out[row.where] = own_spread([row.margins[k] for k in seeds])
    for measure_rows in by_measure.values():
        values = {a: {k: r.arm_values[a][k] for k in seeds} for r in measure_rows for a in r.contrast}
        model = fit_model(values, [r.contrast for r in measure_rows], seeds)
        for r in measure_rows:  # the model's se; the row's own margins for an exact test beside it
            tested = model.test(r.contrast)
            out[r.where] = tested and dataclasses.replace(tested, margins=tuple(r.margins[k] for k in seeds))
    return out


def judge_claim(claim: PlannedClaim, ex: Experiment, plan: AnalysisPlan, t: Thresholds) -> ClaimJudged:
    """`claim` at its experiment's seeds: each row blocked or tested (on the model, the experiment's testable rows
    pooled), the rows combined as the plan says (`average`: their mean margin per seed, on its own spread)."""
    seeds = list(plan.experiments[claim.experiment].seeds)
    rows = [r for r in ex.claims if r.where in claim.rows]
    blocks = {r.where: blocked(r, ex, seeds, plan, t) for r in rows}
    if len(rows) < len(claim.rows) or any(status for status, _ in blocks.values()):
        return ClaimJudged(claim, rows, blocks, {}, None)
    testable = [r for r in ex.claims if not blocked(r, ex, seeds, plan, t)[0]]  # the model pools every such row
    tests = row_tests(testable, seeds, plan.experiments[claim.experiment].test)
    tolerance = claim.tolerance * t.tolerance_scale
    if any(tests.get(r.where) is None for r in rows):
        tested = None
    elif claim.combine == "average" and len(rows) > 1:
        mean = own_spread([statistics.fmean(r.margins[k] for r in rows) for k in seeds])
        tested = mean and judged(mean, claim, plan.alpha, tolerance, plan.rules)
    else:
        steps = [judged(tests[r.where], claim, plan.alpha, tolerance, plan.rules) for r in rows]
        tested = combined(steps, claim, plan.rules)
    return ClaimJudged(claim, rows, blocks, tests, tested)


NOMINAL = Thresholds()


def judge_plan(
    experiments: dict[str, Experiment], plan: AnalysisPlan, t: Thresholds = NOMINAL
) -> tuple[dict[str, ClaimJudged], dict[str, Decision]]:
    """Every in-family claim of `plan` judged at its seeds, and each paper's decisions over them (a claim whose
    experiment has no table yet enters its family untested)."""
    judged_claims = {
        c.id: judge_claim(c, experiments[c.experiment], plan, t)
        for c in plan.claims
        if c.in_family and c.experiment in experiments
    }
    decisions: dict[str, Decision] = {}
    for paper in sorted({c.paper for c in plan.claims}):
        tested = {c.id: judged_claims[c.id].tested if c.id in judged_claims else None for c in plan.of_paper(paper)}
        decisions |= paper_decisions(plan.of_paper(paper), tested, plan.alpha)
    return judged_claims, decisions


def claim_status(claim: PlannedClaim, here: ClaimJudged | None, decision: Decision | None) -> tuple[str, str]:
    """(status, why) of a whole claim: outside the family; not at this scale yet; held by what blocks a row; not
    tested; or its paper's decision."""
    if not claim.in_family:
        return ("unmatched" if claim.excluded.startswith("unmatched") else "out_of_reach"), claim.excluded
    if here is None:
        return "insufficient", "its experiment's table is not at this scale yet: it enters its family at p = 1"
    if blocked := [(where, status, why) for where, (status, why) in here.blocks.items() if status]:
        where, status, why = blocked[0]
        return status, f"{where}: {why}"
    if here.tested is None or decision is None:
        return "insufficient", "a row could not be tested: it enters its family at p = 1"
    return decision.verdict, ""


def verdicts(
    experiments: dict[str, Experiment], plan: AnalysisPlan | None, scale: Scale, t: Thresholds = NOMINAL
) -> dict[tuple[str, int], RowVerdict]:
    """(experiment, row index) -> `RowVerdict` of every claim row of the scale's `experiments`."""
    if plan is None or not scale.judges_claims:
        why = NO_PLAN if scale.judges_claims else f"{scale} scale proves the pipeline, not a claim"
        return {(ex.name, r.index): described(r, ex, why, t) for ex in experiments.values() for r in ex.claims}
    judged_claims, decisions = judge_plan(experiments, plan, t)
    return {
        (ex.name, row.index): row_verdict(row, ex, plan, judged_claims, decisions, t)
        for ex in experiments.values()
        for row in ex.claims
    }


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
        status = "unmatched" if claim.excluded.startswith("unmatched") else "out_of_reach"
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
        _claim_words(claim, judged_claim.tested, decision),
    )


def _claim_words(claim: PlannedClaim, tested: Tested, decision: Decision) -> str:
    """What decided the claim: its kind and tolerance, its combined bounds and both one-sided p, its control."""
    kind = claim.kind.replace("_", "-") + (f" within {claim.tolerance:g}" if claim.tolerance else "")
    steps = {
        "each": "every step (intersection-union; fails on one step reversed, Holm)",
        "average": "the average",
        "one": "one row",
    }
    return (
        f"claim {claim.id} ({claim.role}, {kind}, {steps[claim.combine]}): bounds [{tested.low:+.4g}, "
        f"{tested.high:+.4g}], p that it holds {tested.p_hold:.3g}, that it fails {tested.p_fail:.3g}; "
        f"{decision.control}: adjusted {decision.adjusted:.3g} against {ALPHA:g}"
    )


def read_scale(scale_dir: Path, plan: AnalysisPlan | None = None) -> dict[str, Experiment]:
    """Every table of `scale_dir` that has a per-seed file, read and checked (`observed.read_experiment`; against
    `plan`'s seeds and arms where it plans the experiment), all of them, and the plan's pilot files, before anything
    is judged or written."""
    planned = plan.experiments if plan else {}
    if plan is not None and plan.pilot_dir.resolve() != Path(scale_dir).resolve():
        read_scale(plan.pilot_dir)  # the pilot's files, whose intervals the report shows, checked as evidence too
    return {name: read_experiment(Path(scale_dir), name, planned.get(name)) for name in _with_seeds(scale_dir)}


def _with_seeds(scale_dir: Path) -> list[str]:
    return sorted(p.stem for p in Path(scale_dir).glob("*.csv") if (Path(scale_dir) / "seeds" / p.name).exists())


def judge_scale(scale_dir: Path, scale: Scale, plan: AnalysisPlan | None) -> int:
    """Every claim row of `scale_dir`'s tables (those with a per-seed file) rewritten with its verdict; returns
    how many rows were judged."""
    experiments = read_scale(scale_dir, plan if scale.judges_claims else None)
    found = verdicts(experiments, plan, scale)
    for ex in experiments.values():
        rows = list(ex.rows)
        for row in ex.claims:
            rows[row.index] = written(rows[row.index], found[(ex.name, row.index)])
        write_csv(Path(scale_dir) / f"{ex.name}.csv", COLUMNS, rows)
    return len(found)


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
