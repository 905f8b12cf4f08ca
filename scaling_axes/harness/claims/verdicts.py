"""A claim row built from the runs it compares (`judge`), and the two claims most experiments state: a lower loss
(`lower_loss`) and a value as good as another's (`as_good_as`). A row carries its margins per seed and, where its
margin is a contrast of its arms' values, the contrast and the values; the scale's plan decides it later
(`claims.judge`), from the per-seed file."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from scaling_axes.harness.claims.margins import arm_values, contrast_margins
from scaling_axes.harness.claims.notes import NOTE_PARTS
from scaling_axes.harness.results import Evidence, Row
from scaling_axes.harness.scales import Scale


def judge(
    table: str,
    row: str,
    statement: str,
    scale: Scale,
    margins: Mapping[int, float] | Sequence[float],
    unit: str = "",
    runs: Sequence[str] = (),
    fails_because: str | None = None,
    unmatched: str | None = None,
    before_training: bool = False,
    contrast: Mapping[str, float] | None = None,
    measure: str = "",
    values: Mapping[str, Mapping[int, float]] | None = None,
) -> Row:
    """The claim `statement`, measured by `margins` (seed -> margin, or a list from seed 1; positive: it holds).
    `runs`: the runs it compares. `fails_because`: a part of the claim the runs contradict whatever the margin.
    `unmatched`: how its arms are not matched on what it is stated at. `before_training`: measured on the models
    before they train. `contrast`, `measure`, `values`: where the margin is sum c_a x value_a of `measure`, its
    coefficients and the arms' values per seed (`contrast_claim`). Its numbers and verdict are the plan's
    (`claims.judge`); until then it is `insufficient`, or what its arms alone decide (unmatched, a part failed)."""
    by_seed = margins if isinstance(margins, Mapping) else dict(enumerate(margins, 1))
    evidence = Evidence(
        statement,
        tuple(by_seed.values()),
        tuple(by_seed),
        dict(contrast or {}),
        measure,
        {arm: dict(v) for arm, v in (values or {}).items()},
        fails_because,
        unmatched,
        before_training,
    )
    held = (
        ("unmatched", f"decides nothing: the arms are not matched on what the claim is stated at: {unmatched}")
        if unmatched
        else ("claim_fails", fails_because)
        if fails_because
        else ("insufficient", "")
    )
    return Row(
        table=table,
        row=row,
        metric="claim",
        unit=unit,
        run=",".join(runs),
        seeds=len(by_seed),
        status=held[0],
        note=NOTE_PARTS.join(filter(None, (statement, held[1]))),
        evidence=evidence,
    )


def contrast_claim(
    table: str,
    row: str,
    statement: str,
    scale: Scale,
    results: dict[str, dict],
    contrast: Mapping[str, float],
    measure: str,
    value: Callable[[str, dict], float | None],
    unit: str = "nats/token",
    **options,
) -> Row:
    """A claim whose margin at each seed is sum over arms of coefficient x `value(arm, done)` (the arms' `measure`):
    the values and the contrast committed with it, for the experiment's arm x seed model."""
    values = arm_values(results, list(contrast), value)
    margins = contrast_margins(values, contrast)
    return judge(
        table,
        row,
        statement,
        scale,
        margins,
        unit,
        options.pop("runs", tuple(contrast)),
        contrast=contrast,
        measure=measure,
        values=values,
        **options,
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
    return contrast_claim(
        table,
        f"{winner}_vs_{loser}",
        statement,
        scale,
        results,
        {loser: 1.0, winner: -1.0},
        "val_loss",
        lambda _, done: done.get("val_loss"),
        runs=(winner, loser),
        unmatched=unmatched,
    )


def as_good_as(
    table: str,
    statement: str,
    scale: Scale,
    candidate: str,
    reference: str,
    results: dict[str, dict],
    key: str = "val_top1",
    scale_by: float = 100.0,
    unit: str = "points",
    fails_because: str | None = None,
    unmatched: str | None = None,
) -> Row:
    """The claim that run `candidate` is as good as `reference`: its `key` (x `scale_by`; higher is better) minus
    the reference's, per seed; the plan says how far below zero it may lie (its tolerance: non-inferiority or
    equivalence)."""
    return contrast_claim(
        table,
        f"{candidate}_vs_{reference}",
        statement,
        scale,
        results,
        {candidate: scale_by, reference: -scale_by},
        key,
        lambda _, done: done.get(key),
        unit,
        runs=(candidate, reference),
        fails_because=fails_because,
        unmatched=unmatched,
    )
