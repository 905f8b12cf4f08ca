"""How a sweep chooses its rate from the points it has trained (the vocabulary is `harness.sweeps`).

One draw cannot choose: near the edge of stability the seeds of a rate spread by more than the gaps between rates, so
`choose` trains the best rate again on further sweep seeds (`Sweep.draws`), and each neighbour within the noise the
best's draws show (`within_noise`), and compares rates by their mean over draws; a rate with a diverged or unstable
draw is never chosen, and a best rate at an edge of what was tried extends the sweep past it (`may_extend`). With
`Sweep.stable_margin`, every rate is drawn `draws` times and the choice is the best rate whose next higher rate is
stable on every draw (`choose_stable`). An anchored run's rate is carried and, with `check`, its neighbours tried
(`checked`); claim seeds that train unstably fall back below (`fallback`). `tune` trains points until one is chosen.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable, Collection

from scaling_axes.harness.claims.margins import LOSS_NOISE_FLOOR
from scaling_axes.harness.names import rate
from scaling_axes.harness.sweeps import ONE_SEED_Z, Choice, Point, Points, Run, Sweep, neighbours, score, sweep_point


def choose(sweep: Sweep, points: Points) -> Choice:
    """The next point to train, or the chosen rate, from the finished `points`: the grid's first draws, an extension
    past an edge where the best is there, then further draws of the best rate and of each neighbour within the
    noise of it (`within_noise`), until the best by mean has all its draws and no neighbour is left undecided."""
    if sweep.stable_margin:
        return choose_stable(sweep, points)
    grid, step = sweep.grid, sweep.step
    if missing := [lr for lr in map(rate, grid) if 1 not in points.get(lr, {})]:
        return Choice(None, missing[0], points)
    tried = sorted(lr for lr, draws in points.items() if 1 in draws)
    scores = {lr: score(points[lr]) for lr in tried}
    best = min(tried, key=lambda lr: scores[lr])  # all infinite: the lowest
    below, above = may_extend(grid[0], tried[0], sweep), may_extend(tried[-1], grid[-1], sweep)
    if best == tried[0] and below:
        return Choice(None, rate(best / step), points)
    if best == tried[-1] and above and math.isfinite(scores[best]):
        return Choice(None, rate(best * step), points)
    i = tried.index(best)
    for lr in (best, *tried[max(0, i - 1) : i], *tried[i + 1 : i + 2]):
        undrawn = [k for k in range(2, sweep.draws + 1) if k not in points[lr]]
        if undrawn and math.isfinite(scores[lr]) and (lr == best or within_noise(points[best], points[lr])):
            return Choice(None, lr, points, next_draw=undrawn[0])
    return Choice(best, None, points, at_edge=best in (tried[0], tried[-1]))


def choose_stable(sweep: Sweep, points: Points) -> Choice:
    """The stable-region rule (`Sweep.stable_margin`): every rate tried, each at all its draws; the stable region
    the rates below the lowest that trained unstably on a draw (a rate above an unstable one is past the edge of
    stability however its draws went: the muP Transformer at cpu spiked at 0.006 and ended 0.4 nats worse at 0.012
    and 0.024 with no spike flagged); then the best rate by mean among those in the region whose next higher rate is
    in it too. It steps one grid step up where the best by mean is the highest rate tried (what lies above is
    unknown), and down where no rate qualifies or the best that does is the lowest; `at_edge` where it could step no
    further."""
    tried = sorted({*map(rate, sweep.grid), *points})
    for k in range(1, sweep.draws + 1):
        if missing := [lr for lr in tried if k not in points.get(lr, {})]:
            return Choice(None, missing[0], points, next_draw=k)
    scores = {lr: score(points[lr]) for lr in tried}
    best_any = min(tried, key=lambda lr: scores[lr])
    if best_any == tried[-1] and math.isfinite(scores[best_any]) and may_extend(tried[-1], sweep.grid[-1], sweep):
        return Choice(None, rate(tried[-1] * sweep.step), points)
    edge = min((lr for lr in tried if not math.isfinite(scores[lr])), default=math.inf)
    margin = [lr for lr, higher in itertools.pairwise(tried) if higher < edge]
    best = min(margin, key=lambda lr: scores[lr]) if margin else None
    if best in (None, tried[0]) and may_extend(sweep.grid[0], tried[0], sweep):
        return Choice(None, rate(tried[0] / sweep.step), points)
    return Choice(best, None, points, at_edge=best is None or best == tried[0] or best_any == tried[-1])


def may_extend(higher: float, lower: float, sweep: Sweep) -> bool:
    """Whether a sweep that has reached `lower` below its grid's `higher` edge (or `higher` above its `lower` edge)
    may take one more grid step past it: fewer than its `extensions` taken."""
    return round(math.log(higher / lower, sweep.step)) < sweep.extensions


def within_noise(best: dict[int, Point], other: dict[int, Point]) -> bool:
    """Whether rate `other`'s mean loss lies within the noise of the best's: less than ONE_SEED_Z standard errors of
    the difference above it, the best's draws giving the noise of one draw (at least LOSS_NOISE_FLOOR). A rate past
    the edge of stability draws far apart (the cross-architecture Transformer's two at 9e-3: 4.946 and 5.562), so
    its neighbours are drawn again; a stable best's draws agree (5.151 and 5.166 at 3e-3), and a neighbour 0.7
    nats worse (9e-4) is not."""
    losses = [point.loss for point in best.values()]
    noise = max(statistics.stdev(losses) if len(losses) > 1 else 0.0, LOSS_NOISE_FLOOR)
    bound = ONE_SEED_Z * noise * math.sqrt(1 / len(best) + 1 / len(other))
    return score(other) - score(best) < bound


def checked(sweep: Sweep, anchor: Choice, points: Points) -> Choice:
    """An anchored run's points: the carried rate (the anchor's times `sweep.scale`) and, with `check`, its two grid
    neighbours (one draw each). The carried rate stands where no neighbour beats it beyond one draw's noise
    (`within_noise`): Fig. 6's check at D_k 12 drew 4.7742 at the carried 0.01 and 4.7726 at 0.033, a difference no
    single draw can resolve."""
    lr = rate(anchor.lr * sweep.scale)
    wanted = neighbours(sweep, lr) if sweep.check else ()
    if missing := [each for each in wanted if 1 not in points.get(each, {})]:
        return Choice(None, missing[0], points, anchor.at_edge)
    if not wanted:
        return Choice(lr, None, points, anchor.at_edge)
    drawn = {each: {1: points[each][1]} for each in wanted}
    best = drawn[min(wanted, key=lambda each: score(drawn[each]))]
    return Choice(lr, None, points, anchor.at_edge, math.isfinite(score(best)) and within_noise(best, drawn[rate(lr)]))


def fallback(sweep: Sweep, points: Points, unstable_at: Collection[float]) -> Choice:
    """Where a run's claim seeds go when they trained unstably at each rate of `unstable_at` (the sweep's choice
    first): the best by mean of the rates tried below all of those whose draws were all stable (`lr`), after
    training the point one grid step below the lowest tried (`next`) where none is stable or the best is that
    lowest, as `choose` extends past an edge (MAX_EXTENSIONS below the grid; then `at_edge`). lr None: none left."""
    floor = min(unstable_at)
    below = {lr: score(draws) for lr, draws in points.items() if lr < floor}
    lowest = min((*below, floor))
    stable = {lr: loss for lr, loss in below.items() if math.isfinite(loss)}
    best = min(stable, key=stable.__getitem__) if stable else None
    if best in (None, lowest) and may_extend(sweep.grid[0], lowest, sweep):
        return Choice(None, rate(lowest / sweep.step), points)
    return Choice(best, None, points, at_edge=best is not None and best == lowest)


def tune(
    run: Run,
    points_of: Callable[[Run], Points],
    anchor_of: Callable[[str], Run],
    train: Callable[[Run], None] | None = None,
) -> Choice:
    """Where `run`'s sweep stands (`points_of(run)`: its finished points), training each next point with `train`
    until it has chosen (without `train`: as far as the points on disk go). An anchored run's rate is its anchor's."""
    sweep = run.sweep
    if sweep.anchor is not None:
        anchor = tune(anchor_of(sweep.anchor), points_of, anchor_of, train)
        if anchor.lr is None:
            return anchor
        step = lambda: checked(sweep, anchor, points_of(run))  # noqa: E731
    else:
        step = lambda: choose(sweep, points_of(run))  # noqa: E731
    choice = step()
    while choice.next is not None and train is not None:
        train(sweep_point(run, choice.next, choice.next_draw))
        choice = step()
    return choice
