"""A paper's claims as result rows, judged from whatever runs finished: `claim_holds`, `claim_fails` or
`insufficient`.

A claim is measured as a signed margin, positive where the paper's claim holds (say the Transformer's loss minus
the RMT's), once per seed at which every run it compares finished (`paired_margins`; further seeds are trained with
`--seeds N`). It is judged only where the data can support it: never at smoke scale (tiny models on a few thousand
tokens prove the pipeline, not a claim). A margin is a difference of two runs, so its noise is at least
sqrt(2) x the metric's noise floor for one run (`margin_floor`). From one seed, a margin beyond twice that floor
holds or fails by its sign. From n seeds, the mean margin must clear both tests: Student-t at 95% (two-sided) on the
seeds' own spread, t_{n-1} x s / sqrt(n) (twice the standard error passes a false claim about 30% of the time at
n = 2, where t is 12.7), and twice the floor / sqrt(n), since a spread measured from a few seeds can be zero by
chance (three equal margins of 0.001 do not hold). The margin, the noise and the seeds are in the note.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from scaling_axes.harness.results import Evidence, Row
from scaling_axes.harness.scales import Scale

# Noise floors of one run's metric, used as the least noise a margin can have (assumed, not measured here): the final
# validation loss of a small language model, and ImageNet top-1
LOSS_NOISE_FLOOR = 0.02  # nats/token
TOP1_NOISE_FLOOR = 0.3  # points
ONE_SEED_Z = 2.0  # a one-seed margin against the floor: the floor is taken as the known sigma (a z test)
# Student-t's two-sided 95% critical values t_{0.975, df}, df = 1 ... 30 (a property of the distribution, checked in
# tests against its density integrated numerically); beyond 30 the normal's 1.96
T_CRITICAL_95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
                 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
                 2.045, 2.042)  # fmt: skip


def t_critical(df: int) -> float:
    """Student-t's two-sided 95% critical value with `df` degrees of freedom."""
    if df < 1:
        raise ValueError(f"df={df}: Student-t needs at least one degree of freedom (two seeds)")
    return T_CRITICAL_95[df - 1] if df <= len(T_CRITICAL_95) else 1.96


def margin_floor(noise_floor: float, runs_per_margin: int = 2) -> float:
    """The least noise of a margin combining `runs_per_margin` runs of a metric whose one-run noise is `noise_floor`
    (a difference of two runs: sqrt 2 x)."""
    return math.sqrt(runs_per_margin) * noise_floor


def significance_bound(margins: Sequence[float], noise_floor: float, runs_per_margin: int = 2) -> tuple[float, float]:
    """(bound, noise): |mean margin| must exceed `bound` to hold or fail. One seed: ONE_SEED_Z x the margin's floor.
    n seeds: the larger of Student-t on their spread (t_{n-1} s / sqrt n) and ONE_SEED_Z x the floor / sqrt n."""
    floor = margin_floor(noise_floor, runs_per_margin)
    if len(margins) < 2:
        return ONE_SEED_Z * floor, floor
    n, spread = len(margins), statistics.stdev(margins)
    return max(t_critical(n - 1) * spread, ONE_SEED_Z * floor) / math.sqrt(n), max(spread, floor)


NOTE_PARTS = " | "  # a claim's note: its statement | what was measured | why it was not decided (when it was not)
POWER_Z = 0.84  # the normal quantile of 80% power: a minimum detectable effect is found 4 times in 5
MAX_SEEDS = 100  # beyond this many seeds a margin is out of reach in practice


