"""The figures beside a table, drawn from every seed: each seed's value a small point (each seed's curve a thin
line) beside the seeds' mean with their spread, and each series labelled where its claim seeds fell back below their
sweep's rate or trained unstably (a reader must not take those for the tuned run's). Seed 1 alone would show its
noise as a shape: Fig. 6's dip at residual 768 at cpu was seed 1's."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scaling_axes.harness.claims.margins import seeds_of
from scaling_axes.harness.results import pyplot, save_figure
from scaling_axes.harness.stability import unstable_seeds

Point = tuple[float, float, float, tuple[float, ...]]  # x, the seeds' mean, their standard deviation (0 for one
# seed), and each seed's value in seed order
Curve = list[tuple[float, float]]


def _mean(values: list[float]) -> tuple[float, float, tuple[float, ...]]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0, tuple(values)


def over_seeds(
    done: dict | None, value: Callable[[dict], float | None] = lambda d: d.get("val_loss")
) -> tuple[float, float, tuple[float, ...]] | None:
    """(mean, standard deviation, each seed's) of `value` over a finished run's seeds (`done` with its `seed_runs`);
    None where no seed has it."""
    values = [float(v) for each in seeds_of(done).values() if isinstance(v := value(each), (int, float))]
    return _mean(values) if values else None


def mean_curve(curves: list[Curve]) -> list[Point]:
    """The seeds' curves (each (step, value)) as their mean and spread at every step all of them logged."""
    curves = [dict(curve) for curve in curves if curve]
    if not curves:
        return []
    steps = sorted(set.intersection(*(set(curve) for curve in curves)))
    return [(step, *_mean([curve[step] for curve in curves])) for step in steps]


def seed_curves(done: dict | None, curve_of: Callable[[dict], Curve]) -> list[Point]:
    """`curve_of` each seed of a finished run, as their mean and spread (`mean_curve`)."""
    return mean_curve([curve_of(each) for each in seeds_of(done).values()])


def caveats(done: dict | None) -> list[str]:
    """What a reader of a finished run's points must know: the rate its claim seeds fell back to, below its sweep's
    choice, and its seeds that trained unstably."""
    notes = [f"fallback lr {fell['lr']:g}"] if (fell := (done or {}).get("stable_fallback")) else []
    if unstable := unstable_seeds(seeds_of(done)):
        notes.append(f"unstable: seed{'s' * (len(unstable) > 1)} {', '.join(map(str, sorted(unstable)))}")
    return notes


def marked(name: str, done: dict | None) -> str:
    """`name` with its seeds and its `caveats`."""
    seeds = len(seeds_of(done))
    notes = [f"{seeds} seed{'s' * (seeds != 1)}"] * bool(seeds) + caveats(done)
    return f"{name} ({'; '.join(notes)})" if notes else name


def draw(ax: Any, points: list[Point], label: str, style: str = "-o", **line: Any) -> None:
    """`points` as a line at the seeds' means: error bars at its markers, a band where it has none; and each seed
    drawn beside it, a point at a marker, a thin line along a curve."""
    if not points:
        return
    xs, means, spreads, seeds = zip(*points, strict=True)
    (drawn,) = ax.plot(xs, means, style, label=label, markersize=4, linewidth=1.2, **line)
    colour = drawn.get_color()
    if "o" in style or "s" in style:
        each = [(x, value) for x, values in zip(xs, seeds, strict=True) for value in values]
        ax.plot(*zip(*each, strict=True), ".", color=colour, markersize=2.5, alpha=0.6)
    elif len({len(values) for values in seeds}) == 1:
        for k in range(len(seeds[0])):
            ax.plot(xs, [values[k] for values in seeds], "-", color=colour, linewidth=0.4, alpha=0.5)
    if any(spreads):
        if "o" in style:
            ax.errorbar(xs, means, yerr=spreads, fmt="none", ecolor=colour, capsize=2, linewidth=0.8)
        else:
            low, high = zip(*((m - s, m + s) for m, s in zip(means, spreads, strict=True)), strict=True)
            ax.fill_between(xs, low, high, color=colour, alpha=0.2, linewidth=0)


def line_figure(
    path: Path,
    series: dict[str, list[Point]],
    *,
    markers: bool = True,
    notes: tuple[tuple[str, float, float], ...] = (),
    **axes: Any,
) -> None:
    """One line per series (label -> points over seeds, plotted in order), each of `notes` (text, x, y) written at
    its point, axis settings as `Axes.set` keywords. Without a point to draw, no figure: an empty axis is not
    written (and an earlier one at `path` goes), so none is linked."""
    if not any(series.values()):
        Path(path).unlink(missing_ok=True)
        return
    fig, ax = pyplot().subplots(figsize=(6.5, 4.2))
    for label, points in series.items():
        draw(ax, points, label, "-o" if markers else "-")
    for text, x, y in notes:
        ax.annotate(text, (x, y), fontsize=6)
    ax.set(**axes)
    save_figure(fig, path)


def margins_panel(ax: Any, claims: list, unit: str, label: Callable[[str], str] = str) -> None:
    """Each claim row's paired margin at each seed (`Row.evidence`), a point per seed beside their mean: the
    quantity the claim tests, at a resolution its final losses cannot show (a margin of hundredths of a nat on
    losses of nats)."""
    shown = [row for row in claims if row.evidence is not None and row.evidence.margins]
    for y, row in enumerate(shown):
        margins = row.evidence.margins
        ax.plot(margins, [y] * len(margins), ".", color=f"C{y}", markersize=4, alpha=0.7)
        ax.plot(statistics.fmean(margins), y, "D", color=f"C{y}", markersize=5)
    ax.axvline(0, color="grey", linewidth=0.8)
    ax.set_yticks(range(len(shown)), [label(row.row) for row in shown], fontsize=6)
    ax.set_ylim(len(shown) - 0.5, -0.5)
    ax.set_xlabel(f"paired margin per seed ({unit}; > 0: the paper's direction)", fontsize=7)
    ax.set_title("each claim's margin at each seed (diamond: their mean)", fontsize=8)
