"""What the benchmarks share: their options checked before any work, CUDA-event timing and the error cell of a
failed case."""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path

import torch

from scaling_axes.io import SuiteError, check_directory, read_rows


def check_options(device: str, out: Path) -> None:
    """Stop in one line, before any work, where `--device` names a GPU this machine lacks or `--out` cannot be
    written (a folder, or a file in a folder that cannot be made or written)."""
    if device == "cuda" and not torch.cuda.is_available():
        raise SuiteError("--device cuda: this machine has no CUDA GPU (torch sees none); pass --device cpu")
    if out.is_dir():
        raise SuiteError(f"--out {out} is a folder: pass the CSV file to write")
    check_directory(out.parent, "--out's folder")


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


def kept_rows(paths: Sequence[Path], key: Callable[[dict], Hashable]) -> dict[Hashable, dict]:
    """The rows of earlier runs' CSVs that measured something (no `error`, no `failed` status), by `key`, a later
    file's row over an earlier's: what a rerun keeps instead of measuring again (`gpu-check --after`, `--keep`).
    A path that does not exist holds none."""
    kept = {}
    for path in paths:
        kept |= {key(r): r for r in read_rows(path) if not r.get("error") and r.get("status", "ok") == "ok"}
    return kept


def add_keep_option(parser: argparse.ArgumentParser) -> None:
    """A benchmark's `--keep CSV` (repeatable), read by `kept_rows`."""
    parser.add_argument(
        "--keep",
        type=Path,
        action="append",
        default=[],
        help="an earlier run's CSV (repeatable): its measured rows are kept, not measured again",
    )
