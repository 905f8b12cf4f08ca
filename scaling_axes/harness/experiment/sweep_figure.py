"""`<experiment>_sweeps.png` beside a table (issue 83): a panel for each run that chose its rate by a sweep of its own,
its final validation loss against the rate (log axis), each draw a dot, their mean a line,
a draw that trained unstably a cross at its loss and one that diverged a cross at the panel's top, the rate chosen a
ring. Drawn in the runs' order, so that the same files give the same bytes."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from scaling_axes.harness.results import pyplot, save_figure
from scaling_axes.harness.sweeps import Choice


def sweep_figure(results: dict[str, dict], path: Path, title: str) -> bool:
    """The figure of every swept run in `results` (done.json by name); False, nothing written, where none swept."""
    swept = {
        name: done["tuning"]
        for name, done in sorted(results.items())
        if getattr((done or {}).get("tuning"), "points", None) and not done.get("tuning_anchor")
    }
    if not swept:
        return False
    columns = min(3, len(swept))
    rows = math.ceil(len(swept) / columns)
    fig, axes = pyplot().subplots(rows, columns, figsize=(3.6 * columns, 2.9 * rows), squeeze=False)
    for ax, (name, choice) in zip(axes.flat, swept.items(), strict=False):
        _panel(ax, name, choice)
    for ax in list(axes.flat)[len(swept) :]:
        ax.axis("off")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    save_figure(fig, path)
    return True


def _panel(ax, name: str, choice: Choice) -> None:
    rates = sorted(choice.points)
    finite = [p.loss for draws in choice.points.values() for p in draws.values() if p.loss is not None]
    top = max(finite) if finite else 1.0
    means = {}
    for lr in rates:
        draws = list(choice.points[lr].values())
        kept = [p.loss for p in draws if p.loss is not None and p.unstable is None]
        if len(kept) == len(draws):
            means[lr] = statistics.fmean(kept)
        ax.plot([lr] * len(kept), kept, ".", color="C0", markersize=4)
        bad = [top if p.loss is None else p.loss for p in draws if p.loss is None or p.unstable]
        ax.plot([lr] * len(bad), bad, "x", color="C3", markersize=6)
    ax.plot(list(means), list(means.values()), "-", color="C0", linewidth=1)
    if choice.lr in means:
        ax.plot(choice.lr, means[choice.lr], "o", color="C0", fillstyle="none", markersize=9)
    ax.set_xscale("log")  # labelled at round rates by `save_figure`, as every log axis of the suite
    ax.tick_params(labelsize=6)
    ax.set_title(name, fontsize=7)
    ax.set_xlabel("learning rate (Muon: factor on its rates)", fontsize=6)
    ax.set_ylabel("final val. loss (nats/token)", fontsize=6)
