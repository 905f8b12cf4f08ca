"""Learning-rate sweeps that the harness runs before the runs a claim compares: what a sweep is and what it has
trained (how it chooses: `harness.experiment.tuning`).

A run declared with a `Sweep` trains at the rate its sweep chose, never at its budget's. The sweep trains the run at
each rate of its grid on the seed before the run's own (`sweep_point`: a seed no claim is judged on). One draw cannot
choose: near the edge of stability the seeds of a rate spread by more than the gaps between rates (the
cross-architecture Transformer's sweep seed: 4.95 at 9e-3, 5.15 at 3e-3; its claim seeds at 9e-3 5.17-5.54), so the
best rate is trained again on further sweep seeds (`Sweep.draws`), and so is each neighbour within the noise the
best's draws show; rates are compared by their mean over draws. A rate with a diverged or unstable draw
(`harness.stability`) is never chosen. A best rate at an edge of what was tried is not a choice: the sweep extends
one grid step past that edge, up to MAX_EXTENSIONS steps (then the run is flagged `at_edge` and no claim is decided
on it). Only the rates it can reach are points of it (`declared_rates`).

Where a claim seed trains unstably at the chosen rate, the claim seeds retrain at the best stable rate below
(`fallback`) under a name of their own (`stable_run`), and on down while they spike; the report shows both rates.

A sweep may be another run's (`anchor`): the rate carried over by a stated rule (`rule`, such as muP's width
transfer); `check` also trains this run at the carried rate's two grid neighbours (one draw each) and the report says
whether the rate still stands. Sweep points several experiments declare alike are one run (`link_identical`).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable
from typing import NamedTuple, TypeVar

from scaling_axes.harness.names import rate, stable_name, sweep_name
from scaling_axes.harness.scales import SweepCap

Run = TypeVar("Run")  # a `harness.runs.Run` (runs imports this module, so not the other way round)

MAX_EXTENSIONS = 3  # grid steps a sweep may extend past either edge
SWEEP_DRAWS = 2  # draws of the best rate and its neighbours

ONE_SEED_Z = 2.0  # a sweep's tie: rates whose mean losses lie within this many standard errors (`within_noise`)


@dataclasses.dataclass(frozen=True)
class Sweep:
    """A run's learning-rate sweep: a geometric `grid` (ascending), or the rate of run `anchor`'s sweep carried over
    by `rule` (and with `check`, its two grid neighbours trained at this run's size too)."""

    grid: tuple[float, ...]
    anchor: str | None = None
    rule: str = ""
    check: bool = False
    rate_option: str | None = None  # the LanguageModel option the rate is (None: the budget's lr), e.g. a scale on
    # fixed per-group rates
    draws: int = SWEEP_DRAWS  # sweep seeds the best rate and its neighbours are compared on
    extensions: int = MAX_EXTENSIONS  # grid steps it may take past either edge
    scale: float = 1.0  # an anchored run's rate: the anchor's times this (its `rule` says why)
    stable_margin: bool = False  # every rate at every draw; the best rate whose next higher is stable on all of them

    def __post_init__(self) -> None:
        if len(self.grid) < 2 or list(self.grid) != sorted(self.grid):
            raise ValueError(f"a sweep's grid is at least two ascending rates, not {self.grid}")
        if self.draws < 1:
            raise ValueError(f"a sweep trains at least one draw per rate, not {self.draws}")
        if not 0 <= self.extensions <= MAX_EXTENSIONS:
            raise ValueError(f"a sweep extends 0 to {MAX_EXTENSIONS} grid steps past an edge, not {self.extensions}")

    @property
    def step(self) -> float:
        return self.grid[1] / self.grid[0]


@dataclasses.dataclass(frozen=True)
class SweepRegion:
    """Sweeps that choose inside the stable region: each grid re-spaced to steps of `max_ratio` from its
    declared lowest rate to its highest (or just past it), every rate at `draws` draws, the choice the best rate
    whose next higher rate is stable on every draw (`Sweep.stable_margin`). A coarser grid or one draw ranks how
    large a step a model survives."""

    max_ratio: float
    draws: int

    def __post_init__(self) -> None:
        if self.max_ratio <= 1 or self.draws < 2:
            raise ValueError(f"a stable region needs a grid step above 1 and two draws a rate at least, not {self}")

    def applied(self, sweep: Sweep) -> Sweep:
        """`sweep` re-spaced from its lowest rate by `max_ratio` to its highest or just past it, every rate at `draws`
        draws, with the stable margin."""
        low, high = sweep.grid[0], sweep.grid[-1]
        steps = math.ceil(math.log(high / low) / math.log(self.max_ratio) - 1e-9)
        grid = tuple(rate(low * self.max_ratio**i) for i in range(steps + 1))
        return dataclasses.replace(sweep, grid=grid, draws=self.draws, stable_margin=True)


STABLE_REGION = SweepRegion(max_ratio=2.0, draws=2)  # the judged comparisons' below paper scale (issue 83: 13 of 32
# sweeps on a x3.3 grid chose the rate one step below one that spiked, split or diverged)


class Point(NamedTuple):
    """One draw of a sweep point as a sweep reads it: its final validation loss (None: diverged) and, where its
    training was unstable, why (`harness.stability.instability`)."""

    loss: float | None
    unstable: str | None = None

    @property
    def eligible(self) -> bool:
        return self.unstable is None and self.loss is not None and math.isfinite(self.loss)

    def describe(self) -> str:
        if self.loss is None or not math.isfinite(self.loss):
            return "diverged"
        return f"{self.loss:.4f}" + (f" (unstable: {self.unstable})" if self.unstable else "")


Points = dict[float, dict[int, Point]]  # rate -> draw (1, 2, ...) -> its point


def score(draws: dict[int, Point]) -> float:
    """A rate's mean final loss over its draws; infinite where one diverged or was unstable (never chosen)."""
    if not draws or not all(point.eligible for point in draws.values()):
        return math.inf
    return statistics.fmean(point.loss for point in draws.values())


@dataclasses.dataclass(frozen=True)
class Choice:
    """Where a sweep stands: the chosen rate (None until decided), the next point to train (`next`, at draw
    `next_draw`; None: none), each finished draw at each rate, and whether the best sat at an edge it could not
    pass."""

    lr: float | None
    next: float | None
    points: Points
    at_edge: bool = False
    carried_best: bool | None = None  # a checked carried rate: no neighbour better beyond one draw's noise here
    next_draw: int = 1

    @property
    def losses(self) -> dict[float, float | None]:
        """Each tried rate's mean final loss over its draws (None: a draw diverged or was unstable)."""
        return {lr: (mean if math.isfinite(mean := score(draws)) else None) for lr, draws in self.points.items()}

    def draws_at(self, lr: float) -> list[float]:
        """The finished draws' final losses at rate `lr`."""
        return [p.loss for p in self.points.get(rate(lr), {}).values() if p.loss is not None]

    def describe(self) -> str:
        if not self.points:
            return "carried over, not trained at other rates at this size"
        tried = ", ".join(f"{lr:g}: {_described(draws)}" for lr, draws in sorted(self.points.items()))
        where = "at the edge after the extensions allowed" if self.at_edge else "interior"
        verdict = "within" if self.carried_best else "not within"
        check = (
            ""
            if self.carried_best is None
            else f"; the carried lr is {verdict} one draw's noise of the best of it and its neighbours here"
        )
        return f"final validation loss at each lr ({tried}); best {where}{check}"


def _described(draws: dict[int, Point]) -> str:
    each = " / ".join(point.describe() for _, point in sorted(draws.items()))
    mean = score(draws)
    return f"{each} (mean {mean:.4f})" if len(draws) > 1 and math.isfinite(mean) else each


def sweep_point(run: Run, lr: float, draw: int = 1) -> Run:
    """`run` at rate `lr` on its `draw`-th sweep seed, the `draw`-th before the run's own (a pinned data seed shifts
    with it)."""
    data = {**run.data, "seed": run.data["seed"] - draw} if "seed" in run.data else run.data
    return dataclasses.replace(
        tuned(run, rate(lr)),
        name=sweep_name(run.name, lr, draw),
        seed=run.seed - draw,
        data=data,
        sweep=None,
        lr_sweep=True,
    )


def declared_rates(sweep: Sweep, anchor_of: Callable[[str], Sweep]) -> frozenset[float]:
    """Every rate `sweep` can train, as names carry them: its grid and MAX_EXTENSIONS steps past either edge; an
    anchored one's, each its anchor can choose times `scale`, one step up and MAX_EXTENSIONS + 1 down (`fallback`)."""

    def walk(start: float, factor: float, steps: int) -> list[float]:  # step by step, rounded as `choose` steps
        return [start] if steps == 0 else [start, *walk(rate(start * factor), factor, steps - 1)]

    if sweep.anchor is None:
        edges = (
            *walk(rate(sweep.grid[0]), 1 / sweep.step, MAX_EXTENSIONS),
            *walk(rate(sweep.grid[-1]), sweep.step, MAX_EXTENSIONS),
        )
        return frozenset(map(rate, (*sweep.grid, *edges)))
    carried = {rate(lr * sweep.scale) for lr in declared_rates(anchor_of(sweep.anchor), anchor_of)}
    return frozenset(x for c in carried for x in (rate(c * sweep.step), *walk(c, 1 / sweep.step, MAX_EXTENSIONS + 1)))


def neighbours(sweep: Sweep, lr: float) -> tuple[float, float, float]:
    """`lr` between its two neighbours on `sweep`'s grid spacing."""
    return rate(lr / sweep.step), rate(lr), rate(lr * sweep.step)


def stable_run(run: Run, lr: float) -> Run:
    """`run`'s claim seeds at rate `lr` below its sweep's choice, under a name of their own (`fallback`)."""
    return dataclasses.replace(tuned(run, rate(lr)), name=stable_name(run.name, lr), sweep=None)


def planned_points(sweep: Sweep) -> tuple[tuple[float, int], ...]:
    """(rate, draw) of the points a sweep trains at least (before any extension): its grid, and the further draws of
    the best rate and of one neighbour within its noise, as most sweeps draw (shown at the grid's middle: where the
    best lies is known only once trained); a checked anchor's three (about the grid's middle)."""
    middle = neighbours(sweep, sweep.grid[len(sweep.grid) // 2])
    if sweep.anchor is not None:
        return tuple((lr, 1) for lr in middle) if sweep.check else ()
    grid = tuple(map(rate, sweep.grid))
    if sweep.stable_margin:
        return tuple((lr, k) for k in range(1, sweep.draws + 1) for lr in grid)
    return (*((lr, 1) for lr in grid), *((lr, k) for k in range(2, sweep.draws + 1) for lr in middle[1:] if lr in grid))


def at_scale_sweep(sweep: Sweep, cap: SweepCap | None) -> Sweep:
    """`sweep` held to a scale's `cap`: the middle rates of its grid, its draws and extensions at most the cap's."""
    if cap is None:
        return sweep
    start = max(0, (len(sweep.grid) - cap.rates) // 2)
    return dataclasses.replace(
        sweep,
        grid=sweep.grid[start : start + cap.rates],
        draws=min(sweep.draws, cap.draws),
        extensions=min(sweep.extensions, cap.extensions),
    )


def tuned(run: Run, lr: float) -> Run:
    """`run` at rate `lr`: its budget's, or the option its sweep names."""
    option = run.sweep.rate_option if run.sweep else None
    if option is not None:
        return dataclasses.replace(run, lm={**run.lm, option: lr})
    return dataclasses.replace(run, budget=dataclasses.replace(run.budget, lr=lr))
