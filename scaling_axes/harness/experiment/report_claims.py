"""A scale's claims as REPORT.md shows them: one `ClaimLine` per claim of its plan (the paper's claim, not a row),
judged from the committed files (`claims.judge`), with its pilot beside it and the power the plan predicted; a
scale without a plan shows its claim rows as they are, decided by nothing."""

from __future__ import annotations

import collections
import csv
import dataclasses
from pathlib import Path

from scaling_axes.harness.claims.bootstrap import Bootstrapped, block_bootstrap
from scaling_axes.harness.claims.contrasts import own_spread
from scaling_axes.harness.claims.decisions import Tested, combined, judged
from scaling_axes.harness.claims.judge import NOMINAL, claim_status, judge_plan, read_scale
from scaling_axes.harness.claims.observed import Experiment, Observed
from scaling_axes.harness.claims.plan import AnalysisPlan, PlannedClaim
from scaling_axes.harness.claims.plan_records import EXCLUSIONS
from scaling_axes.harness.claims.power import read_pilot
from scaling_axes.harness.claims.row_verdicts import ClaimJudged
from scaling_axes.harness.claims.sizing import predicted_power
from scaling_axes.harness.claims.test_split import TEST
from scaling_axes.harness.stability import STABILITY_FILTER, STABILITY_OFF, Thresholds
from scaling_axes.significance import sign_flip_p, t_one_sided_p

Tables = dict[str, list[dict[str, str]]]  # experiment -> its CSV's rows


def read_tables(scale_dir: Path) -> Tables:
    """Each results CSV of `scale_dir`, read once, by experiment name."""
    tables = {}
    for path in sorted(Path(scale_dir).glob("*.csv")):
        with open(path, newline="") as f:
            tables[path.stem] = list(csv.DictReader(f))
    return tables


@dataclasses.dataclass(frozen=True)
class ClaimLine:
    """One claim as the report shows it: its verdict (or what kept it from one), its test (the weakest step of an
    `each`), its seeds, both one-sided p and the adjusted one with its control, the rows that state it, each seed's
    margin of its weakest step, the pilot's test of the same rows, and the power the plan predicted."""

    claim: PlannedClaim
    status: str
    why: str
    unit: str
    tested: Tested | None
    seeds: int
    adjusted: float | None
    control: str
    level: float
    rows: tuple[str, ...]
    margins: tuple[float, ...]
    pilot: Tested | None
    pilot_seeds: int
    power: float | None
    power_own_rows: float | None = None  # the same on each row's own pilot spread
    set_aside: Tested | None = None  # a blocked claim's test with the stability policy's blocks set aside (shown,
    # never a verdict)
    filtered: str | None = None  # under a plan that keeps every seed: the verdict with the stability filter on
    bootstrap: Bootstrapped | None = None  # its test-split contrast's seed x window-block bootstrap (a sensitivity)
    filtered_tested: Tested | None = None  # its test with the stability filter on, where that still tests it
    history: str = ""  # where `pilot` is a replaced plan's (a claim not retrained): that pilot's folder
    sign_flip: bool = False  # the plan's p is the larger of Student-t's and the sign-flip test's: both shown


def claim_lines(
    scale_dir: Path, plan: AnalysisPlan, t: Thresholds = NOMINAL, experiments: dict[str, Experiment] | None = None
) -> list[ClaimLine]:
    """Every claim of `plan`, judged from `scale_dir`'s files (`experiments`, where the caller read them already),
    in the plan's order."""
    experiments = experiments if experiments is not None else read_scale(scale_dir, plan)
    judged_claims, decisions = judge_plan(experiments, plan, t)
    pilot = read_pilot(plan)
    history = read_pilot(plan.history_plan) if plan.history_plan else {}
    power = predicted_power(plan, pilot)
    power_own = predicted_power(plan, pilot, own_rows=True)
    unblocked = judge_plan(experiments, plan, STABILITY_OFF)[0]
    filtered = None if plan.rules.stability_veto else judge_plan(experiments, plan, STABILITY_FILTER)
    of = {c.id: c for c in plan.claims}
    decided = collections.Counter(
        of[i].paper for i, d in decisions.items() if d.verdict != "insufficient" and of[i].role == "secondary"
    )
    lines = []
    for claim in plan.claims:
        old = history and claim.excluded.startswith(EXCLUSIONS["not_planned"][1])
        pilot_test, pilot_n = _pilot(claim, history if old else pilot, plan)
        here, decision = judged_claims.get(claim.id), decisions.get(claim.id)
        status, why = claim_status(claim, here, decision)
        weakest = _weakest(here)
        unit = next((p.unit for (e, r), p in pilot.items() if e == claim.experiment and r in claim.rows), "")
        lines.append(
            ClaimLine(
                claim,
                status,
                why,
                weakest.unit if weakest else unit,
                here.tested if here else None,
                len(plan.experiments[claim.experiment].seeds) if claim.in_family else 0,
                decision.adjusted if decision and here and here.tested else None,
                decision.control if decision else "",
                decision_level(claim, plan, decided.get(claim.paper, 0)),
                tuple(f"{claim.experiment}: {row}" for row in claim.rows),
                tuple(weakest.margins[k] for k in plan.experiments[claim.experiment].seeds) if weakest else (),
                pilot_test,
                pilot_n,
                power.get(claim.id),
                power_own.get(claim.id),
                unblocked[claim.id].tested if status in ("unstable",) and claim.id in unblocked else None,
                filtered and claim_status(claim, filtered[0].get(claim.id), filtered[1].get(claim.id))[0],
                weakest and _bootstrap(claim, weakest, experiments[claim.experiment], plan),
                filtered and (f := filtered[0].get(claim.id)) and f.tested,
                plan.history if old else "",
                plan.rules.sign_flip,
            )
        )
    return lines


