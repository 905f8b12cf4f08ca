"""A claim row's test: its mean margin, standard error and degrees of freedom, from one of two models the plan chooses
per experiment.

- `model`: the additive arm x seed model of one experiment and one measure. Seeds are blocks: the arms of a seed
  share its initialisation and data order, so y[a, s] = mu_a + b_s + e[a, s]; arms that no claim links sit in
  blocks of their own (a connected set of arms per block). A row whose margin is a contrast c of arm values is
  tested on the pooled residual: se = sigma sqrt(sum c^2 / n), on sum over blocks of (A - 1)(n - 1) degrees of
  freedom. Valid where the arm differences have equal variances (sphericity), which the plan judged from the pilot.
- `own_spread`: the paired t on the row's own margins, se = sd / sqrt(n) on n - 1 degrees of freedom; valid for any
  covariance, and the only test of a margin that is not a contrast (an interpolation, a fraction saved).

With two arms the two are the same test.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence

ArmValues = Mapping[str, Mapping[int, float]]  # arm -> seed -> its value of the measure


@dataclasses.dataclass(frozen=True)
class RowTest:
    """A row's mean margin over its seeds, its standard error and degrees of freedom, and what they rest on."""

    estimate: float
    se: float
    df: float
    seeds: int
    how: str
    margins: tuple[float, ...] = ()  # the row's margin at each seed (what an exact sign-flip test reads)


def own_spread(margins: Sequence[float]) -> RowTest | None:
    """The paired t on `margins` (one per seed); None below two seeds (no spread to go on)."""
    n = len(margins)
    if n < 2:
        return None
    mean, se = statistics.fmean(margins), statistics.stdev(margins) / math.sqrt(n)
    return RowTest(mean, se, n - 1, n, "its own spread", tuple(margins))


@dataclasses.dataclass(frozen=True)
class ArmSeedModel:
    """The additive arm x seed model fitted on one measure: the arm means, the pooled residual standard deviation
    and its degrees of freedom, the seeds it was fitted on, and its blocks (connected sets of arms)."""

    means: dict[str, float]
    sigma: float
    df: int
    seeds: tuple[int, ...]
    blocks: tuple[frozenset[str], ...]

    def test(self, contrast: Mapping[str, float]) -> RowTest | None:
        """The contrast's estimate sum c_a mean_a, on the pooled residual (None: an arm outside the model, or no
        degrees of freedom)."""
        if not self.df or any(arm not in self.means for arm in contrast):
            return None
        n = len(self.seeds)
        estimate = sum(c * self.means[arm] for arm, c in contrast.items())
        se = self.sigma * math.sqrt(sum(c * c for c in contrast.values()) / n)
        arms = sum(len(block) for block in self.blocks)
        how = f"the arm x seed model ({arms} arms in {len(self.blocks)} block{'s' * (len(self.blocks) > 1)}, {n} seeds)"
        return RowTest(estimate, se, self.df, n, how)


def blocks_of(arms: Iterable[str], links: Iterable[Iterable[str]]) -> tuple[frozenset[str], ...]:
    """The connected sets of `arms` that the claims' arm sets (`links`) join, each arm in exactly one."""
    parent = {arm: arm for arm in arms}

    def root(arm: str) -> str:
        while parent[arm] != arm:
            arm = parent[arm]
        return arm

    for link in links:
        joined = [arm for arm in link if arm in parent]
        for arm in joined[1:]:
            parent[root(arm)] = root(joined[0])
    groups: dict[str, set[str]] = {}
    for arm in parent:
        groups.setdefault(root(arm), set()).add(arm)
    return tuple(sorted((frozenset(g) for g in groups.values()), key=sorted))


def fit_model(values: ArmValues, links: Iterable[Iterable[str]], seeds: Sequence[int]) -> ArmSeedModel:
    """The arm x seed model on `values` at `seeds` (every arm must have every seed), blocks joined by `links`:
    residual e[a, s] = y[a, s] - mean_a - mean_s + mean within each block."""
    blocks = blocks_of(values, links)
    squares, df = 0.0, 0
    for block in blocks:
        arms = sorted(block)
        grand = statistics.fmean(values[a][s] for a in arms for s in seeds)
        by_arm = {a: statistics.fmean(values[a][s] for s in seeds) for a in arms}
        by_seed = {s: statistics.fmean(values[a][s] for a in arms) for s in seeds}
        squares += sum((values[a][s] - by_arm[a] - by_seed[s] + grand) ** 2 for a in arms for s in seeds)
        df += (len(arms) - 1) * (len(seeds) - 1)
    means = {a: statistics.fmean(values[a][s] for s in seeds) for a in values}
    return ArmSeedModel(means, math.sqrt(squares / df) if df else 0.0, df, tuple(seeds), blocks)
