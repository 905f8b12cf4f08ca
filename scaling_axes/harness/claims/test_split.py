"""Claims judged on the test split (issue 83): where a plan's rules say `verdict_split: test`, a claim row whose
margin is a contrast of its runs' final validation losses is judged on the same contrast of their whole test split's
losses, from the per-seed file's `run` rows; the validation margin stays beside it, and the report gives each row's
shift between the two (`shifts`)."""

from __future__ import annotations

import dataclasses
import statistics

from scaling_axes.harness.claims.observed import Experiment, Observed

VALIDATION, TEST = "val_loss", "test_loss"


def on_test_split(ex: Experiment) -> Experiment:
    """`ex` with each validation-loss contrast row measured on the test split instead: its arms' values each run's
    `test_loss` at each seed, its margins the contrast of those (a seed where an arm has none has no margin)."""
    claims = [_on_test(row, ex) if row.measure == VALIDATION and row.contrast else row for row in ex.claims]
    return dataclasses.replace(ex, claims=claims)


def _on_test(row: Observed, ex: Experiment) -> Observed:
    values = {arm: _values(ex, arm, TEST, row.margins) for arm in row.contrast}
    seeds = sorted(set.intersection(*(set(v) for v in values.values())))
    margins = {k: sum(c * values[arm][k] for arm, c in row.contrast.items()) for k in seeds}
    return dataclasses.replace(row, margins=margins, measure=TEST, arm_values=values)


def _values(ex: Experiment, arm: str, measure: str, seeds) -> dict[int, float]:
    by_seed = ex.runs.get(arm, {})
    return {k: by_seed[k][measure] for k in seeds if measure in by_seed.get(k, {})}


@dataclasses.dataclass(frozen=True)
class Shift:
    """One final-loss contrast row's mean margin on the whole validation split and on the test split, at the
    seeds both have."""

    experiment: str
    where: str
    seeds: int
    validation: float
    test: float

    @property
    def shift(self) -> float:
        return self.test - self.validation


def shifts(ex: Experiment, seeds: list[int]) -> list[Shift]:
    """Each final-loss contrast row of `ex` (on either split) at `seeds` with both measures at every arm."""
    out = []
    for row in (r for r in ex.claims if r.measure in (VALIDATION, TEST) and r.contrast):
        both = {m: {a: _values(ex, a, m, seeds) for a in row.contrast} for m in (VALIDATION, TEST)}
        common = [k for k in seeds if all(k in v for m in both.values() for v in m.values())]
        if common:
            mean = {
                m: statistics.fmean(sum(c * both[m][a][k] for a, c in row.contrast.items()) for k in common)
                for m in both
            }
            out.append(Shift(ex.name, row.where, len(common), mean[VALIDATION], mean[TEST]))
    return out