def judge(
    table: str,
    row: str,
    statement: str,
    scale: Scale,
    margins: Mapping[int, float] | Sequence[float],
    noise_floor: float,
    unit: str = "",
    fails_because: str | None = None,
    runs: Sequence[str] = (),
    runs_per_margin: int = 2,
    noise_metric: str | None = None,
    noise_scale: float = 1.0,
    unmatched: str | None = None,
    before_training: bool = False,
) -> Row:
    """The claim `statement`, measured by `margins` (seed -> margin, or a list from seed 1; positive: the claim
    holds), each combining
    `runs_per_margin` runs of a metric whose one-run noise is at least `noise_floor` (`noise_metric`: the per-run
    metric whose measured spread may raise it, see `settle`). `fails_because`: a part of the claim that the runs
    already contradict whatever the margin (a cost that is not lower). `runs`: the runs it compares (the row's
    `run`, comma-separated), whose data, staleness and learning the harness reads. `before_training`: the margin is
    measured on the models before they train, so their training's stability does not bear on it."""
    by_seed = margins if isinstance(margins, Mapping) else dict(enumerate(margins, 1))
    evidence = Evidence(statement, tuple(by_seed.values()), tuple(by_seed), noise_floor, runs_per_margin,
                        fails_because, noise_metric, noise_scale, unmatched, before_training)  # fmt: skip
    claim = Row(table=table, row=row, metric="claim", unit=unit, run=",".join(runs), evidence=evidence)
    return settle(claim, scale)


def settle(
    claim: Row,
    scale: Scale,
    measured_noise: dict[str, float] | None = None,
    not_learning: Sequence[str] = (),
    untuned: Sequence[str] = (),
    unstable: Sequence[str] = (),
) -> Row:
    """`claim` judged from its evidence: with `measured_noise` (metric -> pooled one-run spread at this scale) as a
    floor where it exceeds the assumed one, and never decided on a run in `not_learning` (why each is not), on one
    that trained unstably (`unstable`: why each did) or on one whose lr is not tuned (`untuned`: why)."""
    e = claim.evidence
    floor = max(e.noise_floor, e.noise_scale * (measured_noise or {}).get(e.noise_metric, 0.0))
    margin = statistics.mean(e.margins) if e.margins else None
    bound, noise = significance_bound(e.margins, floor, e.runs_per_margin)
    n, status, why = len(e.margins), "insufficient", ""
    if margin is None:
        why = "the runs it needs have not finished"
    elif not scale.judges_claims:
        why = f"{scale} scale proves the pipeline, not a claim"
    elif not_learning:
        status, why = "not_learning", f"decides nothing: {not_learning[0]}{_more(not_learning[1:])}"
    elif unstable and not e.before_training:
        status, why = "unstable", f"decides nothing: {'; '.join(unstable[:3])}{_more(unstable[3:])}"
    elif untuned:
        why = f"an arm's lr is not tuned: {'; '.join(untuned)}"
    elif e.unmatched:
        why = f"the arms are not matched: {e.unmatched}"
    elif e.fails_because:
        status, why = "claim_fails", e.fails_because
    elif abs(margin) > bound:
        status = "claim_holds" if margin > 0 else "claim_fails"
    else:
        detectable = minimum_detectable_effect(noise, n)
        needed = seeds_needed(margin, noise)
        needs = f"--seeds {needed}" if needed <= MAX_SEEDS else f"over {MAX_SEEDS} seeds: out of reach here"
        why = (f"within the 95% bound; minimum detectable effect {detectable:.3g} at {n} seed{'s' * (n != 1)}, "
               f"this margin needs {needs}")  # fmt: skip
    how = "one seed against the floor" if n < 2 else f"Student-t {t_critical(n - 1):.3g}"
    measured = "" if margin is None else (f"margin {margin:+.4g} {claim.unit}, 95% bound {bound:.3g}, noise "
                                          f"{noise:.3g} (floor {margin_floor(floor, e.runs_per_margin):.3g}; {n} "
                                          f"seed{'s' * (n != 1)}; {how})")  # fmt: skip
    low, high = (None, None) if margin is None else (margin - bound, margin + bound)
    return dataclasses.replace(claim, ours=margin, low=low, high=high, seeds=n, status=status,
                               note=NOTE_PARTS.join((e.statement, measured, why)).rstrip(" |"))  # fmt: skip


def _more(reasons: Sequence[str]) -> str:
    return f" (and {len(reasons)} more run{'s' * (len(reasons) > 1)} or seeds)" if reasons else ""


