"""RMT Fig. 2: validation loss against compute (top panel) and parameters (bottom) for four Transformers and RMTs.

Each model trains on its Table 8/9 budget (see `experiments.rmt.setup`). Reported per run: the validation loss on
the held-out OpenWebText split, parameters, tokens and training FLOPs (3 x matmul FLOPs counted on the model);
per family, the fitted power law loss = a * FLOPs^b when at least two runs have finished. As the paper's Fig. 2, the
305M RMT is read at its own Chinchilla budget, 20 x its non-embedding parameters (4.03e9 tokens, interpolated on its
validation curve), not at the 6.04e9 it trains to for Tables 3-4.
"""

from __future__ import annotations

import functools
import itertools
import math
import statistics
from pathlib import Path

import numpy as np

from scaling_axes.experiments.rmt import setup as rmt_setup
from scaling_axes.experiments.rmt.recipes import shrunk_at
from scaling_axes.experiments.rmt.setup import value_at
from scaling_axes.harness.claims.margins import paired_margins, seeds_of
from scaling_axes.harness.claims.verdicts import judge, lower_loss
from scaling_axes.harness.experiment.figures import caveats, draw, over_seeds
from scaling_axes.harness.results import Row, compare, published, pyplot, save_figure
from scaling_axes.harness.runs import Experiment, Run, fitted
from scaling_axes.harness.scales import Scale
from scaling_axes.modules.flops import non_embedding_params

LOSS_TOLERANCE = 0.02


@fitted
def runs(scale: Scale) -> list[Run]:
    return [rmt_setup.scaling_run(model, scale) for model in rmt_setup.TRANSFORMERS + rmt_setup.RMTS]


def read_tokens(run: Run, scale: Scale) -> float:
    """Where Fig. 2 reads a run: its budget, or its token rule's budget where it ran past it (the largest RMT, on
    the largest Transformer's tokens): 20 x App. A's non-embedding count at paper scale, the recipe's rule below."""
    if scale.paper_configs:
        chinchilla = 20 * rmt_setup.table7_non_embedding(run.config)
    elif rule := shrunk_at(scale).tokens_per_parameter:
        chinchilla = rule * non_embedding_params(run.config)
    else:
        return run.budget.tokens
    return chinchilla if run.budget.tokens > 1.05 * chinchilla else run.budget.tokens


def point(run: Run, done: dict, scale: Scale, at_end: bool = False) -> dict[str, float] | None:
    """Tokens, training FLOPs, parameters and validation loss of one run at its Fig. 2 reading (`at_end`: at the end
    of its own schedule, its final loss on the whole split, as the claim reads it), if it finished."""
    if not done or not math.isfinite(done["val_loss"]):
        return None
    tokens = run.budget.tokens if at_end else read_tokens(run, scale)
    fraction = tokens / run.budget.tokens
    loss = done["val_loss"] if fraction == 1 else value_at(done["val_loss_curve"], run.budget.steps * fraction)
    return {"tokens": tokens, "train_flops": run.train_flops() * fraction, "params": done["params"], "val_loss": loss}


def report(scale: Scale, results: dict[str, dict]) -> list[Row]:
    paper = published("rmt")
    rows = []
    for run in runs(scale):
        values = point(run, results.get(run.name, {}), scale)
        tokens = read_tokens(run, scale)
        early = tokens < run.budget.tokens
        expected = paper.get(("table4", run.name, "dev_loss")) if scale.paper_configs and not early else None
        note = "; ".join(
            filter(None, (scale.note, f"read at {tokens:.3g} tokens of {run.budget.tokens:.3g}" if early else ""))
        )
        loss = values["val_loss"] if values else None
        rows.append(
            Row(
                table="fig2",
                row=run.name,
                metric="val_loss",
                paper=expected,
                ours=loss,
                unit="nats/token",
                run=run.name,
                status=compare(expected, loss, LOSS_TOLERANCE),
                note=note,
            )
        )
        rows.append(
            Row(
                table="fig2",
                row=run.name,
                metric="params",
                paper=None,
                ours=values and values["params"],
                unit="parameters",
                run=run.name,
                status="measured" if values else "not_run",
            )
        )
        rows.append(
            Row(
                table="fig2",
                row=run.name,
                metric="train_flops",
                paper=None,
                ours=run.train_flops() * tokens / run.budget.tokens,
                unit="FLOPs",
                run=run.name,
            )
        )
        rows.append(
            Row(table="fig2", row=run.name, metric="tokens", paper=None, ours=tokens, unit="tokens", run=run.name)
        )
    rows += claim_rows(scale, results)
    for family, points in _points(scale, results).items():
        if len(points) >= 2:
            exponent, _ = np.polyfit(
                np.log([p["train_flops"] for p in points]), np.log([p["val_loss"] for p in points]), 1
            )
            note = f"least squares on log-log over {len(points)} runs; {scale.note}".strip("; ")
            rows.append(
                Row(
                    table="fig2",
                    row=family,
                    metric="loss_vs_flops_exponent",
                    paper=None,
                    ours=float(exponent),
                    unit="",
                    status="measured",
                    note=note,
                )
            )
    return rows


