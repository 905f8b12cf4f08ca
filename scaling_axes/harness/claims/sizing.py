"""Each claim of a plan sized by the power analysis (`claims.power`): the seeds it needs at the threshold it faces,
or out of reach. Claims that more than `max_seeds` cannot power leave their family before any of their seeds
trains, as the plan's rules say: all of a pass at once (the plan of issue 73), or one at a time, the least powered
first, the family's thresholds recomputed after each, then readmitted while the family stays powered and within its
budget (issue 83). Each dropped claim's reason says at what power it dropped and what it has against the final
family, so that the exclusions can be checked from the power table alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from scaling_axes.harness.claims.decisions import threshold
from scaling_axes.harness.claims.plan import AnalysisPlan, PlannedClaim
from scaling_axes.harness.claims.plan_records import OUT_OF_REACH as OUT
from scaling_axes.harness.claims.power import (
    Noise,
    PilotRow,
    claim_power,
    own_rows_noise,
    seed_floor,
    sizing_noise,
    test_df,
)

CONTROL_POWER = 0.9  # a positive control's power at least (issue 83): a gate that often fails wrongly wastes its runs


@dataclasses.dataclass(frozen=True)
class Sized:
    """A claim as the power analysis sizes it: its noise, threshold, the seeds it needs (None: more than the plan
    allows, or no pilot noise) and the power there, or why it is out of reach."""

    claim: PlannedClaim
    noise: Noise | None
    threshold: float
    seeds: int | None
    power: float
    why_out: str = ""


def size_claims(
    plan: AnalysisPlan, pilot: dict[tuple[str, str], PilotRow], fits: Callable[[list[Sized]], bool] = lambda _: True
) -> list[Sized]:
    """Every claim of the plan sized, claims it cannot power dropped from their family as its rules say
    (`DecisionRules.exclusions`): all at once per pass (the thresholds of those left loosen as their families
    shrink), or one at a time, the least powered first, each family's thresholds recomputed after each drop; then
    each dropped claim readmitted, the last dropped first, where the family with it is still powered at every claim
    and `fits` the budget. A dropped claim's reason gives its power when dropped and against the final family.
    Claims the plan excludes by design stay out; `pilot` is `read_pilot(plan)`."""
    declared = [dataclasses.replace(c, excluded="") if c.excluded.startswith(OUT) else c for c in plan.claims]
    dropped: dict[str, Sized] = {}  # (the plan's own out-of-reach list is what this computes: it is not read)
    while True:
        sized = _size_family(declared, dropped, plan, pilot)
        failing = [s for s in sized if s.why_out.startswith(OUT) and s.claim.id not in dropped]
        if not failing:
            break
        if plan.rules.exclusions == "all_at_once":
            dropped |= {s.claim.id: s for s in failing}
            continue
        weakest = min(failing, key=lambda s: s.power)
        why = f"{weakest.why_out}; exclusion {len(dropped) + 1}, one at a time, at {weakest.power:.0%} power"
        dropped[weakest.claim.id] = dataclasses.replace(weakest, why_out=why)
    if plan.rules.exclusions == "all_at_once":
        return _gated(sized, plan, pilot)
    for claim_id in reversed(list(dropped)):
        trial = {k: v for k, v in dropped.items() if k != claim_id}
        again = _size_family(declared, trial, plan, pilot)
        if all(s.seeds is not None for s in again if s.claim.in_family) and fits(again):
            dropped, sized = trial, again
    return _gated(
        [_dropped(s, dropped, declared, plan, pilot) if s.claim.id in dropped else s for s in sized], plan, pilot
    )


def _gated(sized: list[Sized], plan: AnalysisPlan, pilot: dict) -> list[Sized]:
    """An experiment whose positive control is out of reach judges nothing, so its claims leave their families; one
    left with its control alone trains it for nothing, so the control leaves too. The rest sized again (their
    families smaller), until nothing more leaves."""
    while True:
        gate = {}
        for control in (s for s in sized if s.claim.role == "control"):
            mates = [s for s in sized if s.claim.experiment == control.claim.experiment and s.claim.role != "control"]
            if control.why_out.startswith(OUT):
                why = (
                    f"{OUT}: its experiment's positive control {control.claim.id} is out of reach, so it judges nothing"
                )
                gate |= {s.claim.id: why for s in mates if s.seeds is not None}
            elif control.seeds is not None and not any(s.seeds is not None for s in mates):
                gate[control.claim.id] = (
                    f"{OUT}: no claim of its experiment is in reach: the control would gate nothing"
                )
        if not gate:
            return sized
        dropped = {s.claim.id: s for s in sized if s.why_out.startswith(OUT)}
        dropped |= {
            s.claim.id: dataclasses.replace(s, seeds=None, why_out=gate[s.claim.id])
            for s in sized
            if s.claim.id in gate
        }
        declared = [dataclasses.replace(s.claim, excluded="") if s.claim.id in dropped else s.claim for s in sized]
        sized = _size_family(declared, dropped, plan, pilot)


def _without(declared: list[PlannedClaim], dropped: dict[str, Sized]) -> list[PlannedClaim]:
    """The claims with those `dropped` out of their families (their reason the sizing that dropped them)."""
    return [
        dataclasses.replace(c, excluded=dropped[c.id].why_out) if c.id in dropped and not c.excluded else c
        for c in declared
    ]


def _size_family(declared: list[PlannedClaim], dropped: dict[str, Sized], plan: AnalysisPlan, pilot: dict):
    """Every claim sized with those `dropped` out of their families."""
    claims = _without(declared, dropped)
    return [_size(c, claims, plan, pilot) for c in claims]


def _dropped(sized: Sized, dropped: dict[str, Sized], declared: list, plan: AnalysisPlan, pilot: dict) -> Sized:
    """A claim dropped one at a time, sized again against the final family (the others dropped still out)."""
    claims = _without(declared, {k: v for k, v in dropped.items() if k != sized.claim.id})
    against = _size(next(c for c in claims if c.id == sized.claim.id), claims, plan, pilot)
    why = f"{dropped[sized.claim.id].why_out}; against the final family {against.power:.0%}"
    return dataclasses.replace(against, seeds=None, why_out=why)


UNSIZABLE = {  # a pilot row's status that leaves no margin to size a claim on, and why
    "unmatched": "unmatched by this scale's design; no seed decides it",
    "never_reached": "never reached: no pilot seed reached the loss it is read at, so there is no margin to size it on",
}


def _size(claim: PlannedClaim, claims: list[PlannedClaim], plan: AnalysisPlan, pilot: dict) -> Sized:
    alpha = threshold(claim, claims, plan.alpha)
    if claim.excluded:
        return Sized(claim, None, alpha, None, 0.0, claim.excluded)
    statuses = {row: getattr(pilot.get((claim.experiment, row)), "status", "") for row in claim.rows}
    if held := sorted({status for status in statuses.values() if status in UNSIZABLE}):
        rows = ", ".join(row for row, status in statuses.items() if status == held[0])
        return Sized(claim, None, alpha, None, 0.0, f"{OUT}: the pilot found {rows} {UNSIZABLE[held[0]]}")
    noise = sizing_noise(claim, pilot, plan)
    if noise is None:
        return Sized(claim, None, alpha, None, 0.0, f"{OUT}: the pilot measured no margin of it to size it on")
    test = plan.experiments[claim.experiment].test if claim.experiment in plan.experiments else "own_spread"
    needed = max(plan.power, CONTROL_POWER) if claim.role == "control" else plan.power
    best = (0.0, plan.max_seeds)  # under divergence power rises, then falls with seeds: its best is what is said
    for seeds in range(seed_floor(claim, alpha, plan), plan.max_seeds + 1):
        power = claim_power(claim, noise, seeds, test_df(claim, test, seeds, pilot), alpha, plan.rules)
        if power >= needed:
            return Sized(claim, noise, alpha, seeds, power)
        best = max(best, (power, seeds), key=lambda found: found[0])
    return Sized(claim, noise, alpha, None, best[0], _out_of_reach(claim, noise, best, alpha, test, plan, pilot))


def _out_of_reach(
    claim: PlannedClaim, noise: Noise, best: tuple[float, int], alpha: float, test: str, plan: AnalysisPlan, pilot: dict
) -> str:
    """Why no seed count up to the plan's cap powers `claim`: its best power and where, and what binds it (where
    the plan assumes runs diverge, the power without divergence at the cap beside it)."""
    why = f"{OUT}: at most {best[0]:.0%} power, at {best[1]} seeds (of at most {plan.max_seeds})"
    if rate := plan.rules.divergence_rate:
        never = dataclasses.replace(plan.rules, divergence_rate=0.0)
        clean = claim_power(claim, noise, plan.max_seeds, test_df(claim, test, plan.max_seeds, pilot), alpha, never)
        why += f"; {clean:.0%} at {plan.max_seeds} were no run to diverge (each assumed to at {rate:g})"
    sigma = f"the pilot's sigma {noise.sigma:.3g}, upper limit {noise.upper:.3g}"
    return f"{why}; {sigma}, against the effect {claim.effect:g}"


def predicted_power(
    plan: AnalysisPlan, pilot: dict[tuple[str, str], PilotRow], own_rows: bool = False
) -> dict[str, float]:
    """claim id -> the power the plan predicts for each in-family claim at its experiment's seeds (at least what its
    sizing asked: an experiment's seeds are its neediest claim's); `own_rows`: on each row's own pilot spread instead
    of the pooled one (`own_rows_noise`), beside it in the report; `pilot` is `read_pilot(plan)`."""
    out = {}
    for claim in (c for c in plan.claims if c.in_family):
        noise = own_rows_noise(claim, pilot, plan.sigma_confidence) if own_rows else sizing_noise(claim, pilot, plan)
        planned = plan.experiments[claim.experiment]
        if noise is not None:
            df = test_df(claim, planned.test, len(planned.seeds), pilot)
            alpha = threshold(claim, plan.claims, plan.alpha)
            out[claim.id] = claim_power(claim, noise, len(planned.seeds), df, alpha, plan.rules)
    return out
