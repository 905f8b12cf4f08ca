"""The size of the whole decision rule, by Monte Carlo: each paper's in-family claims drawn under their nulls, with
the pilot's covariance (each row's own spread, unequal across rows; rows that share arms correlated by the arms they
share, a chain's neighbours and a star's spokes alike; runs that experiments share drawn once), at the plan's seeds,
then tested, combined and controlled by the suite's own code (`decisions`, `contrasts`). The error rate per paper
family (a paper's primaries; its secondaries) and per direction (a claim shown to hold, or to fail, where it is not
true) must be at most alpha.

Three kinds of null: every row at its claim's boundary (0 for superiority, -tolerance for non-inferiority, +tolerance
for equivalence: where both directions' nulls are true at once); the least favourable for an intersection-union claim
(one step at the boundary, the others far on the paper's side, where `each` is closest to its level); and each claim
alone at its boundary, the others far on the paper's side (a partial null, where a step-down control is closest to
its level). A paper's primaries control the family-wise error; its secondaries the false-discovery rate, which equals
it under the complete null only. The draws are of each row's own pilot spread, rows correlated by the share of arms
they share (its sign not modelled).

Each null is drawn again with its runs contaminated (issue 83), where the Gaussian draws cannot see a t-test's level
move: at each seed a row's margin is, with a small probability, moved far to one side (a diverged run: its loss at
ln(vocabulary)) or by a right-skewed amount (a bad run). The draws are re-centred on the null, so that the mean the
t-test reads stays at the boundary and only the shape of the margins changes; toward `holds` the bulk sits below the
boundary, toward `fails` above it.

    python -m scaling_axes simulate --scale cpu     # results/cpu/simulation/size.csv
"""

from __future__ import annotations

import dataclasses
import math
import statistics

from scaling_axes.harness.claims.contrasts import own_spread
from scaling_axes.harness.claims.decisions import combined, judged, paper_decisions
from scaling_axes.harness.claims.plan import CONTROLS, AnalysisPlan, PlannedClaim
from scaling_axes.harness.claims.power import DIVERGED_SDS, PilotRow, overlap, read_pilot

FAR = 8.0  # standard deviations: "far on the paper's side" for the least favourable null of `each`
MC_Z = 1.96  # a family passes where its rate's upper 95% Monte Carlo bound is at most MC_SLACK x alpha (an exact
MC_SLACK = 1.2  # single test's rate is alpha itself, which draws estimate on either side of it)
COLUMNS = ("paper", "family", "null", "direction", "draws", "errors", "rate", "mc_se", "alpha", "at_or_below")


@dataclasses.dataclass(frozen=True)
class Contamination:
    """Margins at a seed moved, with probability `rate`, `shift_sd` of the row's pilot SDs toward one side: a fixed
    shift (`skewed` false: a run that diverged, whose loss is ln(vocabulary), tens of SDs away), or an exponential
    one with that mean (`skewed`: a run that trained badly)."""

    name: str
    rate: float
    shift_sd: float
    skewed: bool


CONTAMINATIONS = (
    Contamination(f"diverged runs (2% of seeds, {DIVERGED_SDS:g} SD)", rate=0.02, shift_sd=DIVERGED_SDS, skewed=False),
    Contamination("skewed runs (10% of seeds, exponential of mean 3 SD)", rate=0.1, shift_sd=3.0, skewed=True),
)


def _contaminated(draw, sd, how: Contamination, toward: int, rng):
    """`draw` (draws x seeds x rows) with `how`'s contamination toward one side (+1: the paper's, -1: against),
    re-centred so that each row's mean is unchanged."""
    hit = rng.random(draw.shape) < how.rate
    size = rng.exponential(1.0, draw.shape) if how.skewed else 1.0
    return draw + toward * how.shift_sd * sd * (hit * size - how.rate)


@dataclasses.dataclass(frozen=True)
class Row:
    claim: PlannedClaim
    where: str
    pilot: PilotRow


def _rows(plan: AnalysisPlan, paper: str, pilot: dict) -> list[Row]:
    return [
        Row(c, where, pilot[(c.experiment, where)]) for c in plan.of_paper(paper) if c.in_family for where in c.rows
    ]


def _null(claim: PlannedClaim) -> float:
    return {"superiority": 0.0, "non_inferiority": -claim.tolerance, "equivalence": claim.tolerance}[claim.kind]


