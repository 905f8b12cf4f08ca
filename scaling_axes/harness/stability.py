"""Whether a finished run can carry a claim: it trained stably (no loss spike, caught while it trains by
`training.callbacks.LossSpikes`; no rise of its validation loss; no seed whose final loss is an outlier among the
run's seeds), and it clearly learned (`not_learned`). An unstable run decides no claim and is never a sweep's choice.

A spike is a step's training loss far above the moving average of the steps before it. The baseline moves with the
curve on purpose: measured against the running minimum of that average (as before), a stable run's hard batch of
the data order rose 0.75-0.78 nats where a grown stage's restart had lifted its curve 0.3 above its start (Fig. 3's
1.4B, step 131 of the cpu call of 53eecb0), as far as spikes of runs past the edge of stability rose (0.81-2.67).
Against the moving average that batch rises 0.58 and the spikes 0.96-4.1. A slower rise is the validation curve's to
catch. The thresholds come from per-step curves (issue 46; the README lists them).
"""

from __future__ import annotations

import dataclasses
import math
import statistics

from scaling_axes.datamodules.floors import unigram_floor
from scaling_axes.harness.runs import Run

SMOOTHING = 0.9  # the training loss's exponential moving average (about the last ten steps): a step's baseline
SPIKE_NATS = 0.8  # a step loss this far above the moving average before it is a spike
VAL_RISE_NATS = 0.1  # a validation loss this far above its own running minimum: the model got worse, not noisier
OUTLIER_NATS = 0.25  # a seed's final loss this far from its seeds' median, and
OUTLIER_Z = 3.5  # this many robust deviations (1.4826 x the median absolute deviation) from it, is an outlier
# What "clearly learned" means: a language model at least LEARNED_NATS below its data's unigram floor (a bigram
# statistic alone gains about a nat on these corpora; sampling noise is a few hundredths), a classifier at least
# LEARNED_POINTS of top-1 above chance (guessing's accuracy, 1 / classes)
LEARNED_NATS = 0.5
LEARNED_POINTS = 25.0


@dataclasses.dataclass(frozen=True)
class Thresholds:
    """The thresholds a claim's arms pass through before its test, as the scale's judge applies them to the per-seed
    files (`claims.judge`); the sensitivity pass moves each (`experiment.sensitivity`)."""

    spike_nats: float = SPIKE_NATS
    val_rise_nats: float = VAL_RISE_NATS
    outlier_nats: float = OUTLIER_NATS
    outlier_z: float = OUTLIER_Z
    learned_nats: float = LEARNED_NATS
    learned_points: float = LEARNED_POINTS
    tolerance_scale: float = 1.0  # each claim's tolerance times this
    veto: bool | None = None  # whether an unstable arm keeps its claims from a verdict (None: as the plan's rules say)


STABILITY_OFF = Thresholds(spike_nats=math.inf, val_rise_nats=math.inf, outlier_nats=math.inf)  # every seed kept
STABILITY_FILTER = Thresholds(veto=True)  # an unstable arm's claims set aside, whatever the plan's rules


def validation_rise(curve: list[tuple[int, float]]) -> tuple[float, int | None]:
    """(nats, step): the largest rise of a validation curve above its own running minimum."""
    rise, at, low = 0.0, None, math.inf
    for step, loss in curve:
        if loss - low > rise:
            rise, at = loss - low, step
        low = min(low, loss)
    return rise, at


def stability_measures(done: dict) -> dict[str, float]:
    """What the thresholds below cut, as measured on a finished run: its largest training-loss excess over the
    moving average (where recorded), its validation loss's largest rise (`experiment.sensitivity` moves them) and
    whether it diverged (1: its losses are ln(vocabulary), `training.rundir.write_diverged`)."""
    spike, curve = done.get("train_loss_spike"), done.get("val_loss_curve")
    measures = {"spike_nats": float(spike["nats"])} if isinstance(spike, dict) else {}
    if done.get("diverged"):
        measures["diverged"] = 1.0
    if curve:
        measures["val_rise_nats"] = validation_rise([(step, loss) for step, loss in curve if step > 0])[0]
    return measures


