"""What the benchmarks share: CUDA-event timing and the error cell of a failed case."""

from __future__ import annotations

import statistics
from collections.abc import Callable

import torch


def time_ms(step: Callable[[], None], repeats: int, warmup: int = 5) -> float:
    """Median milliseconds of `step` by CUDA events, after `warmup` untimed calls."""
    for _ in range(warmup):
        step()
    timings = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        torch.cuda.synchronize()
        timings.append(start.elapsed_time(end))
    return statistics.median(timings)


def failure(error: Exception) -> str:
    """A benchmark row's `error`: the exception, shortened to fit a CSV cell."""
    return f"{type(error).__name__}: {error}"[:500]
