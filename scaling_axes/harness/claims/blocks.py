"""What keeps a claim row from its test at a plan's seeds, read from the per-seed file: what its runs alone decide
(`held`), a missing seed, a run trained under another plan, an arm that trained unstably (a spike, a validation rise,
an outlier among its seeds) or did not clearly learn, each at the thresholds given (`stability.Thresholds`: the
sensitivity pass moves them)."""

from __future__ import annotations

import math

from scaling_axes.harness.claims.observed import Experiment, Observed
from scaling_axes.harness.claims.plan import AnalysisPlan
from scaling_axes.harness.stability import Thresholds, outliers

PLAN_CHANGED = "plan changed after the data"


def blocked(row: Observed, ex: Experiment, seeds: list[int], plan: AnalysisPlan | None, t: Thresholds) -> tuple:
    """(status, why) that keeps `row` from its test at `seeds` (empty status: nothing does): its runs' own verdict,
    a missing seed, a run trained under another plan, an arm that trained unstably or did not learn."""
    if row.held:
        return row.held, row.held_why
    if missing := [k for k in seeds if k not in row.margins]:
        return "insufficient", f"no margin at seed {missing[0]}: a run is missing (no seed is replaced or added)"
    for arm in row.runs:
        measures = {k: ex.runs.get(arm, {}).get(k, {}) for k in seeds}
        recorded = {d for k in seeds for d in ex.digests.get(arm, {}).get(k, "").split(";")}  # a resume's: each
        if plan is not None and (other := sorted(recorded - {plan.digest})):
            return "plan_changed", f"{PLAN_CHANGED}: {arm} trained under plan {other[0] or '(none)'}, now {plan.digest}"
        if vetoes(plan, t) and not row.before_training and (why := unstable(arm, measures, t)):
            return "unstable", f"decides nothing: {why}"
        if why := not_learning(arm, measures, t):
            return "not_learning", f"decides nothing: {why}"
    return "", ""


def vetoes(plan: AnalysisPlan | None, t: Thresholds) -> bool:
    """Whether an unstable arm keeps a claim from its verdict: as `t` says where it says, else as the plan's rules
    (a plan before issue 83 vetoes; a plan that keeps every seed reports the filter as a sensitivity)."""
    return t.veto if t.veto is not None else plan is None or plan.rules.stability_veto


def unstable(arm: str, by_seed: dict[int, dict[str, float]], t: Thresholds) -> str:
    """Why an arm trained unstably at one of its seeds (a spike, a validation rise, an outlier), or ''."""
    for k, values in by_seed.items():
        if values.get("diverged"):
            return f"{arm} seed {k} diverged (it enters at ln(vocabulary), {values.get('val_loss', math.nan):.3f})"
        if values.get("spike_nats", 0) > t.spike_nats:
            return (
                f"{arm} seed {k} spiked {values['spike_nats']:.2f} nats above its moving average (> {t.spike_nats:g})"
            )
        if values.get("val_rise_nats", 0) > t.val_rise_nats:
            return f"{arm} seed {k}'s validation loss rose {values['val_rise_nats']:.2f} nats (> {t.val_rise_nats:g})"
    finals = {k: v["val_loss"] for k, v in by_seed.items() if "val_loss" in v}
    found = outliers(finals, t.outlier_nats, t.outlier_z)
    return f"{arm}: {next(iter(found.values()))}" if found else ""


def not_learning(arm: str, by_seed: dict[int, dict[str, float]], t: Thresholds) -> str:
    """Why an arm did not clearly learn at one of its seeds (a language model not `learned_nats` below its data's
    unigram floor, a classifier not `learned_points` of top-1 above chance); a seed that diverged is the arm's
    instability, not a design that cannot learn."""
    for k, values in by_seed.items():
        if values.get("diverged"):
            continue
        if "chance_top1" in values and 100 * values.get("val_top1", 0) < values["chance_top1"] + t.learned_points:
            return (
                f"{arm} seed {k} ends at {100 * values.get('val_top1', 0):.1f}% top-1, not {t.learned_points:g} "
                f"points above chance ({values['chance_top1']:.3g}%)"
            )
        if "unigram_floor" in values and values.get("val_loss", 0) > values["unigram_floor"] - t.learned_nats:
            return (
                f"{arm} seed {k} ends at {values['val_loss']:.3f} nats/token, not {t.learned_nats:g} below the "
                f"unigram floor {values['unigram_floor']:.3f}"
            )
    return ""
