"""One rule for every claim: one-sided tests at the plan's alpha, per direction, by the claim's kind; its rows'
tests combined as the plan says; each paper's claims controlled as a family.

Kinds (margins signed so that positive is the paper's direction; `tolerance` and `effect` from the plan):
- superiority ("beats", "lower"): holds where the lower bound is above 0; fails where the upper bound is below 0
  (below `effect` where the plan says so);
- non-inferiority ("as good as", "matches"): holds where the lower bound is above -tolerance; fails where the upper
  bound is below -tolerance;
- equivalence ("about", "comparable"): holds where the 1 - 2 alpha interval lies inside +-tolerance (two one-sided
  tests); fails where it lies wholly outside.

Combined: `each` (every step, "monotonically") holds if every step holds (p the largest one-sided p: an
intersection-union test) and fails if one step is shown reversed (Holm over the steps, or Simes' where the plan's
rules say); `average` is one contrast; `one` one row. Per paper, per direction: Holm over the primaries; the
secondaries a Benjamini-Yekutieli family of their own. A claim that could not be tested enters with p = 1. Where the
plan's rules name the sign-flip test, every one-sided p is the larger of Student-t's and the exact sign-flip test's
on the seeds' margins: a verdict that does not rest on normality alone (`plan_fields.DecisionRules`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from scaling_axes.harness.claims.contrasts import RowTest
from scaling_axes.harness.claims.plan import DecisionRules, PlannedClaim
from scaling_axes.significance import false_discovery_q, holm_adjusted, sign_flip_p, simes_p, t_critical, t_one_sided_p

T_ALONE = DecisionRules()  # Student-t alone, Holm over `each` steps: the rules of a plan that names none


@dataclasses.dataclass(frozen=True)
class Tested:
    """A test judged by a claim's kind: the estimate, its 1 - 2 alpha interval (the two one-sided bounds), and the
    one-sided p that the claim holds and that it fails."""

    estimate: float
    low: float
    high: float
    p_hold: float
    p_fail: float
    se: float = 0.0
    df: float = math.inf

    def bounds(self, alpha: float) -> tuple[float, float]:
        """The two one-sided bounds at `alpha` each (a family's adjusted level: the interval that decides)."""
        half = t_critical(self.df, alpha) * self.se
        return self.estimate - half, self.estimate + half


def _p_above(value: float, test: RowTest) -> float:
    """The one-sided p that the true mean exceeds `value`: P(T >= (estimate - value) / se)."""
    if test.se == 0:
        return 0.0 if test.estimate > value else 1.0
    return t_one_sided_p((test.estimate - value) / test.se, test.df)


def _p_below(value: float, test: RowTest) -> float:
    if test.se == 0:
        return 0.0 if test.estimate < value else 1.0
    return t_one_sided_p((value - test.estimate) / test.se, test.df)


def _exact_above(value: float, test: RowTest) -> float:
    """The larger of Student-t's p and the exact sign-flip test's that the true mean exceeds `value`."""
    return max(_p_above(value, test), sign_flip_p(test.margins, value))


def _exact_below(value: float, test: RowTest) -> float:
    return max(_p_below(value, test), sign_flip_p([-m for m in test.margins], -value))


def judged(
    test: RowTest,
    claim: PlannedClaim,
    alpha: float,
    tolerance: float | None = None,
    rules: DecisionRules = T_ALONE,
) -> Tested:
    """`test` judged as `claim`'s kind says (`tolerance`: another than the plan's, for the sensitivity pass); with
    `rules.sign_flip`, each p the larger of Student-t's and the exact sign-flip test's on the margins."""
    tol = claim.tolerance if tolerance is None else tolerance
    half = t_critical(test.df, alpha) * test.se
    above, below = (_exact_above, _exact_below) if rules.sign_flip else (_p_above, _p_below)
    if claim.kind == "superiority":
        p_hold, p_fail = above(0.0, test), below(claim.effect if claim.fail_below_effect else 0.0, test)
    elif claim.kind == "non_inferiority":
        p_hold, p_fail = above(-tol, test), below(-tol, test)
    else:  # equivalence
        p_hold = max(above(-tol, test), below(tol, test))
        p_fail = min(1.0, 2 * min(above(tol, test), below(-tol, test)))  # either side: Bonferroni over two
    return Tested(test.estimate, test.estimate - half, test.estimate + half, p_hold, p_fail, test.se, test.df)


def combined(steps: Sequence[Tested], claim: PlannedClaim, rules: DecisionRules = T_ALONE) -> Tested:
    """A claim's rows combined: `each` (intersection-union to hold; to fail, Holm over the steps, or Simes where
    the plan's rules say: steps that share an arm are positively dependent), shown as its weakest step; `one` and
    `average` are one test already (the `average` contrast is formed before testing)."""
    if len(steps) == 1 or claim.combine != "each":
        return steps[0]
    weakest = min(steps, key=lambda s: s.estimate)
    fails = [s.p_fail for s in steps]
    p_fail = simes_p(fails) if rules.each_steps == "simes" else min(holm_adjusted(fails))
    return dataclasses.replace(weakest, p_hold=max(s.p_hold for s in steps), p_fail=p_fail)


@dataclasses.dataclass(frozen=True)
class Decision:
    """A claim's verdict after its paper's control: `verdict` (claim_holds, claim_fails or insufficient), the raw
    one-sided p and the adjusted one (Holm's for a primary, Benjamini-Yekutieli's q for a secondary) in the
    direction decided (or the nearer one), and what controlled it."""

    verdict: str
    p: float
    adjusted: float
    control: str


def paper_decisions(claims: Sequence[PlannedClaim], tested: dict[str, Tested | None], alpha: float) -> dict:
    """claim id -> `Decision` for one paper's claims in the family (`tested[id]` None: could not be tested, p = 1):
    each direction controlled apart, Holm over the primaries, Benjamini-Yekutieli over the secondaries; a positive
    control (`plan.CONTROLS`) alone at alpha."""
    out = {}
    for role, adjust, control in (
        ("primary", holm_adjusted, "Holm over the paper's primaries"),
        ("secondary", lambda p: false_discovery_q(p, dependent=True), "Benjamini-Yekutieli over its secondaries"),
        ("control", list, "a positive control, alone at alpha (no paper's family)"),
    ):
        group = [c for c in claims if c.role == role and c.in_family]
        if not group:
            continue
        holds = [1.0 if tested[c.id] is None else tested[c.id].p_hold for c in group]
        fails = [1.0 if tested[c.id] is None else tested[c.id].p_fail for c in group]
        for claim, p_hold, p_fail, q_hold, q_fail in zip(
            group, holds, fails, adjust(holds), adjust(fails), strict=True
        ):
            of = f"{control} ({len(group)})"
            if q_fail < alpha:
                out[claim.id] = Decision("claim_fails", p_fail, q_fail, of)
            elif q_hold < alpha:
                out[claim.id] = Decision("claim_holds", p_hold, q_hold, of)
            else:
                nearer = min((q_hold, p_hold), (q_fail, p_fail))
                out[claim.id] = Decision("insufficient", nearer[1], nearer[0], of)
    return out


def threshold(claim: PlannedClaim, claims: Sequence[PlannedClaim], alpha: float) -> float:
    """The smallest one-sided p at which `claim` is decided alone: Holm's alpha / m over its paper's primaries, or
    Benjamini-Yekutieli's at rank 1, alpha / (m sum 1/k), over its secondaries (what the plan's power is for); a
    positive control's alpha itself."""
    if claim.role == "control":
        return alpha
    m = sum(c.role == claim.role and c.in_family and c.paper == claim.paper for c in claims)
    m = max(m, 1)
    return alpha / m if claim.role == "primary" else alpha / (m * sum(1 / k for k in range(1, m + 1)))