def sweep_disagreement(sweep: Sequence[float], claims: Sequence[float], noise_floor: float) -> tuple[float, float]:
    """(difference, bound): the claim seeds' mean final loss minus the sweep's mean at the same rate, and the 95%
    bound of that difference of two means (Student-t on their pooled spread, at least `noise_floor`; one value on
    each side: ONE_SEED_Z x the floor)."""
    difference = statistics.fmean(claims) - statistics.fmean(sweep)
    spread, dof = pooled_spread([sweep, claims])
    critical = t_critical(dof) if dof else ONE_SEED_Z
    return difference, critical * max(spread, noise_floor) * math.sqrt(1 / len(sweep) + 1 / len(claims))


def minimum_detectable_effect(noise: float, seeds: int) -> float:
    """The smallest true mean margin that `seeds` seeds of a margin with one-seed noise `noise` decide 80% of the
    time: (the 95% critical value + POWER_Z) x noise / sqrt(seeds)."""
    critical = ONE_SEED_Z if seeds < 2 else max(t_critical(seeds - 1), ONE_SEED_Z)
    return (critical + POWER_Z) * noise / math.sqrt(seeds)


def seeds_needed(margin: float, noise: float) -> int:
    """The fewest seeds whose minimum detectable effect is below |margin| (MAX_SEEDS + 1: none up to MAX_SEEDS)."""
    return next((n for n in range(2, MAX_SEEDS + 1) if minimum_detectable_effect(noise, n) < abs(margin)),
                MAX_SEEDS + 1)  # fmt: skip


def beyond_reach(paper_effect: float, noise_floor: float, seeds: int, runs_per_margin: int = 2) -> str | None:
    """Why a claim whose effect in the paper is `paper_effect` cannot be decided by `seeds` seeds of runs whose
    one-run noise is `noise_floor` (None: it can): the effect is below their minimum detectable effect."""
    detectable = minimum_detectable_effect(margin_floor(noise_floor, runs_per_margin), seeds)
    if abs(paper_effect) >= detectable:
        return None
    return (f"the paper's effect, {abs(paper_effect):.3g}, is below the minimum detectable effect here, "
            f"{detectable:.3g} at {seeds} seed{'s' * (seeds != 1)} (one-run noise {noise_floor:.3g})")  # fmt: skip


def out_of_reach(table: str, row: str, statement: str, unit: str, why: str, runs: Sequence[str] = ()) -> Row:
    """A claim not judged (nor trained for) at this scale, and why."""
    return Row(table=table, row=row, metric="claim", unit=unit, run=",".join(runs), status="out_of_reach",
               note=NOTE_PARTS.join((statement, "", why)))  # fmt: skip


MATCH_TOLERANCE = 0.03  # "at equal parameters": within 3% on the paper's measure


def parameter_match(table: str, arms: dict[str, Any], measure: str) -> tuple[list[Row], str | None]:
    """Rows of each arm's total and non-embedding parameters (`arms`: run name -> model config), and how they are
    not matched for an "at equal parameters" claim (None: they are): more than MATCH_TOLERANCE apart on `measure`
    ("total" or "non_embedding", the paper's), or a tied head on one arm and not on the other."""
    from scaling_axes.modules.flops import formula_params, non_embedding_params

    counts = {arm: {"total": sum(formula_params(c).values()), "non_embedding": non_embedding_params(c)}
              for arm, c in arms.items()}  # fmt: skip
    rows = [Row(table=table, row=arm, metric=f"{kind}_params", ours=n, unit="parameters", run=arm)
            for arm, each in counts.items() for kind, n in each.items()]  # fmt: skip
    measured = {arm: each[measure] for arm, each in counts.items()}
    spread = max(measured.values()) / min(measured.values()) - 1
    tied = {arm: c.tie_embeddings for arm, c in arms.items() if hasattr(c, "tie_embeddings")}
    if spread > MATCH_TOLERANCE:
        listed = ", ".join(f"{arm} {n:,}" for arm, n in measured.items())
        what = measure.replace("_", "-")
        return rows, f"{what} parameters {spread:.1%} apart ({listed}), above {MATCH_TOLERANCE:.0%}"
    if len(set(tied.values())) > 1 and len(tied) == len(arms):
        return rows, f"the head is tied on {', '.join(a for a, t in tied.items() if t)} only"
    return rows, None


