"""The tests a claim's margin is judged by, written out: Student-t's p and critical values (the regularized incomplete
beta), the floor a margin's noise cannot go below, the pooled spread of repeated runs, the power of a test (the
noncentral t) and the minimum detectable effect, two one-sided tests of equivalence, and the control of the
false-discovery rate over many claims (Benjamini-Hochberg, and Benjamini-Yekutieli under any dependence). Pure
arithmetic, checked in the tests against scipy and against the densities integrated numerically."""

from __future__ import annotations

import dataclasses
import functools
import math
import statistics
from collections.abc import Sequence

ALPHA = 0.05  # a claim is decided by a two-sided test at 95%
POWER = 0.8  # a minimum detectable effect is found 4 times in 5
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
        for term in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + term * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + term / c
            c = c if abs(c) > tiny else tiny
            fraction *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return front * fraction / a


def t_one_sided_p(t: float, df: float) -> float:
    """P(T >= t) for Student-t with `df` degrees of freedom."""
    half = t_two_sided_p(t, df) / 2
    return half if t >= 0 else 1.0 - half


@functools.cache
def t_critical(df: float, alpha: float = ALPHA) -> float:
    """Student-t's two-sided critical value at level `alpha` (95% by default) with `df` degrees of freedom (df = inf:
    the normal's 1.96); at 2 `alpha`, the one-sided critical value at `alpha`."""
    if df < 1:
        raise ValueError(f"df={df}: Student-t needs at least one degree of freedom (two seeds)")
    low, high = 0.0, 1e3
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if t_two_sided_p(middle, df) > alpha else (low, middle)
    return high


def margin_floor(noise_floor: float, runs_per_margin: int = 2) -> float:
    """The least noise of a margin combining `runs_per_margin` runs of a metric whose one-run noise is `noise_floor`
    (a difference of two runs: sqrt 2 x)."""
    return math.sqrt(runs_per_margin) * noise_floor


@dataclasses.dataclass(frozen=True)
class Significance:
    """A mean margin tested two ways, both of which it must clear: Student-t on the seeds' own spread, and against
    the floor of its noise (`bound`: the |mean| that clears both; `noise`: one seed's; `p`: the larger p). `tests`:
    (standard error of the mean, degrees of freedom) of each, for the equivalence tests (`equivalence_p`)."""

    bound: float
    noise: float
    p: float
    tests: tuple[tuple[float, float], ...] = ()

    def equivalence_p(self, difference: float, tolerance: float) -> float:
        """Two one-sided tests at once (TOST): the p that the true difference lies inside (-tolerance, tolerance),
        the larger over the two tests it must clear (1 where a test has no noise to go on)."""
        return max(
            (
                max(t_one_sided_p((difference + tolerance) / se, df), t_one_sided_p((tolerance - difference) / se, df))
                if se
                else float(abs(difference) >= tolerance)
            )
            for se, df in self.tests
        )

    def excluded_beyond(self, difference: float) -> float:
        """The narrowest equivalence bound the data support: the least d for which two one-sided tests at ALPHA put
        the true difference inside (-d, d) (|difference| + the one-sided critical value x its standard error)."""
        return max(abs(difference) + t_critical(df, 2 * ALPHA) * se for se, df in self.tests)


def significance(
    margins: Sequence[float], noise_floor: float, runs_per_margin: int = 2, floor_dof: float = math.inf
) -> Significance:
    """The test of the mean of `margins`. Against the floor (sqrt(runs_per_margin) x `noise_floor` per seed):
    Student-t on `floor_dof`, the degrees of freedom it was estimated on (inf: an assumed floor, taken as known).
    From two seeds on, also Student-t on their own spread (n - 1 degrees of freedom)."""
    floor, n, mean = margin_floor(noise_floor, runs_per_margin), len(margins), statistics.fmean(margins)
    p = t_two_sided_p(mean * math.sqrt(n) / floor, floor_dof) if floor else float(mean == 0)  # no floor: no test
    floor_test = (floor / math.sqrt(n), floor_dof)
    if n < 2:
        return Significance(t_critical(floor_dof) * floor, floor, p, (floor_test,))
    spread = statistics.stdev(margins)
    p_spread = t_two_sided_p(mean * math.sqrt(n) / spread, n - 1) if spread else float(mean == 0)
    bound = max(t_critical(n - 1) * spread, t_critical(floor_dof) * floor) / math.sqrt(n)
    return Significance(bound, max(spread, floor), max(p, p_spread), (floor_test, (spread / math.sqrt(n), n - 1)))


