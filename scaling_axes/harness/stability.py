"""Whether a run trained stably: loss spikes caught while it trains, rises of its validation loss, and seeds whose
final loss is an outlier among the run's seeds. An unstable run decides no claim and is never a sweep's choice.

A spike is a step's training loss far above the moving average of the steps before it. The baseline moves with the
curve on purpose: measured against the running minimum of that average (as before), a stable run's hard batch of
the data order rose 0.75-0.78 nats where a grown stage's restart had lifted its curve 0.3 above its start (Fig. 3's
1.4B, step 131 of the cpu call of 53eecb0), as far as spikes of runs past the edge of stability rose (0.81-2.67).
Against the moving average that batch rises 0.58 and the spikes 0.96-4.1. A slower rise is the validation curve's to
catch. The thresholds come from per-step curves (issue 46; the README lists them).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

import lightning as L

SMOOTHING = 0.9  # the training loss's exponential moving average (about the last ten steps): a step's baseline
SPIKE_NATS = 0.8  # a step loss this far above the moving average before it is a spike
VAL_RISE_NATS = 0.1  # a validation loss this far above its own running minimum: the model got worse, not noisier
OUTLIER_NATS = 0.25  # a seed's final loss this far from its seeds' median, and
OUTLIER_Z = 3.5  # this many robust deviations (1.4826 x the median absolute deviation) from it, is an outlier


class LossSpikes(L.Callback):
    """Tracks each optimizer step's training loss (the mean over its micro-batches, on rank zero) against the
    exponential moving average of the steps before it, and keeps the largest excess: `record()` is what done.json
    keeps. Its state is checkpointed, so a resumed run records what the uninterrupted one does."""

    def __init__(self) -> None:
        self.state: dict[str, Any] = {"ema": None, "spike": None, "step_loss": 0.0}

    def on_train_batch_end(self, trainer: L.Trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        state = self.state
        state["step_loss"] += float(loss)  # Lightning divides each micro-batch's loss by the accumulation
        if (batch_idx + 1) % trainer.accumulate_grad_batches:
            return
        value, state["step_loss"] = state["step_loss"], 0.0
        if not math.isfinite(value):
            return  # a non-finite loss stops the run itself
        ema, spike = state["ema"], state["spike"]
        if ema is not None and (spike is None or value - ema > spike["nats"]):
            state["spike"] = {"nats": value - ema, "step": trainer.global_step, "loss": value}
        state["ema"] = value if ema is None else SMOOTHING * ema + (1 - SMOOTHING) * value

    def state_dict(self) -> dict[str, Any]:
        return dict(self.state)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.state = dict(state_dict)

    def record(self) -> dict[str, Any]:
        """done.json's record: the largest excess of a step's training loss over the moving average before it."""
        return {"train_loss_spike": self.state["spike"]}


def validation_rise(curve: list[tuple[int, float]]) -> tuple[float, int | None]:
    """(nats, step): the largest rise of a validation curve above its own running minimum."""
    rise, at, low = 0.0, None, math.inf
    for step, loss in curve:
        if loss - low > rise:
            rise, at = loss - low, step
        low = min(low, loss)
    return rise, at


def instability(done: dict) -> str | None:
    """Why a finished run (its done.json) trained unstably, or None: a training-loss spike or a validation rise."""
    spike = done.get("train_loss_spike")
    if isinstance(spike, dict) and spike.get("nats", 0) > SPIKE_NATS:
        return (f"{done.get('run', 'the run')}'s training loss spiked at step {spike['step']} to {spike['loss']:.3f}, "
                f"{spike['nats']:.2f} nats above the moving average before it (threshold {SPIKE_NATS:g})")  # fmt: skip
    # a validation at step 0 is the model before this run trained: a grown stage's is the model it grew from (the
    # growth's measure), which the stage's restart to its peak rate rises above by design, not by instability
    rise, at = validation_rise([(step, loss) for step, loss in done.get("val_loss_curve") or [] if step > 0])
    if rise > VAL_RISE_NATS:
        return (f"{done.get('run', 'the run')}'s validation loss rose {rise:.2f} nats above its running minimum at "
                f"step {at} (threshold {VAL_RISE_NATS:g})")  # fmt: skip
    return None


def outliers(finals: dict[int, float]) -> dict[int, str]:
    """seed -> why, for each seed whose final loss (`finals`, seed -> value, three seeds or more) lies both
    OUTLIER_NATS and OUTLIER_Z robust deviations from the seeds' median."""
    if len(finals) < 3:
        return {}
    median = statistics.median(finals.values())
    spread = 1.4826 * statistics.median(abs(value - median) for value in finals.values())
    return {seed: (f"seed {seed}'s final loss {value:.3f} is an outlier among its {len(finals)} seeds (median "
                   f"{median:.3f}, {abs(value - median):.2f} nats away)")
            for seed, value in finals.items()
            if abs(value - median) > OUTLIER_NATS and abs(value - median) > OUTLIER_Z * spread}  # fmt: skip


def unstable_seeds(by_seed: dict[int, dict]) -> dict[int, str]:
    """seed -> why, for each seed of a finished run (seed -> its done.json) that trained unstably."""
    finals = {k: each["val_loss"] for k, each in by_seed.items() if isinstance(each.get("val_loss"), (int, float))}
    found = {k: why for k, each in by_seed.items() if (why := instability(each))}
    name = next((each.get("run") for each in by_seed.values()), "the run")
    return {**{k: f"{name}: {why}" for k, why in outliers(finals).items() if k not in found}, **found}
