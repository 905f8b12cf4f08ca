"""A seed x window-block bootstrap of a test-split contrast (issue 83): a sensitivity beside each verdict, never one.
The t-test sees the seeds' spread only; the test split's own sampling (which windows it holds) adds to each run's
figure, and the arms share it (every arm is scored on the same windows). Each draw resamples the seeds, and within
each seed the split's contiguous window blocks, with the same blocks for every arm of that seed (the pairing the
contrast relies on); the margin is the mean over the drawn seeds of the blocks' size-weighted mean.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

BLOCKS = 20  # contiguous blocks of the test split's windows: a block spans documents, so neighbours stay together
DRAWS = 4000
SEED = 83


@dataclasses.dataclass(frozen=True)
class Bootstrapped:
    """The contrast's mean margin over every window and seed, its percentile interval at `level` on each side,
    and the share of draws at or below `boundary` (a bootstrap p that it holds)."""

    estimate: float
    low: float
    high: float
    p_hold: float


def block_bootstrap(
    windows: Mapping[str, Mapping[int, Sequence[float]]],
    contrast: Mapping[str, float],
    seeds: Sequence[int],
    level: float,
    boundary: float = 0.0,
    blocks: int = BLOCKS,
    draws: int = DRAWS,
) -> Bootstrapped | None:
    """The bootstrap of sum_a c_a x (arm a's mean test loss) over `seeds`, from each arm's per-window test losses
    (arm -> seed -> losses, in the split's order). None where an arm lacks a seed's windows or their counts differ."""
    import numpy as np

    per_seed = []
    for k in seeds:
        series = [windows.get(arm, {}).get(k) for arm in contrast]
        if any(s is None for s in series) or len({len(s) for s in series}) != 1 or len(series[0]) < blocks:
            return None
        margin = sum(c * np.asarray(s, dtype=np.float64) for c, s in zip(contrast.values(), series, strict=True))
        parts = np.array_split(margin, blocks)
        per_seed.append((np.array([p.sum() for p in parts]), np.array([len(p) for p in parts], dtype=np.float64)))
    sums = np.stack([s for s, _ in per_seed])  # seeds x blocks
    sizes = np.stack([n for _, n in per_seed])
    rng = np.random.default_rng(SEED)
    drawn_seeds = rng.integers(0, len(seeds), size=(draws, len(seeds)))
    drawn_blocks = rng.integers(0, blocks, size=(draws, len(seeds), blocks))
    rows = drawn_seeds[:, :, None]
    means = sums[rows, drawn_blocks].sum(axis=2) / sizes[rows, drawn_blocks].sum(axis=2)
    estimates = means.mean(axis=1)
    low, high = np.quantile(estimates, [level, 1 - level])
    whole = float(np.mean([s.sum() / n.sum() for s, n in per_seed]))
    return Bootstrapped(whole, float(low), float(high), float(np.mean(estimates <= boundary)))
