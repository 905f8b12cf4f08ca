"""Learning-rate sweeps that the harness runs before the runs a claim compares.

A run declared with a `Sweep` trains at the learning rate its sweep chose, never at the one its budget names. The
sweep trains the run at each rate of its grid, on the seed before the run's own (`sweep_point`: a seed no claim is
judged on; the claims' seeds 1..n then train at the chosen rate), and chooses the rate of the lowest final
validation loss. A best rate at an edge of what was tried is not a choice: the sweep extends one grid step past that
edge and trains again, until the best is interior (or MAX_EXTENSIONS steps past the grid, where the run is flagged
`at_edge` and no claim is decided on it). A diverged point counts as the worst.

A sweep may be another run's (`anchor`): a family of sizes tuned once and the rate carried over by a stated rule
(`rule`, such as muP's width transfer); `check` trains this run at the carried rate and at its two grid neighbours
(on the sweep seed), and the report says whether the rate is still the best of the three there.

Identical sweep points declared by several experiments are one run (`runner.link_identical`), so a model and budget
is swept once.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import TypeVar

Run = TypeVar("Run")  # a `harness.runs.Run` (runs imports this module, so not the other way round)

SWEEP_INFIX = "_sweep_lr"  # a sweep point of run R at rate x is R_sweep_lr<x>
MAX_EXTENSIONS = 3  # grid steps a sweep may extend past either edge


@dataclasses.dataclass(frozen=True)
class Sweep:
    """A run's learning-rate sweep: a geometric `grid` (ascending), or the rate of run `anchor`'s sweep carried over
    by `rule` (and with `check`, its two grid neighbours trained at this run's size too)."""

    grid: tuple[float, ...]
    anchor: str | None = None
    rule: str = ""
    check: bool = False
    per_rate: dict[str, float] = dataclasses.field(default_factory=dict)  # LanguageModel options set to value / lr
    # at each rate (the RMT code's decay: weight_decay = 1e-4 / lr, a fixed decay per step)
    rate_option: str | None = None  # the LanguageModel option the rate is (None: the budget's lr), e.g. a scale on
    # fixed per-group rates

    def __post_init__(self) -> None:
        if len(self.grid) < 2 or list(self.grid) != sorted(self.grid):
            raise ValueError(f"a sweep's grid is at least two ascending rates, not {self.grid}")

    @property
    def step(self) -> float:
        return self.grid[1] / self.grid[0]


@dataclasses.dataclass(frozen=True)
class Choice:
    """Where a sweep stands: the chosen rate (None until decided), the next rate to train (None: none), each finished
    rate's final validation loss (None: diverged), and whether the best sat at an edge it could not pass."""

    lr: float | None
    next: float | None
    losses: dict[float, float | None]
    at_edge: bool = False
    carried_best: bool | None = None  # a checked carried rate: still the best of it and its neighbours here

    def describe(self) -> str:
        if not self.losses:
            return "carried over, not trained at other rates at this size"
        tried = ", ".join(f"{lr:g}: {'diverged' if loss is None else f'{loss:.4f}'}"
                          for lr, loss in sorted(self.losses.items()))  # fmt: skip
        where = "at the edge after the extensions allowed" if self.at_edge else "interior"
        verdict = "the best" if self.carried_best else "not the best"
        check = "" if self.carried_best is None else f"; the carried lr is {verdict} of it and its neighbours here"
        return f"final validation loss at each lr ({tried}); best {where}{check}"


def is_rate(text: str) -> bool:
    """Whether `text` (a sweep point's name after SWEEP_INFIX) is a finite number."""
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def rate(lr: float) -> float:
    """A rate as the sweep names it (six significant digits), so that extensions land on the names they had."""
    return float(f"{lr:.6g}")


def sweep_point(run: Run, lr: float) -> Run:
    """`run` at rate `lr` on the sweep's seed (the one before the run's own; a pinned data seed shifts with it)."""
    data = {**run.data, "seed": run.data["seed"] - 1} if "seed" in run.data else run.data
    return dataclasses.replace(tuned(run, rate(lr)), name=f"{run.name}{SWEEP_INFIX}{rate(lr):g}", seed=run.seed - 1,
                               data=data, sweep=None, lr_sweep=True)  # fmt: skip


def choose(sweep: Sweep, losses: dict[float, float | None]) -> Choice:
    """The next point to train, or the chosen rate, from the finished points' `losses`."""
    grid, step = sweep.grid, sweep.step
    if missing := [lr for lr in map(rate, grid) if lr not in losses]:
        return Choice(None, missing[0], losses)
    tried = sorted(losses)
    finished = {lr: loss for lr, loss in losses.items() if loss is not None and math.isfinite(loss)}
    best = min(finished, key=finished.get) if finished else tried[0]
    below = round(math.log(grid[0] / tried[0], step)) < MAX_EXTENSIONS
    above = round(math.log(tried[-1] / grid[-1], step)) < MAX_EXTENSIONS
    if best == tried[0] and below:
        return Choice(None, rate(best / step), losses)
    if best == tried[-1] and above and finished:
        return Choice(None, rate(best * step), losses)
    return Choice(best, None, losses, at_edge=best in (tried[0], tried[-1]))


def neighbours(sweep: Sweep, lr: float) -> tuple[float, float, float]:
    """`lr` between its two neighbours on `sweep`'s grid spacing."""
    return rate(lr / sweep.step), rate(lr), rate(lr * sweep.step)


def checked(sweep: Sweep, anchor: Choice, losses: dict[float, float | None]) -> Choice:
    """An anchored run's points: the carried rate and, with `check`, its two grid neighbours."""
    lr = anchor.lr
    wanted = neighbours(sweep, lr) if sweep.check else ()
    if missing := [each for each in wanted if each not in losses]:
        return Choice(None, missing[0], losses, anchor.at_edge)
    finite = {each: losses[each] for each in wanted if losses[each] is not None and math.isfinite(losses[each])}
    best = min(finite, key=finite.get) == rate(lr) if finite else False
    return Choice(lr, None, losses, anchor.at_edge, best if wanted else None)


def tune(run: Run, losses_of: Callable[[Run], dict[float, float | None]],
         anchor_of: Callable[[str], Run], train: Callable[[Run], None] | None = None) -> Choice:  # fmt: skip
    """Where `run`'s sweep stands (`losses_of(run)`: its finished points), training each next point with `train`
    until it has chosen (without `train`: as far as the points on disk go). An anchored run's rate is its anchor's."""
    sweep = run.sweep
    if sweep.anchor is not None:
        anchor = tune(anchor_of(sweep.anchor), losses_of, anchor_of, train)
        if anchor.lr is None:
            return anchor
        step = lambda: checked(sweep, anchor, losses_of(run))  # noqa: E731
    else:
        step = lambda: choose(sweep, losses_of(run))  # noqa: E731
    choice = step()
    while choice.next is not None and train is not None:
        train(sweep_point(run, choice.next))
        choice = step()
    return choice


def planned_rates(sweep: Sweep) -> tuple[float, ...]:
    """The rates a sweep trains at least (before any extension): its grid, or a checked anchor's three (about the
    grid's middle, before the anchor has chosen)."""
    if sweep.anchor is None:
        return tuple(map(rate, sweep.grid))
    return neighbours(sweep, sweep.grid[len(sweep.grid) // 2]) if sweep.check else ()


def tuned(run: Run, lr: float) -> Run:
    """`run` at rate `lr` (its budget's, or the option its sweep names), with the options its sweep sets per rate."""
    per_rate, option = (run.sweep.per_rate, run.sweep.rate_option) if run.sweep else ({}, None)
    lm = {**run.lm, **{key: value / lr for key, value in per_rate.items()}}
    if option is not None:
        return dataclasses.replace(run, lm={**lm, option: lr})
    return dataclasses.replace(run, budget=dataclasses.replace(run.budget, lr=lr), lm=lm)
