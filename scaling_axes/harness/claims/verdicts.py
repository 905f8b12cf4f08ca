"""One claim's test and verdict (`judge`, `settle`), and the claims of a lower loss and of as good as."""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping, Sequence

from scaling_axes.harness.claims.margins import (
    LOSS_NOISE_FLOOR,
    TOP1_NOISE_FLOOR,
    PairedNoise,
    metric_margin,
    paired_margins,
    pool_of,
)
from scaling_axes.harness.claims.notes import NOTE_PARTS, measured_note, more
from scaling_axes.harness.results import Evidence, Row
from scaling_axes.harness.scales import Scale
from scaling_axes.significance import (
    ALPHA,
    MAX_SEEDS,
    Significance,
    margin_floor,
    minimum_detectable_effect,
    pooled_spread,
    seeds_needed,
    significance,
    t_two_sided_p,
)


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
    own_values: Sequence[Sequence[float]] | None = None,
    tolerance: float | None = None,
) -> Row:
    """The claim `statement`, measured by `margins` (seed -> margin, or a list from seed 1; positive: it holds), each
    combining `runs_per_margin` runs of a metric whose one-run noise is at least `noise_floor` (`noise_metric`: the
    per-run metric whose measured spread may raise it). `fails_because`: a part of the claim the runs contradict
    whatever the margin. `runs`: the runs it compares. `before_training`: measured on the models before they train.
    `own_values`: a metric no done.json holds, per arm over its seeds (its noise their pooled spread). `tolerance`:
    a claim stated within it, each margin the difference plus it (`as_good_as`)."""
    by_seed = margins if isinstance(margins, Mapping) else dict(enumerate(margins, 1))
    evidence = Evidence(
        statement,
        tuple(by_seed.values()),
        tuple(by_seed),
        noise_floor,
        runs_per_margin,
        fails_because,
        noise_metric,
        noise_scale,
        unmatched,
        before_training,
        None if own_values is None else tuple(map(tuple, own_values)),
        tolerance,
    )
    claim = Row(table=table, row=row, metric="claim", unit=unit, run=",".join(runs), evidence=evidence)
    return settle(claim, scale)


def settle(
    claim: Row,
    scale: Scale,
    measured_noise: dict[str, tuple[float, int]] | None = None,
    not_learning: Sequence[str] = (),
    untuned: Sequence[str] = (),
    unstable: Sequence[str] = (),
    paired: PairedNoise | None = None,
) -> Row:
    """`claim` judged from its evidence: a paired margin against `paired`, its pool's spread (`paired_noise`); an
    unpaired one, or one whose pool measured none, against sqrt(runs per margin) x one run's noise (the assumed floor,
    raised by `measured_noise`: metric -> pooled one-run spread and dof). Never decided on a run `not_learning`,
    `unstable` or `untuned` (why each). A tested claim carries its p as `p`, and as `q` until `experiment.family`."""
    e = claim.evidence
    noise, noise_dof, per_margin, pooled_over = _noise(claim, measured_noise, paired)
    test = significance(e.margins, noise, per_margin, noise_dof) if e.margins else None
    p, decided = _decision(e, test) if test is not None else (None, "insufficient")
    status, why = _verdict(claim, scale, test, decided, noise_dof, not_learning, untuned, unstable)
    tested = test is not None and (not why or why.startswith(WITHIN))  # its verdict is its test's
    margin = statistics.mean(e.margins) if e.margins else None
    low, high = (None, None) if test is None else (margin - test.bound, margin + test.bound)
    measured = measured_note(claim, test, p, margin_floor(noise, per_margin), noise_dof, pooled_over)
    note = NOTE_PARTS.join((e.statement, measured, why)).rstrip(" |")
    evidence = dataclasses.replace(e, tests=test.tests) if test is not None else e
    return dataclasses.replace(
        claim,
        ours=margin,
        low=low,
        high=high,
        seeds=len(e.margins),
        status=status,
        p=p,
        q=p if tested else None,
        note=note,
        evidence=evidence,
    )


def _noise(
    claim: Row, measured: dict[str, tuple[float, int]] | None, paired: PairedNoise | None
) -> tuple[float, float, int, str]:
    """(noise, its degrees of freedom, runs per margin it is multiplied by, what it rests on) of `claim`'s margin."""
    e = claim.evidence
    spread, dof = (paired or {}).get(pool_of(claim), (0.0, 0))
    if e.paired and dof and spread:
        return spread, dof, 1, "paired"
    floor, floor_dof = e.noise_floor, math.inf
    pooled, pooled_dof = (measured or {}).get(e.noise_metric, (0.0, 0))
    own = (0.0, 0) if e.own_values is None else pooled_spread(e.own_values)
    for each, each_dof in ((e.noise_scale * pooled, pooled_dof), own):
        if each_dof and each > floor:  # the measured noise: estimated, on its degrees of freedom
            floor, floor_dof = each, each_dof
    return floor, floor_dof, e.runs_per_margin, "floor"


