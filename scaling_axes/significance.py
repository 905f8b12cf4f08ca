"""The arithmetic a claim is judged by, written out: Student-t's p and quantiles (the regularized incomplete beta),
the chi-square's (the regularized incomplete gamma) and the upper confidence limit of a standard deviation it gives,
the pooled spread of repeated runs, the power of one-sided and equivalence tests (the noncentral t integrated over
its estimated scale), Holm's step-down and Benjamini-Yekutieli's step-up adjustments. Pure arithmetic, checked in the
tests against scipy and against the densities integrated numerically.

One level throughout: ALPHA = 0.025 one-sided, per direction (a claim shown to hold, or shown to fail), the
two-sided 95% convention; a 95% interval is the two one-sided bounds at ALPHA."""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Callable, Sequence

ALPHA = 0.025  # one-sided, per direction
POWER = 0.8  # the power a plan sizes its seeds for
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
    """Student-t's upper `alpha` quantile on `df` degrees of freedom (P(T >= c) = alpha; df = inf: the normal's):
    at ALPHA, the one-sided bound of every test here and half of a 95% interval."""
    if df < 1:
        raise ValueError(f"df={df}: Student-t needs at least one degree of freedom (two seeds)")
    low, high = 0.0, 1e4
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if t_one_sided_p(middle, df) > alpha else (low, middle)
    return high


def chi2_cdf(x: float, df: float) -> float:
    """P(X <= x) for a chi-square on `df` degrees of freedom: the regularized lower incomplete gamma P(df/2, x/2),
    by its series below a + 1 and its continued fraction (Lentz) above."""
    if x <= 0:
        return 0.0
    a, z = df / 2, x / 2
    front = math.exp(a * math.log(z) - z - math.lgamma(a))
    if z < a + 1:
        term = total = 1.0 / a
        for k in range(1, 1000):
            term *= z / (a + k)
            total += term
            if abs(term) < abs(total) * 1e-16:
                break
        return front * total
    tiny, b = 1e-300, z + 1 - a
    c, d = 1 / tiny, 1 / b
    fraction = d
    for k in range(1, 1000):
        an, b = -k * (k - a), b + 2
        d = 1.0 / (d if abs(d := an * d + b) > tiny else tiny)
        c = c if abs(c := b + an / c) > tiny else tiny
        fraction *= d * c
        if abs(d * c - 1.0) < 1e-16:
            break
    return 1.0 - front * fraction


@functools.cache
def chi2_quantile(probability: float, df: float) -> float:
    """The chi-square's `probability` quantile on `df` degrees of freedom (bisection on `chi2_cdf`)."""
    low, high = 0.0, max(10.0, 10 * df)
    while chi2_cdf(high, df) < probability:
        high *= 2
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if chi2_cdf(middle, df) < probability else (low, middle)
    return high


def sigma_upper_limit(sigma: float, df: float, confidence: float) -> float:
    """The one-sided `confidence` upper limit of a standard deviation estimated as `sigma` on `df` degrees of
    freedom: sigma sqrt(df / chi2_{1-confidence}(df)) (a pilot's sigma taken at its upper limit, so that a plan is
    not sized on a lucky draw)."""
    return sigma * math.sqrt(df / chi2_quantile(1 - confidence, df))


def pooled_spread(groups: Sequence[Sequence[float]]) -> tuple[float, int]:
    """(pooled standard deviation, degrees of freedom) of repeated measurements: sqrt(sum (n_i - 1) s_i^2 / sum
    (n_i - 1)) over the groups of two or more (one run's seeds each); (0, 0) without any."""
    repeated = [g for g in groups if len(g) >= 2]
    dof = sum(len(g) - 1 for g in repeated)
    if not dof:
        return 0.0, 0
    return math.sqrt(sum((len(g) - 1) * statistics.variance(g) for g in repeated) / dof), dof


