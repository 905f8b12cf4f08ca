"""A paper's claims as result rows, judged from whatever runs finished: `claim_holds`, `claim_fails` or
`insufficient`.

A claim is measured as a signed margin, positive where the paper's claim holds (say the Transformer's loss minus
the RMT's), once per seed at which every run it compares finished (`paired_margins`; further seeds are trained with
`--seeds N`). It is judged only where the data can support it: never at smoke scale (tiny models on a few thousand
tokens prove the pipeline, not a claim). From one seed, a margin beyond twice the stated noise floor of the metric
holds or fails by its sign, and one within it is `insufficient` until a second seed measures the spread; from n
seeds, the mean margin must lie beyond twice its standard error (the seed-to-seed spread / sqrt(n)). The margin,
the noise and the seeds are in the note.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

from scaling_axes.harness.results import Row

# Noise floors for one seed, used until two seeds measure the spread (assumed, not measured here): the final
# validation loss of a small language model, and ImageNet top-1
LOSS_NOISE_FLOOR = 0.02  # nats/token
TOP1_NOISE_FLOOR = 0.3  # points


def judge(
    table: str,
    row: str,
    statement: str,
    scale: str,
    margins: list[float],
    noise_floor: float,
    unit: str = "",
    fails_because: str | None = None,
) -> Row:
    """The claim `statement`, measured by `margins` (one per seed; positive: the claim holds). `fails_because`: a
    part of the claim that the runs already contradict whatever the margin (a cost that is not lower)."""
    margin = statistics.mean(margins) if margins else None
    noise = statistics.stdev(margins) if len(margins) > 1 else noise_floor
    bound = 2 * noise / (len(margins) ** 0.5 if len(margins) > 1 else 1)
    if margin is None:
        status, why = "insufficient", "the runs it needs have not finished"
    elif scale == "smoke":
        status, why = "insufficient", "smoke scale proves the pipeline, not a claim"
    elif fails_because:
        status, why = "claim_fails", fails_because
    elif abs(margin) > bound:
        status, why = ("claim_holds" if margin > 0 else "claim_fails"), ""
    elif len(margins) < 2:
        status, why = "insufficient", "within twice the noise floor from one seed: train a second seed (--seeds 2)"
    else:
        status, why = "insufficient", (f"within twice the standard error of {len(margins)} seeds: train more "
                                       f"(--seeds {len(margins) + 1})")  # fmt: skip
    seeds = f"{len(margins)} seed{'s' * (len(margins) != 1)}"
    measured = "" if margin is None else f"margin {margin:+.4g} {unit}, noise {noise:.3g} ({seeds}); "
    return Row(table=table, row=row, metric="claim", ours=margin, unit=unit, status=status,
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


def lower_loss(table: str, statement: str, scale: str, winner: str, loser: str, results: dict[str, dict]) -> Row:
    """The claim that run `winner` ends at a lower validation loss than run `loser` (margin: loser's minus
    winner's, per seed)."""
    margins = paired_margins(results, (winner, loser), metric_margin("val_loss", scale_by=-1.0))
    return judge(table, f"{winner}_vs_{loser}", statement, scale, margins, LOSS_NOISE_FLOOR, "nats/token")


def as_good_as(table: str, statement: str, scale: str, candidate: str, reference: str, results: dict[str, dict],
               tolerance: float, key: str = "val_top1", scale_by: float = 100.0, noise_floor: float = TOP1_NOISE_FLOOR,
               unit: str = "points") -> Row:  # fmt: skip
    """The claim that run `candidate` is as good as `reference`: its `key` (x `scale_by`; higher is better) no more
    than `tolerance` below. Margin: the difference plus the tolerance, per seed."""
    difference = metric_margin(key, scale_by)
    margins = paired_margins(results, (candidate, reference),
                             lambda c, r: None if (d := difference(c, r)) is None else d + tolerance)  # fmt: skip
    return judge(table, f"{candidate}_vs_{reference}", f"{statement} (within {tolerance:g} {unit})", scale, margins,
                 noise_floor, unit)  # fmt: skip