def instability(done: dict) -> str | None:
    """Why a finished run (its done.json) trained unstably, or None: it diverged, a training-loss spike or a
    validation rise."""
    if done.get("diverged"):
        return f"{done.get('run', 'the run')} diverged: {done['diverged']}"
    spike = done.get("train_loss_spike")
    if isinstance(spike, dict) and spike.get("nats", 0) > SPIKE_NATS:
        return (
            f"{done.get('run', 'the run')}'s training loss spiked at step {spike['step']} to {spike['loss']:.3f}, "
            f"{spike['nats']:.2f} nats above the moving average before it (threshold {SPIKE_NATS:g})"
        )
    # a validation at step 0 is the model before this run trained: a grown stage's is the model it grew from (the
    # growth's measure), which the stage's restart to its peak rate rises above by design, not by instability
    rise, at = validation_rise([(step, loss) for step, loss in done.get("val_loss_curve") or [] if step > 0])
    if rise > VAL_RISE_NATS:
        return (
            f"{done.get('run', 'the run')}'s validation loss rose {rise:.2f} nats above its running minimum at "
            f"step {at} (threshold {VAL_RISE_NATS:g})"
        )
    return None


def outliers(finals: dict[int, float], nats: float = OUTLIER_NATS, z: float = OUTLIER_Z) -> dict[int, str]:
    """seed -> why, for each seed whose final loss (`finals`, seed -> value, three seeds or more) lies both
    OUTLIER_NATS and OUTLIER_Z robust deviations from the seeds' median."""
    if len(finals) < 3:
        return {}
    median = statistics.median(finals.values())
    spread = 1.4826 * statistics.median(abs(value - median) for value in finals.values())
    return {
        seed: (
            f"seed {seed}'s final loss {value:.3f} is an outlier among its {len(finals)} seeds (median "
            f"{median:.3f}, {abs(value - median):.2f} nats away)"
        )
        for seed, value in finals.items()
        if abs(value - median) > nats and abs(value - median) > z * spread
    }


def unstable_seeds(by_seed: dict[int, dict]) -> dict[int, str]:
    """seed -> why, for each seed of a finished run (seed -> its done.json) that trained unstably."""
    finals = {k: each["val_loss"] for k, each in by_seed.items() if isinstance(each.get("val_loss"), (int, float))}
    found = {k: why for k, each in by_seed.items() if (why := instability(each))}
    name = next((each.get("run") for each in by_seed.values()), "the run")
    return {**{k: f"{name}: {why}" for k, why in outliers(finals).items() if k not in found}, **found}


def _text_learned(run: Run, done: dict) -> str | None:
    try:
        floor = unigram_floor(run.corpus, run.tokenizer)
    except FileNotFoundError:
        return None  # not prepared here: nothing to compare with (the row keeps its judgement)
    loss = done.get("val_loss")
    if loss is None or loss > floor - LEARNED_NATS:
        return (
            f"{done.get('run', run.name)} ends at {loss if loss is None else f'{loss:.3f}'} nats/token, not "
            f"{LEARNED_NATS:g} below the unigram floor {floor:.3f} of {run.corpus}"
        )
    return None


def _image_learned(run: Run, done: dict) -> str | None:
    chance, top1 = 100.0 / run.config.num_classes, done.get("val_top1")
    if top1 is None or 100 * top1 < chance + LEARNED_POINTS:
        return (
            f"{done.get('run', run.name)} ends at {top1 if top1 is None else f'{100 * top1:.1f}'}% top-1, not "
            f"{LEARNED_POINTS:g} points above chance ({chance:.3g}%)"
        )
    return None


def not_learned(run: Run, done: dict) -> str | None:
    """None where the finished `run` (its record `done`) clearly learned, else why not."""
    return _image_learned(run, done) if run.classifies_images else _text_learned(run, done)
