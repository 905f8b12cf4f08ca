"""The tests a claim's margin is judged by, written out: Student-t's p and critical values (the regularized incomplete
beta), the floor a margin's noise cannot go below, the pooled spread of repeated runs, the minimum detectable effect,
and Benjamini-Hochberg's control of the false-discovery rate over many claims. Pure arithmetic, checked in the tests
against the densities integrated numerically."""

from __future__ import annotations

import dataclasses
import functools
import math
import statistics
from collections.abc import Sequence

ALPHA = 0.05  # a claim is decided by a two-sided test at 95%
POWER_Z = 0.84  # the normal quantile of 80% power: a minimum detectable effect is found 4 times in 5
MAX_SEEDS = 100  # beyond this many seeds a margin is out of reach in practice


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student-t with `df` degrees of freedom (df = inf: the normal): the regularized incomplete
    beta I_{df/(df+t^2)}(df/2, 1/2)."""
    if math.isinf(df):
        return math.erfc(abs(t) / math.sqrt(2))
    return 1.0 if t == 0 else 0.0 if math.isinf(t) else _incomplete_beta(df / 2, 0.5, df / (df + t * t))


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b), by its continued fraction (Lentz), on the side of x where it converges fast."""
    if x > (a + 1) / (a + b + 2):
        return 1.0 - _incomplete_beta(b, a, 1.0 - x)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    fraction = d
    for m in range(1, 500):
        for term in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                     -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):  # fmt: skip
            d = 1.0 + term * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + term / c
            c = c if abs(c) > tiny else tiny
            fraction *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return front * fraction / a


@functools.cache
def t_critical(df: float) -> float:
    """Student-t's two-sided 95% critical value with `df` degrees of freedom (df = inf: the normal's 1.96)."""
    if df < 1:
        raise ValueError(f"df={df}: Student-t needs at least one degree of freedom (two seeds)")
    low, high = 0.0, 1e3
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if t_two_sided_p(middle, df) > ALPHA else (low, middle)
    return high


def margin_floor(noise_floor: float, runs_per_margin: int = 2) -> float:
    """The least noise of a margin combining `runs_per_margin` runs of a metric whose one-run noise is `noise_floor`
    (a difference of two runs: sqrt 2 x)."""
    return math.sqrt(runs_per_margin) * noise_floor


@dataclasses.dataclass(frozen=True)
class Significance:
    """A mean margin tested two ways, both of which it must clear: Student-t on the seeds' own spread, and against
    the floor of its noise (`bound`: the |mean| that clears both; `noise`: one seed's; `p`: the larger p)."""

    bound: float
    noise: float
    p: float


def significance(margins: Sequence[float], noise_floor: float, runs_per_margin: int = 2,
                 floor_dof: float = math.inf) -> Significance:  # fmt: skip
    """The test of the mean of `margins`. Against the floor (sqrt(runs_per_margin) x `noise_floor` per seed):
    Student-t on `floor_dof`, the degrees of freedom it was estimated on (inf: an assumed floor, taken as known).
    From two seeds on, also Student-t on their own spread (n - 1 degrees of freedom)."""
    floor, n, mean = margin_floor(noise_floor, runs_per_margin), len(margins), statistics.fmean(margins)
    p = t_two_sided_p(mean * math.sqrt(n) / floor, floor_dof) if floor else float(mean == 0)  # no floor: no test
    if n < 2:
        return Significance(t_critical(floor_dof) * floor, floor, p)
    spread = statistics.stdev(margins)
    p_spread = t_two_sided_p(mean * math.sqrt(n) / spread, n - 1) if spread else float(mean == 0)
    bound = max(t_critical(n - 1) * spread, t_critical(floor_dof) * floor) / math.sqrt(n)
    return Significance(bound, max(spread, floor), max(p, p_spread))


def false_discovery_q(p_values: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg's adjusted p-values, in the order given: q_(i) = min over j >= i of p_(j) m / j over the
    m p-values ranked (a claim decided at q < ALPHA keeps the expected share of false discoveries among the decided
    below ALPHA)."""
    m, ranked = len(p_values), sorted(range(len(p_values)), key=lambda i: p_values[i])
    q, running = [1.0] * m, 1.0
    for rank in range(m, 0, -1):
        running = min(running, p_values[ranked[rank - 1]] * m / rank)
        q[ranked[rank - 1]] = running
    return q


def minimum_detectable_effect(noise: float, seeds: int, floor_dof: float = math.inf) -> float:
    """The smallest true mean margin that `seeds` seeds of a margin with one-seed noise `noise` decide 80% of the
    time: (the 95% critical value + POWER_Z) x noise / sqrt(seeds), the critical value the larger of the seeds'
    Student-t and the floor's (on `floor_dof`)."""
    critical = t_critical(floor_dof) if seeds < 2 else max(t_critical(seeds - 1), t_critical(floor_dof))
    return (critical + POWER_Z) * noise / math.sqrt(seeds)


def seeds_needed(margin: float, noise: float, floor_dof: float = math.inf) -> int:
    """The fewest seeds whose minimum detectable effect is below |margin| (MAX_SEEDS + 1: none up to MAX_SEEDS)."""
    return next((n for n in range(2, MAX_SEEDS + 1) if minimum_detectable_effect(noise, n, floor_dof) < abs(margin)),
                MAX_SEEDS + 1)  # fmt: skip


def pooled_spread(groups: Sequence[Sequence[float]]) -> tuple[float, int]:
    """(pooled standard deviation, degrees of freedom) of repeated measurements: sqrt(sum (n_i - 1) s_i^2 / sum
    (n_i - 1)) over the groups of two or more (one run's seeds each); (0, 0) without any."""
    repeated = [g for g in groups if len(g) >= 2]
    dof = sum(len(g) - 1 for g in repeated)
    if not dof:
        return 0.0, 0
    return math.sqrt(sum((len(g) - 1) * statistics.variance(g) for g in repeated) / dof), dof
