"""Whether the runs a claim compares (its arms) can decide it, as far as their run directories tell: each at a tuned
learning rate that its claim seeds confirm (`untuned`), all matched on what the claim holds equal
(`parameter_match`); each swept arm's row shows its sweep beside what its claim seeds reached there. Whether each
learned and trained stably the scale's judge reads from the per-seed file (`claims.judge`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from scaling_axes.harness.claims.margins import LOSS_NOISE_FLOOR, seeds_of
from scaling_axes.harness.results import Row
from scaling_axes.harness.sweeps import ONE_SEED_Z, Choice
from scaling_axes.modules.flops import formula_params, non_embedding_params
from scaling_axes.significance import pooled_spread, t_critical


def untuned(claim: Row, results: dict[str, dict]) -> list[str]:
    """Why the runs `claim` compares are not at a tuned lr: a sweep that ended at an edge it could not pass, a
    carried lr whose transfer rule a checked size of the family refutes, or claim seeds that reach a worse loss at
    the chosen rate than the sweep did, beyond the 95% bound (`sweep_check`)."""
    reasons = []
    for name in claim.run.split(","):
        done = results.get(name, {})
        if (choice := done.get("tuning")) is not None and choice.at_edge:
            reasons.append(f"{name}'s sweep ended at {choice.lr:g}, an edge")
        if checked := done.get("transfer_refuted"):
            reasons.append(
                f"{name}'s lr was carried from {done['tuning_anchor']}, and at {checked} the carried lr "
                "is beaten by a grid neighbour beyond one draw's noise"
            )
        if (fell := done.get("stable_fallback")) and fell["at_edge"]:
            reasons.append(
                f"{name}'s claim seeds fell back to {fell['lr']:g}, the lowest rate its fallback could "
                "try: a stable optimum below it is not excluded"
            )
        if (check := sweep_check(done)) is not None and check[0] > check[1]:
            reasons.append(
                f"{name}'s claim seeds end {check[0]:+.3f} nats/token from its sweep's estimate at "
                f"{settled_lr(done):g}, beyond the 95% bound {check[1]:.3f}: the sweep's choice is not "
                "confirmed"
            )
    return reasons


def settled_lr(done: dict) -> float:
    """The rate a swept run's claim seeds trained at: its sweep's choice, or the fallback below it."""
    return done["stable_fallback"]["lr"] if "stable_fallback" in done else done["tuning"].lr


def sweep_check(done: dict) -> tuple[float, float] | None:
    """(difference, 95% bound) of a run swept on its own: its claim seeds' mean final loss minus its sweep's mean at
    the rate they trained at (positive: the claim seeds are worse); None for a run without its own finished sweep
    there."""
    choice = done.get("tuning")
    if choice is None or done.get("tuning_anchor") or choice.lr is None:
        return None
    if not (sweep := choice.draws_at(settled_lr(done))):
        return None
    claims = [each["val_loss"] for each in seeds_of(done).values() if isinstance(each.get("val_loss"), (int, float))]
    return sweep_disagreement(sweep, claims, LOSS_NOISE_FLOOR) if claims else None


def sweep_disagreement(sweep: Sequence[float], claims: Sequence[float], noise_floor: float) -> tuple[float, float]:
    """(difference, bound): the claim seeds' mean final loss minus the sweep's mean at the same rate, and the 95%
    bound of that difference of two means (Student-t on their pooled spread, at least `noise_floor`; one value on
    each side: ONE_SEED_Z x the floor)."""
    difference = statistics.fmean(claims) - statistics.fmean(sweep)
    spread, dof = pooled_spread([sweep, claims])
    critical = t_critical(dof) if dof else ONE_SEED_Z
    return difference, critical * max(spread, noise_floor) * math.sqrt(1 / len(sweep) + 1 / len(claims))


def tuning_rows(results: dict[str, dict]) -> list[Row]:
    """Each swept run's chosen lr and the sweep behind it; for a run swept on its own, its claim seeds' mean beside
    the sweep's estimate at the chosen rate (`differs` where they are worse beyond the 95% bound)."""
    rows = []
    for name, done in results.items():
        if (choice := (done or {}).get("tuning")) is None:
            continue
        rule = done.get("tuning_rule", "")
        rows.append(
            Row(
                table="lr_sweep",
                row=name,
                metric="chosen_lr",
                ours=choice.lr,
                run=name,
                status="measured",
                note=f"{rule}{'; ' if rule else ''}{choice.describe()}",
            )
        )
        if fell := done.get("stable_fallback"):
            rows.append(_fallback_row(name, choice, fell))
        if (check := sweep_check(done)) is not None:
            difference, bound = check
            lr = settled_lr(done)
            sweep, claims = statistics.fmean(choice.draws_at(lr)), len(seeds_of(done))
            rows.append(
                Row(
                    table="lr_sweep",
                    row=name,
                    metric="claim_seeds_minus_sweep",
                    ours=difference,
                    low=difference - bound,
                    high=difference + bound,
                    seeds=claims,
                    unit="nats/token",
                    run=name,
                    status="differs" if difference > bound else "match",
                    note=f"the sweep's mean at {lr:g} over {len(choice.draws_at(lr))} draws "
                    f"{sweep:.4f}, the claim seeds' mean there {sweep + difference:.4f}",
                )
            )
    return rows


def _fallback_row(name: str, choice: Choice, fell: dict) -> Row:
    """The rate a swept run's claim seeds settled at below its sweep's choice, and why they left each rate above."""
    left = "; ".join(f"at {lr:g}: {' / '.join(why)}" for lr, why in sorted(fell["unstable_at"].items(), reverse=True))
    losses = choice.losses.get(fell["lr"])
    mean = f" (the sweep's mean there {losses:.4f})" if losses is not None else ""
    return Row(
        table="lr_sweep",
        row=name,
        metric="stable_fallback_lr",
        ours=fell["lr"],
        run=name,
        status="measured",
        note=f"the claim seeds trained unstably above it ({left}); retrained at "
        f"{fell['lr']:g}, the best rate below whose sweep draws were all stable{mean}",
    )


MATCH_TOLERANCE = 0.03  # "at equal parameters": within 3% on the paper's measure


def parameter_match(table: str, arms: dict[str, Any], measure: str) -> tuple[list[Row], str | None]:
    """Rows of each arm's total and non-embedding parameters (`arms`: run name -> model config), and how they are
    not matched for an "at equal parameters" claim (None: they are): more than MATCH_TOLERANCE apart on `measure`
    ("total" or "non_embedding", the paper's), or a tied head on one arm and not on the other."""
    counts = {
        arm: {"total": sum(formula_params(c).values()), "non_embedding": non_embedding_params(c)}
        for arm, c in arms.items()
    }
    rows = [
        Row(table=table, row=arm, metric=f"{kind}_params", ours=n, unit="parameters", run=arm)
        for arm, each in counts.items()
        for kind, n in each.items()
    ]
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