def false_discovery_q(p_values: Sequence[float], dependent: bool = False) -> list[float]:
    """Benjamini-Hochberg's adjusted p-values, in the order given: q_(i) = min over j >= i of p_(j) m / j over the
    m p-values ranked (a claim decided at q < ALPHA keeps the expected share of false discoveries among the decided
    below ALPHA, for independent or positively dependent tests). `dependent`: Benjamini-Yekutieli's, each q times
    sum_{k<=m} 1/k, which keeps that share under any dependence (claims that share an arm, of either sign)."""
    m, ranked = len(p_values), sorted(range(len(p_values)), key=lambda i: p_values[i])
    factor = sum(1 / k for k in range(1, m + 1)) if dependent else 1.0
    q, running = [1.0] * m, 1.0
    for rank in range(m, 0, -1):
        running = min(running, p_values[ranked[rank - 1]] * m * factor / rank)
        q[ranked[rank - 1]] = running
    return q


def t_power(effect: float, df: float, critical: float) -> float:
    """P(|T'| > critical) for the noncentral t on `df` degrees of freedom with noncentrality `effect` (the true mean
    over its standard error): (Z + effect) / S with df S^2 a chi-square on df, integrated over S by Simpson's rule
    (df = inf: S = 1, the normal)."""

    def rejected(s: float) -> float:  # P(|Z + effect| > critical s)
        return 0.5 * sum(math.erfc((critical * s + sign * effect) / math.sqrt(2)) for sign in (-1, 1))

    if math.isinf(df):
        return rejected(1.0)
    log_norm = math.log(2) + (df / 2) * math.log(df / 2) - math.lgamma(df / 2)  # the density of S, up to s^(df-1)

    def density(s: float) -> float:
        if s == 0:
            return float(df == 1) * math.exp(log_norm)
        return math.exp(log_norm + (df - 1) * math.log(s) - df * s * s / 2)

    low, high, steps = max(0.0, 1 - 12 / math.sqrt(2 * df)), 1 + 12 / math.sqrt(2 * df) + 6 / df, 1000
    h = (high - low) / steps
    weights = (1 if i in (0, steps) else 4 if i % 2 else 2 for i in range(steps + 1))
    return h / 3 * sum(w * density(low + i * h) * rejected(low + i * h) for i, w in enumerate(weights))


@functools.cache
def _detectable_effect(df: float) -> float:
    """The noncentrality at which a two-sided 95% t test on `df` degrees of freedom rejects with POWER."""
    critical, low, high = t_critical(df), 0.0, 100.0
    for _ in range(50):
        middle = (low + high) / 2
        low, high = (middle, high) if t_power(middle, df, critical) < POWER else (low, middle)
    return high


def minimum_detectable_effect(noise: float, seeds: int, floor_dof: float = math.inf) -> float:
    """The smallest true mean margin that `seeds` seeds of a margin with one-seed noise `noise` decide with POWER:
    the noncentrality at which the noncentral t (`t_power`) clears the 95% critical value POWER of the time, x
    noise / sqrt(seeds); the test the one of the seeds' Student-t and the floor's (on `floor_dof`) with the larger
    critical value, the one that binds."""
    df = floor_dof if seeds < 2 else min(seeds - 1, floor_dof)
    return _detectable_effect(df) * noise / math.sqrt(seeds)


def seeds_needed(margin: float, noise: float, floor_dof: float = math.inf) -> int:
    """The fewest seeds whose minimum detectable effect is below |margin| (MAX_SEEDS + 1: none up to MAX_SEEDS)."""
    return next(
        (n for n in range(2, MAX_SEEDS + 1) if minimum_detectable_effect(noise, n, floor_dof) < abs(margin)),
        MAX_SEEDS + 1,
    )


def pooled_spread(groups: Sequence[Sequence[float]]) -> tuple[float, int]:
    """(pooled standard deviation, degrees of freedom) of repeated measurements: sqrt(sum (n_i - 1) s_i^2 / sum
    (n_i - 1)) over the groups of two or more (one run's seeds each); (0, 0) without any."""
    repeated = [g for g in groups if len(g) >= 2]
    dof = sum(len(g) - 1 for g in repeated)
    if not dof:
        return 0.0, 0
    return math.sqrt(sum((len(g) - 1) * statistics.variance(g) for g in repeated) / dof), dof


def beyond_reach(paper_effect: float, noise_floor: float, seeds: int, runs_per_margin: int = 2) -> str | None:
    """Why a claim whose effect in the paper is `paper_effect` cannot be decided by `seeds` seeds of runs whose
    one-run noise is `noise_floor` (None: it can): the effect is below their minimum detectable effect."""
    detectable = minimum_detectable_effect(margin_floor(noise_floor, runs_per_margin), seeds)
    if abs(paper_effect) >= detectable:
        return None
    return (
        f"the paper's effect, {abs(paper_effect):.3g}, is below the minimum detectable effect here, "
        f"{detectable:.3g} at {seeds} seed{'s' * (seeds != 1)} (one-run noise {noise_floor:.3g})"
    )
