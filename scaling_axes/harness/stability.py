"""Whether a run trained stably: loss spikes caught while it trains, rises of its validation loss, and seeds whose
final loss is an outlier among the run's seeds. An unstable run decides no claim and is never a sweep's choice.

The thresholds were set from the curves of about 60 cpu runs (issue 46; the README lists them): a stable run's step
losses rose at most 0.09-0.50 nats above the running minimum of their own smoothed curve (batch-to-batch noise),
while the spikes that mark a rate past the edge of stability reached 0.77-4.2 nats.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

import lightning as L

SMOOTHING = 0.9  # the training loss's exponential moving average: its running minimum is what a step is compared to
SPIKE_NATS = 0.75  # a step loss this far above that minimum is a spike
VAL_RISE_NATS = 0.1  # a validation loss this far above its own running minimum: the model got worse, not noisier
OUTLIER_NATS = 0.25  # a seed's final loss this far from its seeds' median, and
OUTLIER_Z = 3.5  # this many robust deviations (1.4826 x the median absolute deviation) from it, is an outlier


class LossSpikes(L.Callback):
    """Tracks each optimizer step's training loss (the mean over its micro-batches, on rank zero) against the running
    minimum of its exponential moving average, and keeps the largest rise: `record()` is what done.json keeps. Its
    state is checkpointed, so a resumed run records what the uninterrupted one does."""

    def __init__(self) -> None:
        self.state: dict[str, Any] = {"ema": None, "smoothed_min": None, "rise": None, "step_loss": 0.0}

    def on_train_batch_end(self, trainer: L.Trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        state = self.state
        state["step_loss"] += float(loss)  # Lightning divides each micro-batch's loss by the accumulation
        if (batch_idx + 1) % trainer.accumulate_grad_batches:
            return
        value, state["step_loss"] = state["step_loss"], 0.0
        if not math.isfinite(value):
            return  # a non-finite loss stops the run itself
        smoothed_min = state["smoothed_min"]
        if smoothed_min is not None and (state["rise"] is None or value - smoothed_min > state["rise"]["nats"]):
            state["rise"] = {"nats": value - smoothed_min, "step": trainer.global_step, "loss": value}
        ema = value if state["ema"] is None else SMOOTHING * state["ema"] + (1 - SMOOTHING) * value
        state["ema"], state["smoothed_min"] = ema, ema if smoothed_min is None else min(smoothed_min, ema)

    def state_dict(self) -> dict[str, Any]:
        return dict(self.state)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.state = dict(state_dict)

    def record(self) -> dict[str, Any]:
        """done.json's record: the largest rise of a step's training loss above the smoothed running minimum."""
        return {"train_loss_rise": self.state["rise"]}


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
    spike = done.get("train_loss_rise")
    if isinstance(spike, dict) and spike.get("nats", 0) > SPIKE_NATS:
        return (f"{done.get('run', 'the run')}'s training loss spiked at step {spike['step']} to {spike['loss']:.3f}, "
                f"{spike['nats']:.2f} nats above its smoothed running minimum (threshold {SPIKE_NATS:g})")  # fmt: skip
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