def pooled_spread(groups: Sequence[Sequence[float]]) -> tuple[float, int]:
    """(pooled standard deviation, degrees of freedom) of repeated measurements: sqrt(sum (n_i - 1) s_i^2 / sum
    (n_i - 1)) over the groups of two or more (one run's seeds each); (0, 0) without any."""
    repeated = [g for g in groups if len(g) >= 2]
    dof = sum(len(g) - 1 for g in repeated)
    if not dof:
        return 0.0, 0
    return math.sqrt(sum((len(g) - 1) * statistics.variance(g) for g in repeated) / dof), dof


def seeds_of(done: dict | None) -> dict[int, dict]:
    """A finished run's done.json at each seed that finished: {1: the run, k: its repeat at seed k}."""
    return {} if done is None else {1: done, **done.get("seed_runs", {})}


def paired_margins(results: dict[str, dict], names: Sequence[str],
                   margin: Callable[..., float | None]) -> dict[int, float]:  # fmt: skip
    """seed -> `margin(*done)` of the runs `names`, at each seed at which all of them finished (None: no margin
    there, e.g. a diverged run)."""
    per_run = [seeds_of(results.get(name)) for name in names]
    common = sorted(set.intersection(*(set(seeds) for seeds in per_run)))
    return {k: m for k in common if (m := margin(*(seeds[k] for seeds in per_run))) is not None}


def metric_margin(key: str, scale_by: float = 1.0) -> Callable[[dict, dict], float | None]:
    """The margin `scale_by` x (winner's `key` - loser's), None where either lacks it."""

    def margin(winner: dict, loser: dict) -> float | None:
        values = winner.get(key), loser.get(key)
        return None if None in values else scale_by * (values[0] - values[1])

    return margin


def lower_loss(table: str, statement: str, scale: Scale, winner: str, loser: str, results: dict[str, dict],
               unmatched: str | None = None) -> Row:  # fmt: skip
    """The claim that run `winner` ends at a lower validation loss than run `loser` (margin: loser's minus
    winner's, per seed)."""
    margins = paired_margins(results, (winner, loser), metric_margin("val_loss", scale_by=-1.0))
    return judge(table, f"{winner}_vs_{loser}", statement, scale, margins, LOSS_NOISE_FLOOR, "nats/token",
                 runs=(winner, loser), noise_metric="val_loss", unmatched=unmatched)  # fmt: skip


def as_good_as(table: str, statement: str, scale: Scale, candidate: str, reference: str, results: dict[str, dict],
               tolerance: float, key: str = "val_top1", scale_by: float = 100.0, noise_floor: float = TOP1_NOISE_FLOOR,
               unit: str = "points", fails_because: str | None = None,
               unmatched: str | None = None) -> Row:  # fmt: skip
    """The claim that run `candidate` is as good as `reference`: its `key` (x `scale_by`; higher is better) no more
    than `tolerance` below. Margin: the difference plus the tolerance, per seed. `fails_because`: as `judge`'s."""
    difference = metric_margin(key, scale_by)
    margins = paired_margins(results, (candidate, reference),
                             lambda c, r: None if (d := difference(c, r)) is None else d + tolerance)  # fmt: skip
    within = f" (within {tolerance:g} {unit})" if tolerance else ""
    return judge(table, f"{candidate}_vs_{reference}", f"{statement}{within}", scale, margins, noise_floor, unit,
                 fails_because, runs=(candidate, reference), noise_metric=key, noise_scale=abs(scale_by),
                 unmatched=unmatched)  # fmt: skip