def holm_adjusted(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given: the largest over ranks j <= i of (m - j + 1) p_(j),
    at most 1 (a hypothesis rejected at adjusted p < alpha keeps the family-wise error at alpha, under any
    dependence)."""
    m, ranked = len(p_values), sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted, running = [1.0] * m, 0.0
    for rank, index in enumerate(ranked):
        running = max(running, min(1.0, (m - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted


def simes_p(p_values: Sequence[float]) -> float:
    """Simes' p of the global null over `p_values`: min over i of k p_(i) / i (the i-th smallest of k). Valid where
    the tests are independent or positively dependent (steps of a ladder that share an arm); never above Holm's
    smallest adjusted p, and below it where more than one step is small."""
    ordered = sorted(p_values)
    return min(1.0, min(len(ordered) * p / i for i, p in enumerate(ordered, 1)))


def false_discovery_q(p_values: Sequence[float], dependent: bool = False) -> list[float]:
    """Benjamini-Hochberg's adjusted p-values, in the order given: q_(i) = min over j >= i of p_(j) m / j over the
    m p-values ranked. `dependent`: Benjamini-Yekutieli's, each q times sum_{k<=m} 1/k, which keeps the expected
    share of false discoveries below alpha under any dependence (claims that share an arm, of either sign)."""
    m, ranked = len(p_values), sorted(range(len(p_values)), key=lambda i: p_values[i])
    factor = harmonic(m) if dependent else 1.0
    q, running = [1.0] * m, 1.0
    for rank in range(m, 0, -1):
        running = min(running, p_values[ranked[rank - 1]] * m * factor / rank)
        q[ranked[rank - 1]] = running
    return q


def harmonic(m: int) -> float:
    """1 + 1/2 + ... + 1/m: Benjamini-Yekutieli's factor over m hypotheses."""
    return sum(1 / k for k in range(1, m + 1))


def over_scale(df: float, rejected: Callable[[float], float]) -> float:
    """E[rejected(S)] for S the scale estimate of a t test relative to its true value (df S^2 a chi-square on df),
    integrated by Simpson's rule (df = inf: S = 1): a test's rejection probability, given `rejected(s)`, the
    probability of rejecting once the estimated scale is s times the true."""
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


def _above(x: float) -> float:
    """P(Z > x) for the standard normal."""
    return 0.5 * math.erfc(x / math.sqrt(2))


def one_sided_power(noncentrality: float, df: float, critical: float) -> float:
    """P(T' > critical) for the noncentral t on `df` degrees of freedom with `noncentrality` (the true effect over
    its standard error): the power of a one-sided t test."""
    return over_scale(df, lambda s: _above(critical * s - noncentrality))


def equivalence_power(effect: float, tolerance: float, df: float, critical: float) -> float:
    """The power of two one-sided tests that a difference lies within +-`tolerance` (both in standard errors), when
    its true value is `effect`: P(-tolerance + critical S < X < tolerance - critical S), X ~ N(effect, 1), which is
    Owen's Q written as an integral over S."""

    def inside(s: float) -> float:
        width = tolerance - critical * s
        return max(0.0, _above(-width - effect) - _above(width - effect)) if width > 0 else 0.0

    return over_scale(df, inside)


def minimum_detectable_effect(noise: float, seeds: int, alpha: float = ALPHA, df: float | None = None) -> float:
    """The smallest true mean margin that `seeds` seeds of a margin whose one-seed noise is `noise` show at one-sided
    `alpha` with POWER (the noncentral t; `df`: the test's degrees of freedom, seeds - 1 unless given, infinite at
    one seed: a noise taken as known)."""
    df = (seeds - 1 if seeds > 1 else math.inf) if df is None else df
    critical, low, high = t_critical(df, alpha), 0.0, 100.0
    for _ in range(50):
        middle = (low + high) / 2
        low, high = (middle, high) if one_sided_power(middle, df, critical) < POWER else (low, middle)
    return high * noise / math.sqrt(seeds)


def beyond_reach(paper_effect: float, noise_floor: float, seeds: int, runs_per_margin: int = 2) -> str | None:
    """Why a claim whose effect in the paper is `paper_effect` cannot be decided by `seeds` seeds of runs whose
    one-run noise is `noise_floor` (None: it can): the effect is below their minimum detectable effect (a scale's
    design, before any run: its runs are then not trained there)."""
    detectable = minimum_detectable_effect(math.sqrt(runs_per_margin) * noise_floor, seeds)
    if abs(paper_effect) >= detectable:
        return None
    return (
        f"the paper's effect, {abs(paper_effect):.3g}, is below the minimum detectable effect here, "
        f"{detectable:.3g} at {seeds} seed{'s' * (seeds != 1)} (one-run noise {noise_floor:.3g})"
    )


MAX_SIGN_FLIP_SEEDS = 22  # 2^22 sums of 8 bytes: 32 MiB, the exact test's ceiling


def sign_flip_p(margins: Sequence[float], shift: float = 0.0) -> float:
    """The exact one-sided sign-flip (permutation) p that the margins' true centre exceeds `shift`: the share of the
    2^n sign patterns of |m_i - shift| whose sum reaches the observed sum of m_i - shift (ties count, the observed
    pattern among them). Valid for any distribution symmetric about the centre under the null; it cannot fall
    below 2^-n, so n seeds decide nothing at levels under that (`sign_flip_floor`)."""
    import numpy as np

    centred = np.asarray(margins, dtype=np.float64) - shift
    if len(centred) > MAX_SIGN_FLIP_SEEDS:
        raise ValueError(f"an exact sign-flip test of {len(centred)} seeds is beyond {MAX_SIGN_FLIP_SEEDS}")
    sums = np.zeros(1)
    for size in np.abs(centred):
        sums = np.concatenate((sums + size, sums - size))
    observed = centred.sum()
    return float(np.count_nonzero(sums >= observed - 1e-12 * max(1.0, abs(observed))) / len(sums))


def sign_flip_floor(level: float) -> int:
    """The fewest seeds whose exact sign-flip test can reach `level`: the smallest n with 2^-n below it."""
    return math.floor(-math.log2(level)) + 1
