"""RMT Fig. 2: validation loss against compute, parameters and tokens for four Transformers and four RMTs.

Each model trains on its Table 8/9 budget (see `experiments.rmt_setup`). Reported per run: the final validation loss
on the held-out OpenWebText split, parameters, tokens and training FLOPs (3 x matmul FLOPs counted on the model);
per family, the fitted power law loss = a * FLOPs^b when at least two runs have finished.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from experiments import rmt_setup
from experiments.results import Row, compare, line_figure, published, scale_note
from experiments.runner import Experiment, Run, main

LOSS_TOLERANCE = 0.02


def runs(scale: str) -> list[Run]:
    return [rmt_setup.scaling_run(model, scale) for model in rmt_setup.TRANSFORMERS + rmt_setup.RMTS]


def report(scale: str, results: dict[str, dict]) -> list[Row]:
    paper = published("rmt")
    rows = []
    for run in runs(scale):
        done = results.get(run.name, {})
        loss = done.get("val_loss")
        expected = paper.get(("table4", run.name, "dev_loss")) if scale == "paper" else None
        rows.append(Row("fig2", run.name, "val_loss", expected, loss, "nats/token", run.name,
                        compare(expected, loss, LOSS_TOLERANCE), scale_note(scale)))  # fmt: skip
        rows.append(Row("fig2", run.name, "params", None, done.get("params"), "parameters", run.name,
                        "measured" if done else "not_run"))  # fmt: skip
        rows.append(Row("fig2", run.name, "train_flops", None, run.train_flops(), "FLOPs", run.name))
        rows.append(Row("fig2", run.name, "tokens", None, run.budget.tokens, "tokens", run.name))
    for family, points in _points(scale, results).items():
        if len(points) >= 2:
            exponent, _ = np.polyfit(np.log([f for f, _ in points]), np.log([l for _, l in points]), 1)
            rows.append(
                Row(
                    "fig2",
                    family,
                    "loss_vs_flops_exponent",
                    None,
                    float(exponent),
                    "",
                    status="measured",
                    note=f"least squares on log-log over {len(points)} runs; {scale_note(scale)}".strip("; "),
                )
            )
    return rows


def _points(scale: str, results: dict[str, dict]) -> dict[str, list[tuple[float, float]]]:
    points: dict[str, list[tuple[float, float]]] = {}
    for run in runs(scale):
        if run.name in results and math.isfinite(results[run.name]["val_loss"]):
            points.setdefault(rmt_setup.family(run.model), []).append(
                (run.train_flops(), results[run.name]["val_loss"])
            )
    return points


def figure(scale: str, results: dict[str, dict], path: Path) -> None:
    series = {family: sorted(points) for family, points in _points(scale, results).items()}
    line_figure(path, series, xscale="log", yscale="log", xlabel="training FLOPs",
                ylabel="validation loss (nats/token)", title=f"RMT Fig. 2: scaling ({scale} scale)")  # fmt: skip


EXPERIMENT = Experiment(
    name="rmt_fig2_scaling_laws", description=__doc__.splitlines()[0], runs=runs, report=report, figure=figure,
    run_group="rmt_scaling",
)  # fmt: skip

if __name__ == "__main__":
    main(EXPERIMENT)