def claim_rows(scale: Scale, results: dict[str, dict]) -> list[Row]:
    """Fig. 2's claim, per RMT: its loss lies below the Transformers' at equal training FLOPs. Every run is read at
    the end of its own finished schedule (its Fig. 2 reading), never mid-schedule: the Transformers' finished
    points, interpolated in log-log between the two that bracket the RMT's FLOPs (extrapolated from the nearest two
    outside them), give the Transformer's loss at the RMT's FLOPs. Margin per seed: that loss minus the RMT's."""
    by_name = {run.name: run for run in runs(scale)}
    rows = [ladder_row(family, results) for family in (rmt_setup.TRANSFORMERS, rmt_setup.RMTS)]
    control = (rmt_setup.TRANSFORMER, rmt_setup.CONTROL)
    rows.append(lower_loss("fig2", rmt_setup.CONTROL_STATEMENT, scale, *control, results))
    for rmt in rmt_setup.RMTS:
        names = (rmt, *rmt_setup.TRANSFORMERS)
        margins = paired_margins(results, names, functools.partial(_gap_to_transformer_frontier, scale, by_name, names))
        rows.append(
            judge(
                "fig2",
                f"{rmt}_vs_transformers",
                "the RMT reaches a lower loss than the Transformers at equal training FLOPs (finished schedules)",
                scale,
                margins,
                "nats/token",
                runs=names,
            )
        )
    return rows


def ladder_row(family: tuple[str, ...], results: dict[str, dict]) -> Row:
    """Whether a family's final losses (mean over seeds) fall with size, as a scaling ladder's must for a law or a
    frontier to be read off it; the row says where they do not."""
    means = [
        statistics.mean(d["val_loss"] for d in seeds_of(results.get(name)).values()) if name in results else None
        for name in family
    ]
    name = family[0].rsplit("_", 1)[0]
    if None in means:
        return Row(table="fig2", row=name, metric="loss_falls_with_size", status="not_run", run=",".join(family))
    rises = [f"{a} -> {b}" for (a, x), (b, y) in itertools.pairwise(zip(family, means, strict=True)) if y >= x]
    listed = ", ".join(f"{m:.3f}" for m in means)
    note = (
        f"final losses by size {listed}: it does not improve at {'; '.join(rises)}, so no law or frontier of "
        f"this family at this scale means much"
        if rises
        else f"final losses by size {listed}"
    )
    return Row(
        table="fig2",
        row=name,
        metric="loss_falls_with_size",
        ours=float(not rises),
        unit="yes/no",
        run=",".join(family),
        status="measured",
        note=note,
    )


def _gap_to_transformer_frontier(
    scale: Scale, by_name: dict[str, Run], names: tuple[str, ...], *done: dict
) -> float | None:
    """The Transformers' frontier loss at the RMT's FLOPs minus the RMT's loss (`names[0]`, then the Transformers)."""
    rmt, *transformers = (point(by_name[name], d, scale, at_end=True) for name, d in zip(names, done, strict=True))
    finished = sorted((p["train_flops"], p["val_loss"]) for p in transformers if p is not None)
    if rmt is None or len(finished) < 2:
        return None
    flops = math.log(rmt["train_flops"])
    logs = [(math.log(f), math.log(loss)) for f, loss in finished]
    inside = [i for i in range(len(logs) - 1) if logs[i][0] <= flops <= logs[i + 1][0]]
    i = inside[0] if inside else (0 if flops < logs[0][0] else len(logs) - 2)
    (x0, y0), (x1, y1) = logs[i], logs[i + 1]
    return math.exp(y0 + (y1 - y0) * (flops - x0) / (x1 - x0)) - rmt["val_loss"]


def _points(scale: Scale, results: dict[str, dict]) -> dict[str, list[dict[str, float]]]:
    points: dict[str, list[dict[str, float]]] = {}
    for run in runs(scale):
        if (values := point(run, results.get(run.name, {}), scale)) is not None:
            points.setdefault(rmt_setup.family(run.model), []).append(values)
    return points


def figure(scale: Scale, results: dict[str, dict], path: Path) -> None:
    """Each family's loss at its Fig. 2 reading against training FLOPs and parameters: each point its seeds' mean
    and spread, the runs whose seeds fell back or trained unstably named beside it."""
    points: dict[str, list[tuple[dict[str, float], tuple[float, float], list[str]]]] = {}
    for run in runs(scale):
        done = results.get(run.name)
        if (values := point(run, done or {}, scale)) is not None:
            loss = over_seeds(done, lambda each, run=run: (point(run, each, scale) or {}).get("val_loss"))
            points.setdefault(rmt_setup.family(run.model), []).append((values, loss, caveats(done)))
    fig, axes = pyplot().subplots(2, 1, figsize=(6.5, 7))
    for family, finished in points.items():
        for ax, x in zip(axes, ("train_flops", "params"), strict=True):
            ordered = sorted(finished, key=lambda p: p[0][x])
            draw(ax, [(values[x], *loss) for values, loss, _ in ordered], family)
            for values, loss, notes in ordered:
                if notes:
                    ax.annotate("; ".join(notes), (values[x], loss[0]), fontsize=6)
    axes[0].set(
        xscale="log",
        xlabel="training FLOPs",
        ylabel="validation loss (nats/token)",
        title=f"RMT Fig. 2: scaling ({scale} scale)",
    )
    axes[1].set(xscale="log", xlabel="model parameters", ylabel="validation loss (nats/token)")
    save_figure(fig, path)


EXPERIMENT = Experiment(
    name="rmt_fig2_scaling_laws",
    description=__doc__.splitlines()[0],
    runs=runs,
    report=report,
    figure=figure,
    run_group="rmt_scaling",
    comparisons=lambda scale: rmt_setup.comparisons(scale)[:-1],
)
