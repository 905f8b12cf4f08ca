"""A paper's claims as result rows, judged from whatever runs finished: `claim_holds`, `claim_fails` or
`insufficient`.

A claim is measured as a signed margin, positive where the paper's claim holds (say the Transformer's loss minus
the RMT's). It is judged only where the data can support it: never at smoke scale (tiny models on a few thousand
tokens prove the pipeline, not a claim); a margin within twice the noise (the seed-to-seed spread measured at that
scale, else the stated noise floor of the metric) needs at least two seeds, or it is `insufficient`; a larger
margin holds or fails by its sign. The margin, the noise and the seeds are in the note.
"""

from __future__ import annotations

import statistics

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
    if margin is None:
        status, why = "insufficient", "the runs it needs have not finished"
    elif scale == "smoke":
        status, why = "insufficient", "smoke scale proves the pipeline, not a claim"
    elif fails_because:
        status, why = "claim_fails", fails_because
    elif abs(margin) <= 2 * noise and len(margins) < 2:
        status, why = "insufficient", "within twice the noise from one seed: run a second seed"
    else:
        status, why = ("claim_holds" if margin > 0 else "claim_fails"), ""
    seeds = f"{len(margins)} seed{'s' * (len(margins) != 1)}"
    measured = "" if margin is None else f"margin {margin:+.4g} {unit}, noise {noise:.3g} ({seeds}); "
    return Row(table=table, row=row, metric="claim", ours=margin, unit=unit, status=status,
               note=f"{statement} | {measured}{why}".rstrip("; "))  # fmt: skip


def lower_loss(table: str, statement: str, scale: str, winner: str, loser: str, results: dict[str, dict]) -> Row:
    """The claim that run `winner` ends at a lower validation loss than run `loser` (margin: loser's minus
    winner's, one seed each)."""
    done = [results.get(name, {}).get("val_loss") for name in (winner, loser)]
    margins = [done[1] - done[0]] if None not in done else []
    return judge(table, f"{winner}_vs_{loser}", statement, scale, margins, LOSS_NOISE_FLOOR, "nats/token")
