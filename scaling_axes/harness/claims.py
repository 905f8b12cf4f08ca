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

import math
import statistics
from collections.abc import Callable, Sequence

from scaling_axes.harness.results import Row
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


def judge(
    table: str,
    row: str,
    statement: str,
    scale: Scale,
    margins: list[float],
    noise_floor: float,
    unit: str = "",
    fails_because: str | None = None,
    runs: Sequence[str] = (),
    runs_per_margin: int = 2,
) -> Row:
    """The claim `statement`, measured by `margins` (one per seed; positive: the claim holds), each combining
    `runs_per_margin` runs of a metric whose one-run noise is `noise_floor`. `fails_because`: a part of the claim
    that the runs already contradict whatever the margin (a cost that is not lower). `runs`: the runs it compares
    (the row's `run`, comma-separated), whose data and staleness `data_caveats` reads."""
    margin = statistics.mean(margins) if margins else None
    bound, noise = significance_bound(margins, noise_floor, runs_per_margin)
    n = len(margins)
    if margin is None:
        status, why = "insufficient", "the runs it needs have not finished"
    elif not scale.judges_claims:
        status, why = "insufficient", f"{scale} scale proves the pipeline, not a claim"
    elif fails_because:
        status, why = "claim_fails", fails_because
    elif abs(margin) > bound:
        status, why = ("claim_holds" if margin > 0 else "claim_fails"), ""
    elif n < 2:
        status, why = (
            "insufficient",
            f"within {ONE_SEED_Z:g} x the margin's noise floor from one seed: train more seeds (--seeds 3)",
        )
    else:
        status, why = "insufficient", f"within the 95% bound of {n} seeds: train more (--seeds {n + 1})"
    how = (
        "one seed against the floor"
        if n < 2
        else f"Student-t {t_critical(n - 1):.3g}, floor {margin_floor(noise_floor, runs_per_margin):.3g}"
    )
    measured = "" if margin is None else (f"margin {margin:+.4g} {unit}, bound {bound:.3g}, noise {noise:.3g} "
                                          f"({n} seed{'s' * (n != 1)}; {how}); ")  # fmt: skip
    return Row(table=table, row=row, metric="claim", ours=margin, unit=unit, status=status, run=",".join(runs),
               note=f"{statement} | {measured}{why}".rstrip("; "))  # fmt: skip


def seeds_of(done: dict | None) -> dict[int, dict]:
    """A finished run's done.json at each seed that finished: {1: the run, k: its repeat at seed k}."""
    return {} if done is None else {1: done, **done.get("seed_runs", {})}


def paired_margins(results: dict[str, dict], names: Sequence[str], margin: Callable[..., float | None]) -> list[float]:
    """`margin(*done)` of the runs `names`, at each seed at which all of them finished (None: no margin there, e.g.
    a diverged run)."""
    per_run = [seeds_of(results.get(name)) for name in names]
    common = sorted(set.intersection(*(set(seeds) for seeds in per_run)))
    return [m for k in common if (m := margin(*(seeds[k] for seeds in per_run))) is not None]


def metric_margin(key: str, scale_by: float = 1.0) -> Callable[[dict, dict], float | None]:
    """The margin `scale_by` x (winner's `key` - loser's), None where either lacks it."""

    def margin(winner: dict, loser: dict) -> float | None:
        values = winner.get(key), loser.get(key)
        return None if None in values else scale_by * (values[0] - values[1])

    return margin


def lower_loss(table: str, statement: str, scale: Scale, winner: str, loser: str, results: dict[str, dict]) -> Row:
    """The claim that run `winner` ends at a lower validation loss than run `loser` (margin: loser's minus
    winner's, per seed)."""
    margins = paired_margins(results, (winner, loser), metric_margin("val_loss", scale_by=-1.0))
    return judge(
        table, f"{winner}_vs_{loser}", statement, scale, margins, LOSS_NOISE_FLOOR, "nats/token", runs=(winner, loser)
    )


def as_good_as(table: str, statement: str, scale: Scale, candidate: str, reference: str, results: dict[str, dict],
               tolerance: float, key: str = "val_top1", scale_by: float = 100.0, noise_floor: float = TOP1_NOISE_FLOOR,
               unit: str = "points", fails_because: str | None = None) -> Row:  # fmt: skip
    """The claim that run `candidate` is as good as `reference`: its `key` (x `scale_by`; higher is better) no more
    than `tolerance` below. Margin: the difference plus the tolerance, per seed. `fails_because`: as `judge`'s."""
    difference = metric_margin(key, scale_by)
    margins = paired_margins(results, (candidate, reference),
                             lambda c, r: None if (d := difference(c, r)) is None else d + tolerance)  # fmt: skip
    within = f" (within {tolerance:g} {unit})" if tolerance else ""
    return judge(table, f"{candidate}_vs_{reference}", f"{statement}{within}", scale, margins, noise_floor, unit,
                 fails_because, runs=(candidate, reference))  # fmt: skip
