"""The power analysis a plan's seeds come from: for each claim, the seeds its test needs to decide the smallest
effect of interest with the plan's power, at the threshold that claim faces, on the degrees of freedom of the test
that will run, with the pilot's noise taken at its upper confidence limit. The pilot (its per-seed files) gives the
noise and nothing else: never an effect.

- sigma: the pooled spread of the pilot's margins of the claim's own rows where it has two or more, else of its
  experiment's rows in its unit (each margin series once; rows on arms that did not learn or trained unstably left
  out; a claim's rows are one measure on one data set, never FineWeb's and FineMath's together), its degrees of
  freedom the effective ones of
  an average of correlated variances, (n - 1) k^2 / sum_ij rho_ij^2, with rho_ij the share of arms two margins
  share (a star of pairwise margins on one arm: 1/2); then its upper `sigma_confidence` limit.
- threshold: Holm's alpha / m over the paper's primaries, or Benjamini-Yekutieli's at rank 1 over its secondaries
  (`decisions.threshold`).
- power: superiority at noncentrality effect / se; non-inferiority at (effect + tolerance) / se; equivalence exactly
  (`significance.equivalence_power`); `each` as the joint power of all its steps, simulated with the steps'
  correlation.

A claim needing more than `max_seeds` is out of reach: outside the family, before any of its seeds trains
(`claims.sizing`).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import statistics
from typing import Any

from scaling_axes.harness.claims.contrasts import blocks_of
from scaling_axes.harness.claims.decisions import T_ALONE
from scaling_axes.harness.claims.observed import read_experiment
from scaling_axes.harness.claims.plan import AnalysisPlan, DecisionRules, PlannedClaim
from scaling_axes.significance import (
    equivalence_power,
    one_sided_power,
    sigma_upper_limit,
    sign_flip_floor,
    t_critical,
)

BLOCKED = ("not_learning", "unstable")  # a pilot row on such arms gives no noise of learning, stable runs
SIMULATED_DRAWS = 4000  # the joint power of an `each` claim's steps, by simulation (seeded: the same every time)
SIGN_FLIP_DRAWS = 2000  # the power of the t and sign-flip rule, by simulation
DIVERGED_SDS = 30.0  # the size check's diverged margin, in sigmas (`simulation.CONTAMINATIONS`): a real one,
# ln(vocabulary) against a loss nats below it with seeds hundredths apart, lies hundreds of sigmas out (`no_divergence`)


@dataclasses.dataclass(frozen=True)
class PilotRow:
    """One pilot claim row as the power analysis reads it: its margins per seed, the runs it compares, its unit and
    the status the pilot gave it."""

    experiment: str
    row: str
    runs: frozenset[str]
    unit: str
    status: str
    margins: tuple[float, ...]


def read_pilot(plan: AnalysisPlan) -> dict[tuple[str, str], PilotRow]:
    """(experiment, table/row) -> the claim rows of `plan`'s pilot (`plan.pilot`) for every experiment it makes a
    claim of, from each one's table and per-seed file, read as the judge reads evidence (`read_experiment`: its
    digest, each row whole and finite); its margins the differences themselves, where an older file added an
    as-good-as claim's tolerance to them. Read once per command and passed on: the sizing, the predicted power and
    the simulation take what it returns."""
    out = {}
    pilot_dir = plan.pilot_dir
    for name in sorted({c.experiment for c in plan.claims}):
        if not (pilot_dir / f"{name}.csv").exists():
            continue
        experiment = read_experiment(pilot_dir, name)
        margins: dict[tuple[str, str], list[float]] = {}
        shift: dict[tuple[str, str], float] = {}  # an older file's as-good-as margins carry their tolerance
        for r in experiment.seeds:
            if r["kind"] == "claim":
                margins.setdefault((r["table"], r["row"]), []).append(float(r["value"]))
            elif r["kind"] == "evidence" and r["metric"] == "tolerance" and r["value"]:
                shift[(r["table"], r["row"])] = float(r["value"])
        for r in experiment.rows:
            if r["metric"] == "claim":
                where = f"{r['table']}/{r['row']}"
                runs = frozenset(filter(None, r["run"].split(",")))
                added = shift.get((r["table"], r["row"]), 0.0)
                values = tuple(m - added for m in margins.get((r["table"], r["row"]), ()))
                out[(name, where)] = PilotRow(name, where, runs, r["unit"], r["status"], values)
    return out


def resolved_effects(plan: AnalysisPlan) -> AnalysisPlan:
    """`plan` with each effect its rule fixed before the pilot (`PlannedClaim.effect_rule`: a fraction of a run's
    mean final loss over the pilot's seeds, on the split the plan judges) computed from the pilot's per-seed files;
    a claim whose run the pilot lacks keeps 0, which no power analysis sizes."""
    measure = "test_loss" if plan.rules.verdict_split == "test" else "val_loss"
    pilot = functools.cache(lambda name: read_experiment(plan.pilot_dir, name))  # each file read (and verified) once
    claims = []
    for claim in plan.claims:
        if claim.effect_rule and not claim.effect and (plan.pilot_dir / f"{claim.experiment}.csv").exists():
            fraction, run = claim.effect_rule
            values = [v[measure] for v in pilot(claim.experiment).runs.get(run, {}).values()]
            if values:
                claim = dataclasses.replace(claim, effect=fraction * statistics.fmean(values))
        claims.append(claim)
    return dataclasses.replace(plan, claims=tuple(claims))


@dataclasses.dataclass(frozen=True)
class Noise:
    """A claim's planning noise: the pilot's pooled sigma of one margin, its effective degrees of freedom, its upper
    confidence limit, and the correlation of the claim's steps (rho, in the order of its rows)."""

    sigma: float
    df: float
    upper: float
    rho: tuple[tuple[float, ...], ...]
    each_upper: tuple[float, ...] = ()  # each step's own upper limit, where sized on each row's own spread
    runs: int = 2  # the distinct runs a seed of the claim trains (its rows' arms): each may diverge


def overlap(a: frozenset[str], b: frozenset[str]) -> float:
    """The correlation of two margins under equal arm variances, as the share of arms they share."""
    return len(a & b) / math.sqrt(len(a) * len(b)) if a and b else 0.0


def planning_noise(claim: PlannedClaim, pilot: dict, confidence: float) -> Noise | None:
    """The claim's noise from its experiment's pilot rows in its unit (None: the pilot measured none)."""
    mine = [pilot.get((claim.experiment, row)) for row in claim.rows]
    if any(r is None or len(r.margins) < 2 for r in mine):
        return None
    unit, own = mine[0].unit, [r for r in mine if r.status not in BLOCKED]
    pool = {
        r.margins: r
        for (experiment, _), r in sorted(pilot.items())
        if experiment == claim.experiment and r.unit == unit and len(r.margins) >= 2 and r.status not in BLOCKED
    }
    rows = own if len(own) >= 2 else list(pool.values()) or mine
    sigma = math.sqrt(statistics.fmean(statistics.variance(r.margins) for r in rows))
    shared = sum(overlap(a.runs, b.runs) ** 2 for a in rows for b in rows)
    df = statistics.fmean(len(r.margins) - 1 for r in rows) * len(rows) ** 2 / shared
    rho, runs = _arms_shared(mine)
    return Noise(sigma, df, sigma_upper_limit(sigma, df, confidence), rho, runs=runs)


def own_rows_noise(claim: PlannedClaim, pilot: dict, confidence: float) -> Noise | None:
    """The claim's noise taken from each of its rows' own pilot spread, times the pooled estimate's upper-limit
    factor: what its own-spread test faces where the rows spread unequally (the pooled sigma then understates the
    noisiest step), the uncertainty of a three-seed spread left as the plan took it."""
    pooled = planning_noise(claim, pilot, confidence)
    if pooled is None:
        return None
    mine = [pilot[(claim.experiment, row)] for row in claim.rows]
    factor = pooled.upper / pooled.sigma  # the pooled estimate's upper-limit factor, so that only the spread moves
    each = tuple(factor * statistics.stdev(r.margins) for r in mine)
    return dataclasses.replace(pooled, upper=max(each), each_upper=each)


def own_spread_noise(claim: PlannedClaim, pilot: dict, confidence: float) -> Noise | None:
    """The claim's noise on each of its rows' own pilot spread, each at its own upper `confidence` limit on its own
    degrees of freedom (a plan's `sizing: own_rows`: the test that runs is each row on its own spread, and rows
    that spread unequally must not lend each other their noise); every row counted, flagged or not, as every seed
    is analysed. Its sigma and degrees of freedom are the noisiest step's."""
    mine = [pilot.get((claim.experiment, row)) for row in claim.rows]
    if any(r is None or len(r.margins) < 2 for r in mine):
        return None
    spreads = [(statistics.stdev(r.margins), len(r.margins) - 1) for r in mine]
    each = tuple(sigma_upper_limit(sd, df, confidence) for sd, df in spreads)
    sigma, df = spreads[each.index(max(each))]
    rho, runs = _arms_shared(mine)
    return Noise(sigma, df, max(each), rho, each, runs=runs)


def _arms_shared(rows: list[PilotRow]) -> tuple[tuple[tuple[float, ...], ...], int]:
    """The correlation of a claim's steps (the share of arms two rows share) and the distinct runs they compare."""
    rho = tuple(tuple(overlap(a.runs, b.runs) for b in rows) for a in rows)
    return rho, len(frozenset().union(*(r.runs for r in rows)))


def sizing_noise(claim: PlannedClaim, pilot: dict, plan: AnalysisPlan) -> Noise | None:
    """The noise a plan sizes `claim` on, as its rules say (`DecisionRules.sizing`)."""
    noise = own_spread_noise if plan.rules.sizing == "own_rows" else planning_noise
    return noise(claim, pilot, plan.sigma_confidence)


def test_df(claim: PlannedClaim, test: str, seeds: int, pilot: dict) -> float:
    """The degrees of freedom of the test that will run: seeds - 1 on its own spread; (A - 1)(n - 1) on the model,
    A the arms of the block its arms sit in (the experiment's claim rows joining arms)."""
    if test == "own_spread":
        return seeds - 1
    linked = [r.runs for (experiment, _), r in pilot.items() if experiment == claim.experiment]
    arms = set().union(*linked) if linked else set()
    block = next((b for b in blocks_of(arms, linked) if b & pilot[(claim.experiment, claim.rows[0])].runs), arms)
    return (len(block) - 1) * (seeds - 1)


def seed_floor(claim: PlannedClaim, alpha: float, plan: AnalysisPlan) -> int:
    """The fewest seeds that can decide `claim` at its threshold `alpha`: two; under the sign-flip rule, the fewest
    whose exact test can go below its lowest deciding level (an `each` claim's steps: alpha / k under Holm, alpha
    under Simes, whose largest step may decide)."""
    if not plan.rules.sign_flip:
        return 2
    steps = len(claim.rows) if claim.combine == "each" and plan.rules.each_steps == "holm" else 1
    return max(2, sign_flip_floor(alpha / steps))


def claim_power(
    claim: PlannedClaim, noise: Noise, seeds: int, df: float, alpha: float, rules: DecisionRules = T_ALONE
) -> float:
    """The power of `claim`'s test at `seeds` seeds and one-sided level `alpha`; under the sign-flip rule, of the
    t test and the exact test both rejecting (`_simulated_power`); where the rules assume runs diverge, times the
    chance that none of its runs does (`no_divergence`)."""
    survives = no_divergence(noise.runs, seeds, rules.divergence_rate)
    if rules.sign_flip:
        return survives * _simulated_power(claim, noise, seeds, df, alpha, rules)
    critical, k = t_critical(df, alpha), len(claim.rows)
    se = noise.upper / math.sqrt(seeds)
    if claim.combine == "average" and k > 1:
        se *= math.sqrt(sum(map(sum, noise.rho))) / k
    if claim.combine == "each" and k > 1:
        return survives * _joint_power(claim, noise, seeds, critical)
    if claim.kind == "equivalence":
        return survives * equivalence_power(claim.effect / se, claim.tolerance / se, df, critical)
    return survives * one_sided_power((claim.effect + claim.tolerance) / se, df, critical)


def no_divergence(runs: int, seeds: int, rate: float) -> float:
    """P(none of a claim's `runs` x `seeds` runs diverges, each at `rate`). Every seed is analysed, a diverged run at
    ln(vocabulary): nats from the others where seeds lie hundredths apart, hundreds of sigmas. With one such margin a
    t statistic tends to +-1 (two on one side: about 1.5), under every critical value the plan uses, so the claim is
    shown neither way, whatever the sign-flip p (at its floor where the run falls on the claim's side, at least 1/2
    where against): its power is the power without divergence times this, for every kind and each step of an
    `each`. Four or more on the claim's side could carry t past its critical value: negligible at the rates assumed."""
    return (1.0 - rate) ** (runs * seeds)


def _joint_power(claim: PlannedClaim, noise: Noise, seeds: int, critical: float) -> float:
    """P(every step's own-spread one-sided test rejects) with the steps' margins drawn per seed from a normal of
    the steps' correlation, each at the claim's effect (a seeded simulation: the same number every time)."""
    import numpy as np

    rng = np.random.default_rng(73)
    scale = np.array(noise.each_upper or [noise.upper] * len(claim.rows))
    cov = np.array(noise.rho) * np.outer(scale, scale) + 1e-12 * np.eye(len(claim.rows))
    shift = claim.effect + claim.tolerance
    draws = rng.multivariate_normal(np.full(len(claim.rows), shift), cov, size=(SIMULATED_DRAWS, seeds))
    t = draws.mean(axis=1) / (draws.std(axis=1, ddof=1) / math.sqrt(seeds))
    return float((t > critical).all(axis=1).mean())


def _simulated_power(
    claim: PlannedClaim, noise: Noise, seeds: int, df: float, alpha: float, rules: DecisionRules
) -> float:
    """P(the t test and the exact sign-flip test both reject) for a claim of one row (or its `average`), its
    margins drawn per seed from a normal at the claim's effect and the pilot's upper sigma (a seeded simulation).
    0 below the sign-flip floor; `each` and equivalence at t's power (the exact test's nears t's above the floor)."""
    import numpy as np

    if rules.sign_flip and 2.0**-seeds >= alpha:
        return 0.0  # no sign pattern of so few seeds is rare enough
    if (claim.combine == "each" and len(claim.rows) > 1) or claim.kind == "equivalence":
        return claim_power(claim, noise, seeds, df, alpha, T_ALONE)
    rng = np.random.default_rng(83)
    sigma = noise.upper * (math.sqrt(sum(map(sum, noise.rho))) / len(claim.rows) if claim.combine == "average" else 1)
    draws = rng.normal(claim.effect + claim.tolerance, sigma, size=(SIGN_FLIP_DRAWS, seeds))
    t = draws.mean(axis=1) / (draws.std(axis=1, ddof=1) / math.sqrt(seeds))
    rejects = t > t_critical(df, alpha)
    patterns = _sign_patterns(seeds, rng)
    exact = np.concatenate(  # in chunks of 200 draws: 200 x 2^14 sums at most in memory
        [((np.abs(d) @ patterns.T) >= d.sum(axis=1, keepdims=True) - 1e-12).mean(axis=1) for d in np.split(draws, 10)]
    )
    return float((rejects & (exact < alpha)).mean())


def _sign_patterns(seeds: int, rng: Any) -> Any:
    """Every sign pattern of `seeds` (up to 2^14 of them), else 2^14 drawn at random (the exact p then estimated to
    about 0.0004 at the levels a plan decides at)."""
    import numpy as np

    if seeds <= 14:
        return np.array(list(itertools.product((1.0, -1.0), repeat=seeds)))
    return rng.choice((1.0, -1.0), size=(2**14, seeds))
