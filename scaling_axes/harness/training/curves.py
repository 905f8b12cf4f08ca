"""What a run's logs say once it is done: its curves from metrics.csv, the training clock across sessions, the step
time (throughput and MFU, which need the Trainer, are `trainer.throughput`)."""

from __future__ import annotations

import csv
import math
from pathlib import Path


def read_curves(metrics_csv: Path, columns: tuple[str, ...], max_points: int = 1000) -> dict[str, list]:
    """Per column, (step, value) of a logged metric, the last entry per step (a resume repeats steps), at most
    `max_points`, from one read of the CSV log. `train/time` is Lightning's ThroughputMonitor clock: seconds of
    training in the latest session."""
    with open(metrics_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    curves = {}
    for column in columns:
        curve = sorted({int(r["step"]): float(r[column]) for r in rows if r.get(column)}.items())
        curves[column] = curve[:: max(1, math.ceil(len(curve) / max_points))]
    return curves


def training_clock(times: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """(step, seconds of training since step 0) across sessions. The ThroughputMonitor's clock restarts with each
    session, so a later session continues from the last time logged before it (the interruption itself and the
    steps it repeats are not counted)."""
    clock: list[tuple[int, float]] = []
    offset, last = 0.0, 0.0
    for step, seconds in times:
        if seconds < last:  # the clock restarted: a new session
            offset = clock[-1][1]
        clock.append((step, offset + seconds))
        last = seconds
    return clock


def step_ms(times: list[tuple[int, float]]) -> float | None:
    """Milliseconds per optimizer step over the latest session's logged training clock (validation excluded)."""
    session = times[-1:]
    for step, seconds in reversed(times[:-1]):
        if seconds >= session[0][1]:  # the clock restarted here: an earlier session
            break
        session.insert(0, (step, seconds))
    if len(session) < 2:
        return None
    (first_step, first), (last_step, last) = session[0], session[-1]
    return 1000 * (last - first) / (last_step - first_step)


Curve = list[tuple[float, float]]  # (step, value) as done.json stores a logged metric


def smoothed(curve: Curve, window: int | None = None) -> Curve:
    """Trailing mean over `window` logged points (default 10, at most 5% of the curve): a threshold read on
    single-step train losses would be crossed first by a lucky batch."""
    window = window or max(1, min(10, len(curve) // 20))
    values = [value for _, value in curve]
    return [
        (step, sum(values[max(0, i - window + 1) : i + 1]) / min(window, i + 1)) for i, (step, _) in enumerate(curve)
    ]


def final_train_loss(done: dict) -> float | None:
    """A finished run's final train loss: the smoothed end of its logged curve."""
    curve = smoothed(done.get("train_loss_curve") or [])
    return curve[-1][1] if curve else None
