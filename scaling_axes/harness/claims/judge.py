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
from scaling_axes.harness.claims.decisions import Decision, combined, judged, paper_decisions
from scaling_axes.harness.claims.observed import Experiment, Observed, read_experiment
from scaling_axes.harness.claims.plan import CONTROLS, AnalysisPlan, PlannedClaim
from scaling_axes.harness.claims.plan_records import excluded_status
from scaling_axes.harness.claims.row_verdicts import ClaimJudged, RowVerdict, described, row_verdict, written
from scaling_axes.harness.claims.test_split import on_test_split
from scaling_axes.harness.results import COLUMNS
from scaling_axes.harness.scales import Scale
from scaling_axes.harness.stability import Thresholds
from scaling_axes.io import write_csv

CONTROL_FAILED = "control_failed"  # a claim whose experiment's positive control did not hold
NO_PLAN = "exploratory: no analysis plan decides anything at this scale (docs/results.md, 'The plan')"


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
    experiment has no table yet enters its family untested). The positive controls are decided first, each alone;
    where one does not hold, its experiment's claims are `control_failed` and enter their families at p = 1."""
    judged_claims = {
        c.id: judge_claim(c, experiments[c.experiment], plan, t)
        for c in plan.claims
        if c.in_family and c.experiment in experiments
    }
    controls = plan.of_paper(CONTROLS)
    tested = {c.id: judged_claims[c.id].tested if c.id in judged_claims else None for c in controls}
    decisions: dict[str, Decision] = paper_decisions(controls, tested, plan.alpha)
    for control in (c for c in controls if c.in_family):
        status, why = claim_status(control, judged_claims.get(control.id), decisions.get(control.id))
        if status != "claim_holds":
            judged_claims |= gated(control, f"{status}{f' ({why})' if why else ''}", judged_claims, plan)
    for paper in sorted({c.paper for c in plan.claims} - {CONTROLS}):
        tested = {c.id: judged_claims[c.id].tested if c.id in judged_claims else None for c in plan.of_paper(paper)}
        decisions |= paper_decisions(plan.of_paper(paper), tested, plan.alpha)
    return judged_claims, decisions


def gated(control: PlannedClaim, outcome: str, judged_claims: dict, plan: AnalysisPlan) -> dict[str, ClaimJudged]:
    """The claims of `control`'s experiment, judged, each row held `control_failed`: untested, p = 1 in its family."""
    why = f"decides nothing: its positive control {control.id} did not hold: {outcome}"
    return {
        c.id: dataclasses.replace(judged_claims[c.id], blocks=dict.fromkeys(c.rows, (CONTROL_FAILED, why)), tested=None)
        for c in plan.claims
        if c.experiment == control.experiment and c.role != "control" and c.id in judged_claims
    }


def claim_status(claim: PlannedClaim, here: ClaimJudged | None, decision: Decision | None) -> tuple[str, str]:
    """(status, why) of a whole claim: outside the family; not at this scale yet; held by what blocks a row; not
    tested; or its paper's decision."""
    if not claim.in_family:
        return excluded_status(claim), claim.excluded
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


def read_scale(scale_dir: Path, plan: AnalysisPlan | None = None) -> dict[str, Experiment]:
    """Every table of `scale_dir` that has a per-seed file, read and checked (`observed.read_experiment`; against
    `plan`'s seeds and arms where it plans the experiment), all of them, and the plan's pilot files, before anything
    is judged or written; where the plan judges on the test split, each validation-loss contrast on the test
    split's losses (`test_split.on_test_split`)."""
    planned = plan.experiments if plan else {}
    if plan is not None and plan.pilot_dir.resolve() != Path(scale_dir).resolve():
        read_scale(plan.pilot_dir)  # the pilot's files, whose intervals the report shows, checked as evidence too
    found = {name: read_experiment(Path(scale_dir), name, planned.get(name)) for name in _with_seeds(scale_dir)}
    if plan is not None and plan.rules.verdict_split == "test":
        return {name: on_test_split(ex) for name, ex in found.items()}
    return found


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
