"""What a run's logs say once it is done: its curves from metrics.csv, the training clock across sessions, the step
time, and throughput and MFU from Lightning's ThroughputMonitor with the peak the MFU divides by."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.fabric.utilities.throughput import get_available_flops
from lightning.pytorch.callbacks.throughput_monitor import _plugin_to_compute_dtype


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


def throughput(curves: dict[str, list], trainer: L.Trainer) -> dict[str, Any]:
    """Training tokens per second (all devices) and MFU at the end of the run, from Lightning's ThroughputMonitor
    (a rolling window of recent steps, validation excluded), the device they were measured on, the precision, and
    the peak the MFU divides by (`mfu_peak`)."""
    tokens, mfu = curves["train/device/items_per_sec"], curves["train/device/mfu"]
    device = trainer.strategy.root_device
    return {
        "tokens_per_sec": tokens[-1][1] * trainer.world_size if tokens else None,
        "mfu": mfu[-1][1] if mfu else None,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else device.type,
        "world_size": trainer.world_size,
        "precision": trainer.precision,
        **mfu_peak(trainer),
    }


def mfu_peak(trainer: L.Trainer) -> dict[str, Any]:
    """The peak Lightning's ThroughputMonitor divides by for this Trainer's compute dtype: bf16 dense for bf16-mixed,
    TF32 for 32-true where matmuls may use it, else FP32 (a 32-true MFU is against a peak ~15x lower than bf16's)."""
    dtype = _plugin_to_compute_dtype(trainer.precision_plugin)
    device = trainer.strategy.root_device
    if device.type != "cuda":
        return {"mfu_peak": f"none known for {device.type}", "mfu_peak_tflops": None}
    name = {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype, str(dtype).removeprefix("torch."))
    if dtype == torch.float32 and torch.get_float32_matmul_precision() != "highest":
        name = "tf32"
    flops, gpu = get_available_flops(device, dtype), torch.cuda.get_device_name(device)
    if flops is None:
        return {"mfu_peak": f"none known for {gpu} in {name}", "mfu_peak_tflops": None}
    return {"mfu_peak": f"{name} dense peak of {gpu}", "mfu_peak_tflops": flops / 1e12}


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