def simulate(
    plan: AnalysisPlan,
    pilot: dict[tuple[str, str], PilotRow],
    paper: str,
    draws: int,
    seed: int = 73,
    least_favourable: bool = False,
    alone: str = "",
    contamination: tuple[Contamination, int] | None = None,
) -> dict:
    """(family, direction) -> errors, and "draws": how often `paper`'s primaries (its Holm family) and its
    secondaries (its Benjamini-Yekutieli family) declared a claim to hold, or to fail, where it was at its null.
    `least_favourable`: each `each` claim's first step alone at the boundary; `alone`: that claim alone at its
    boundary, every other far on the paper's side (a partial null: only its errors count); `contamination`: (how,
    toward) the draws are contaminated (`_contaminated`). `pilot` is
    `power.read_pilot(plan)`, read once for every null."""
    import numpy as np

    rows = _rows(plan, paper, pilot)
    if not rows:
        return {"draws": 0}
    sd = np.array([statistics.stdev(r.pilot.margins) for r in rows])  # each row's own: unequal across rows
    rho = np.array([[overlap(a.pilot.runs, b.pilot.runs) for b in rows] for a in rows])
    cov = rho * np.outer(sd, sd) + 1e-12 * np.eye(len(rows))
    mean = np.array([_null(r.claim) for r in rows])
    if least_favourable:  # each `each` claim: its first step at the boundary, the others far on the paper's side
        firsts = {}
        for i, r in enumerate(rows):
            if firsts.setdefault(r.claim.id, i) != i and r.claim.combine == "each":
                mean[i] += FAR * sd[i]
    if alone:  # every other claim far on the paper's side
        mean += np.array([0.0 if r.claim.id == alone else FAR * sd[i] for i, r in enumerate(rows)])
    seeds = {c.id: len(plan.experiments[c.experiment].seeds) for c in plan.of_paper(paper) if c.in_family}
    n = max(seeds.values())
    rng = np.random.default_rng(seed)
    claims = plan.of_paper(paper)
    errors = {(role, d): 0 for role in {c.role for c in claims if c.in_family} for d in ("holds", "fails")}
    drawn = rng.multivariate_normal(mean, cov, size=(draws, n))
    if contamination is not None:
        drawn = _contaminated(drawn, sd, *contamination, rng)
    for draw in drawn:
        tested = {}
        for claim in (c for c in claims if c.in_family):
            steps = [
                judged(own_spread(list(draw[: seeds[claim.id], i])), claim, plan.alpha, rules=plan.rules)
                for i, r in enumerate(rows)
                if r.claim.id == claim.id
            ]
            tested[claim.id] = combined(steps, claim, plan.rules)
        decided = paper_decisions(claims, tested, plan.alpha)
        for role, direction in errors:
            at_null = {c.id for c in claims if c.role == role and (not alone or c.id == alone)}
            verdicts = {d.verdict for i, d in decided.items() if i in at_null}
            errors[(role, direction)] += f"claim_{direction}" in verdicts
    return {**errors, "draws": draws}


def size_table(plan: AnalysisPlan, draws: int) -> list[dict]:
    """The rows of `simulation/size.csv`: per paper, family (its primaries, its secondaries), null and direction,
    the rate at which the family declared any claim where none is true, and its Monte Carlo standard error."""
    out, pilot = [], read_pilot(plan)
    for paper in sorted({c.paper for c in plan.claims if c.in_family} - {CONTROLS}):  # a control: alone at alpha
        nulls = [("every row at its boundary", {}), ("least favourable for each", {"least_favourable": True})]
        nulls += [(f"{c.id} alone at its boundary", {"alone": c.id}) for c in plan.of_paper(paper) if c.in_family]
        if len([c for c in plan.of_paper(paper) if c.in_family]) == 1:
            nulls = nulls[:2]
        nulls += [
            (f"every row at its boundary, {how.name} toward {side}", {"contamination": (how, toward)})
            for how in CONTAMINATIONS
            for side, toward in (("holds", 1), ("fails", -1))
        ]
        for null, how in nulls:
            found = simulate(plan, pilot, paper, draws, **how)
            for (role, direction), errors in sorted((k, v) for k, v in found.items() if k != "draws"):
                if how.get("alone") and role != next(c.role for c in plan.claims if c.id == how["alone"]):
                    continue
                rate = errors / found["draws"]
                se = math.sqrt(rate * (1 - rate) / found["draws"])
                out.append(
                    {
                        "paper": paper,
                        "family": role,
                        "null": null,
                        "direction": direction,
                        "draws": found["draws"],
                        "errors": errors,
                        "rate": f"{rate:.4f}",
                        "mc_se": f"{se:.4f}",
                        "alpha": f"{plan.alpha:g}",
                        "at_or_below": rate + MC_Z * se <= MC_SLACK * plan.alpha,
                    }
                )
    return out