def decision_level(claim: PlannedClaim, plan: AnalysisPlan, secondaries_decided: int) -> float:
    """The one-sided level of the interval that decides `claim`: Bonferroni's alpha / m over its paper's
    primaries (Holm's first step, the most a primary needs), or Benjamini-Yekutieli's alpha R / (m sum 1/k) over
    its secondaries, R those decided (at least one)."""
    m = max(1, sum(c.paper == claim.paper and c.role == claim.role and c.in_family for c in plan.claims))
    if claim.role == "control":
        return plan.alpha
    if claim.role == "primary":
        return plan.alpha / m
    return plan.alpha * max(1, secondaries_decided) / (m * sum(1 / k for k in range(1, m + 1)))


def _weakest(here: ClaimJudged | None):
    """The claim's row whose test is its shown one (the weakest step of an `each`)."""
    if here is None or here.tested is None:
        return None
    return min(here.rows, key=lambda r: here.tests[r.where].estimate if here.tests.get(r.where) else 0.0)


def _bootstrap(claim: PlannedClaim, row: Observed, ex: Experiment, plan: AnalysisPlan) -> Bootstrapped | None:
    """The seed x window-block bootstrap of a test-loss contrast row at the plan's seeds (95%: 0.025 a side)."""
    if row.measure != TEST or not row.contrast:
        return None
    seeds = list(plan.experiments[claim.experiment].seeds)
    return block_bootstrap(ex.windows, row.contrast, seeds, plan.alpha, -claim.tolerance)


def _pilot(claim: PlannedClaim, pilot: dict, plan: AnalysisPlan) -> tuple[Tested | None, int]:
    """The pilot's test of the claim's rows, as the plan's rule would combine them (shown beside; it decides
    nothing)."""
    steps = []
    for row in claim.rows:
        found = pilot.get((claim.experiment, row))
        test = own_spread(list(found.margins)) if found else None
        if test is None:
            return None, 0
        steps.append((judged(test, claim, plan.alpha, rules=plan.rules), test.seeds))
    return combined([s for s, _ in steps], claim, plan.rules), min(n for _, n in steps)


def _g(value: float | None, sign: str = "") -> str:
    return "?" if value is None else f"{value:{sign}.3g}"


def claim_line(c: ClaimLine) -> str:
    """One claim: its verdict's numbers (the weakest step of an `each`), its control, its pilot, its power."""
    kind = c.claim.kind.replace("_", "-") + (f" within {c.claim.tolerance:g}" if c.claim.tolerance else "")
    head = f"- **{c.claim.id}** ({c.claim.role}, {kind}, {c.claim.combine}): {c.claim.statement}"
    parts = []
    if c.tested is not None and c.claim.in_family:
        step = " (its weakest step)" if c.claim.combine == "each" and len(c.claim.rows) > 1 else ""
        low, high = c.tested.bounds(c.level)
        parts.append(
            f"**{_g(c.tested.estimate, '+')} [{_g(c.tested.low)}, {_g(c.tested.high)}] {c.unit}**{step}, "
            f"{c.seeds} fresh seeds; at its family's level ({c.level:.2g} a side) [{_g(low)}, {_g(high)}]; p that "
            f"it holds {_g(c.tested.p_hold)}, that it fails {_g(c.tested.p_fail)}; adjusted {_g(c.adjusted)} "
            f"({c.control})"
        )
    if c.sign_flip and c.tested is not None and c.claim.in_family and (both := _both_ps(c)):
        parts.append(both)
    if c.why:
        parts.append(c.why)
    if (aside := c.set_aside) is not None:
        parts.append(
            f"with its unstable seeds kept (not a verdict): {_g(aside.estimate, '+')} [{_g(aside.low)}, "
            f"{_g(aside.high)}], p that it holds {_g(aside.p_hold)}, that it fails {_g(aside.p_fail)}"
        )
    if c.filtered is not None:
        parts.append(f"with the stability filter on (a sensitivity, not the verdict): {c.filtered}")
    if (boot := c.bootstrap) is not None:
        parts.append(
            f"seed x test-window-block bootstrap (a sensitivity): {_g(boot.estimate, '+')} [{_g(boot.low)}, "
            f"{_g(boot.high)}], share of draws against it {_g(boot.p_hold)}"
        )
    if c.pilot is not None:
        whose = (
            f"history, the replaced plan's pilot (`{c.history}/`, its older recipe; not evidence)"
            if c.history
            else "pilot"
        )
        parts.append(
            f"{whose}: {_g(c.pilot.estimate, '+')} [{_g(c.pilot.low)}, {_g(c.pilot.high)}], {c.pilot_seeds} seeds"
        )
    if c.power is not None:
        own = f" ({c.power_own_rows:.2f} on each row's own pilot spread)" if c.power_own_rows is not None else ""
        parts.append(f"predicted power {c.power:.2f}{own} at its effect of interest {c.claim.effect:g}")
    return f"{head}. {'; '.join(parts)} ({'; '.join(c.rows)})"


def _both_ps(c: ClaimLine) -> str:
    """The one-sided p that it holds by each test the plan's rule takes the larger of (its weakest step's)."""
    if c.claim.kind == "equivalence" or not c.margins or c.tested.se == 0:
        return ""
    value = -c.claim.tolerance if c.claim.kind == "non_inferiority" else 0.0
    t_p = t_one_sided_p((c.tested.estimate - value) / c.tested.se, c.tested.df)
    return f"of holding, Student-t's p {_g(t_p)} and the exact sign-flip test's {_g(sign_flip_p(c.margins, value))}"
