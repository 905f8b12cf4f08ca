"""The progressive-scaling figure (Tokenformer Figs. 3 and 4): perplexity against training FLOPs, each growth chain
cumulated along the chain, and perplexity per stage against parameters, every seed drawn beside the means."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scaling_axes.harness.experiment.figures import draw, over_seeds
from scaling_axes.harness.results import pyplot, save_figure
from scaling_axes.harness.runs import Run, growth_chain


def figure(title: str, runs: list[Run], results: dict[str, dict], path: Path) -> None:
    """Left (Fig. 3): perplexity against training FLOPs, each growth chain cumulated along the chain, from-scratch runs
    alone. Right (Fig. 4): perplexity per stage against parameters, each stage budget's grown chain beside the
    Transformers trained from scratch on that same budget."""
    fig, (ax, per_stage) = pyplot().subplots(1, 2, figsize=(12, 4.2))
    _cost_panel(ax, runs, results, title)
    _stage_panel(per_stage, runs, results)
    save_figure(fig, path)


def _stage_panel(ax: Any, runs: list[Run], results: dict[str, dict]) -> None:
    series: dict[str, list[tuple[float, float]]] = {}
    labels = {r.name.rsplit("_", 1)[1] for r in runs if r.grow_from}
    for run in runs:
        family, label = run.model.split("_")[0].capitalize(), run.name.rsplit("_", 1)[1]
        if label in labels and run.name in results:
            how = "grown" if run.grow_from else "from scratch"
            series.setdefault(f"{family} {how} ({label})", []).append(
                (results[run.name]["params"], *over_seeds(results[run.name], lambda d: d.get("val_ppl")))
            )
    for key, points in series.items():
        draw(ax, sorted(points), key, "-o" if "grown" in key else "--s")
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="parameters",
        ylabel="validation perplexity",
        title="per stage, same tokens per stage (Fig. 4)",
    )


def _cost_panel(ax: Any, runs: list[Run], results: dict[str, dict], title: str) -> None:
    by_name = {r.name: r for r in runs}
    grown_from = {r.grow_from for r in runs}
    scratch: dict[str, list[tuple[float, float]]] = {}
    for run in runs:
        family, label = run.model.split("_")[0].capitalize(), run.name.rsplit("_", 1)[1]
        if run.grow_from:
            if run.name in grown_from:
                continue  # plotted as part of the chain of its last stage
            path_runs = [r for r in reversed(growth_chain(run, by_name)) if r.name in results]
            flops = [sum(s.train_flops() for s in growth_chain(r, by_name)) for r in path_runs]
            ppl = [over_seeds(results[r.name], lambda d: d.get("val_ppl")) for r in path_runs]
            draw(ax, [(x, *y) for x, y in zip(flops, ppl, strict=True)], f"{family} grown ({label}/stage)")
        elif run.name not in grown_from and run.name in results:
            scratch.setdefault(f"{family} from scratch ({label})", []).append(
                (run.train_flops(), *over_seeds(results[run.name], lambda d: d.get("val_ppl")))
            )
    for key, points in scratch.items():
        draw(ax, sorted(points), key, "--s")
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="training FLOPs (cumulative along a growth chain)",
        ylabel="validation perplexity",
        title=title,
    )
