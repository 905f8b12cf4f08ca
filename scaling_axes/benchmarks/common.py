"""What the benchmarks share: CUDA-event timing and the error cell of a failed case."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch


def time_ms(step: Callable[[], None], repeats: int, warmup: int = 5) -> float:
    """Median milliseconds of `step` by CUDA events, after `warmup` untimed calls (on a machine without a GPU, by the
    wall clock: `gpu-check --tiny` proves the command there, its numbers mean nothing)."""
    for _ in range(warmup):
        step()
    timings = []
    if not torch.cuda.is_available():
        for _ in range(repeats):
            started = time.perf_counter()
            step()
            timings.append(1000 * (time.perf_counter() - started))
        return statistics.median(timings)
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