def _decision(e: Evidence, test: Significance) -> tuple[float, str]:
    """(p, the verdict its test reaches at ALPHA, before the family's control). A difference: two-sided. Within a
    tolerance: two one-sided tests that the difference lies inside it where the mean does, else the test that it
    lies beyond (two-sided, on the side it lies)."""
    margin = statistics.fmean(e.margins)
    if e.tolerance is None:
        return test.p, ("claim_holds" if margin > 0 else "claim_fails") if test.p < ALPHA else "insufficient"
    difference = margin - e.tolerance
    if abs(difference) < e.tolerance:
        p = test.equivalence_p(difference, e.tolerance)
        return p, "claim_holds" if p < ALPHA else "insufficient"
    beyond = abs(difference) - e.tolerance
    p = max(t_two_sided_p(beyond / se, df) if se else float(beyond == 0) for se, df in test.tests)
    return p, "claim_fails" if p < ALPHA else "insufficient"


WITHIN = "within the 95% bound"


def _verdict(
    claim: Row,
    scale: Scale,
    test: Significance | None,
    decided: str,
    noise_dof: float,
    not_learning: Sequence[str],
    untuned: Sequence[str],
    unstable: Sequence[str],
) -> tuple[str, str]:
    """(status, why it is not decided: empty where it is) of `claim` (see `settle`)."""
    e, n = claim.evidence, len(claim.evidence.margins)
    if test is None:
        return "insufficient", "the runs it needs have not finished: no difference can be excluded"
    if not scale.judges_claims:
        return "insufficient", f"{scale} scale proves the pipeline, not a claim"
    if not_learning:
        return "not_learning", f"decides nothing: {not_learning[0]}{more(not_learning[1:])}"
    if unstable and not e.before_training:
        return "unstable", f"decides nothing: {'; '.join(unstable[:3])}{more(unstable[3:])}"
    if untuned:
        return "insufficient", f"an arm's lr is not tuned: {'; '.join(untuned)}"
    if e.unmatched:
        return "unmatched", f"decides nothing: the arms are not matched on what the claim is stated at: {e.unmatched}"
    if e.own_values is not None and not pooled_spread(e.own_values)[1]:
        return "insufficient", (
            "its metric's noise is measured over its arms' seeds, and one seed each measures "
            "none: another metric's floor decides nothing"
        )
    if e.fails_because:
        return "claim_fails", e.fails_because
    if decided != "insufficient":
        return decided, ""
    margin = statistics.fmean(e.margins) - (e.tolerance or 0.0)
    detectable = minimum_detectable_effect(test.noise, n, noise_dof)
    needed = seeds_needed(margin, test.noise, noise_dof)
    needs = f"--seeds {needed}" if needed <= MAX_SEEDS else f"over {MAX_SEEDS} seeds: out of reach here"
    return "insufficient", (
        f"{WITHIN}; minimum detectable effect {detectable:.3g} at {n} seed{'s' * (n != 1)} "
        f"(80% power), this margin needs {needs}"
    )


def lower_loss(
    table: str,
    statement: str,
    scale: Scale,
    winner: str,
    loser: str,
    results: dict[str, dict],
    unmatched: str | None = None,
) -> Row:
    """The claim that run `winner` ends at a lower validation loss than run `loser` (margin: loser's minus
    winner's, per seed)."""
    margins = paired_margins(results, (winner, loser), metric_margin("val_loss", scale_by=-1.0))
    return judge(
        table,
        f"{winner}_vs_{loser}",
        statement,
        scale,
        margins,
        LOSS_NOISE_FLOOR,
        "nats/token",
        runs=(winner, loser),
        noise_metric="val_loss",
        unmatched=unmatched,
    )


def as_good_as(
    table: str,
    statement: str,
    scale: Scale,
    candidate: str,
    reference: str,
    results: dict[str, dict],
    tolerance: float,
    key: str = "val_top1",
    scale_by: float = 100.0,
    noise_floor: float = TOP1_NOISE_FLOOR,
    unit: str = "points",
    fails_because: str | None = None,
    unmatched: str | None = None,
) -> Row:
    """The claim that run `candidate` is as good as `reference`: its `key` (x `scale_by`; higher is better) within
    `tolerance` of it, tested as an equivalence (two one-sided tests; `settle`). Margin: the difference plus the
    tolerance, per seed. `fails_because`: as `judge`'s."""
    difference = metric_margin(key, scale_by)
    margins = paired_margins(
        results, (candidate, reference), lambda c, r: None if (d := difference(c, r)) is None else d + tolerance
    )
    within = f" (within {tolerance:g} {unit})" if tolerance else ""
    return judge(
        table,
        f"{candidate}_vs_{reference}",
        f"{statement}{within}",
        scale,
        margins,
        noise_floor,
        unit,
        fails_because,
        runs=(candidate, reference),
        noise_metric=key,
        noise_scale=abs(scale_by),
        unmatched=unmatched,
        tolerance=tolerance if tolerance else None,
    )
