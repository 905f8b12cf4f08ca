"""RMT Fig. 1: parameters and FLOPs as the residual stream grows, Transformer vs RMT at GPT2-medium shapes.

A Transformer grows its residual stream by widening D, which grows every weight matrix (parameters ~ D^2); the RMT
grows it through D_k, which only lengthens its key vectors (2 R D_k (3L + 1) parameters). Both at 24 layers:
Transformer D = residual, 16 heads, D_FF = 4D; RMT D_v 64, R 16, D_FF 4096, D_k = residual / 64. Values are the
closed forms of `modules.flops`, checked here against counts on the instantiated (meta-device) models.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from experiments.results import Row, pyplot, save_figure
from experiments.runner import Experiment, main
from modules import build_model, get_config
from modules.flops import counted_flops, counted_params, formula_params, train_flops_per_token

RESIDUALS = (1024, 2048, 3072, 4096)
SEQ = 512


def models(residual: int) -> dict[str, tuple[str, dict]]:
    return {
        "transformer": ("transformer_rmt_405m", {"d_model": residual}),
        "rmt": ("rmt_305m", {"d_key": residual // 64}),
    }


@functools.cache
def _measure(family: str, residual: int) -> dict[str, tuple[int, int]]:
    """(formula, count) of parameters and training FLOPs per token for one model."""
    name, overrides = models(residual)[family]
    config = get_config(name, **overrides)
    with torch.device("meta"):
        counted = sum(counted_params(build_model(name, **overrides)).values())
    return {
        "params": (sum(formula_params(config).values()), counted),
        "train_flops_per_token": (train_flops_per_token(config, SEQ),
                                  3 * sum(counted_flops(config, SEQ).values())),
    }  # fmt: skip


def report(scale: str, results: dict[str, dict]) -> list[Row]:
    rows = []
    for residual in RESIDUALS:
        for family in models(residual):
            for metric, (formula, counted) in _measure(family, residual).items():
                note = "formula = count" if formula == counted else f"formula {formula} differs from the count"
                rows.append(Row("fig1", f"{family}_residual{residual}", metric, None, counted, note=note,
                                unit="parameters" if metric == "params" else "FLOPs"))  # fmt: skip
    return rows


def figure(scale: str, results: dict[str, dict], path: Path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for family in ("transformer", "rmt"):
        measured = [_measure(family, r) for r in RESIDUALS]
        for ax, metric in zip(axes, ("params", "train_flops_per_token"), strict=True):
            ax.plot(RESIDUALS, [m[metric][1] / 1e6 for m in measured], "-o", label=family, markersize=4)
    axes[0].set(xlabel="residual stream size", ylabel="parameters (M)", title="RMT Fig. 1: parameters")
    axes[1].set(xlabel="residual stream size", ylabel="training MFLOPs per token", title="FLOPs (seq 512)")
    save_figure(fig, path)


EXPERIMENT = Experiment(
    name="rmt_fig1_resource_scaling", description=__doc__.splitlines()[0], runs=lambda scale: [], report=report,
    figure=figure,
)  # fmt: skip

if __name__ == "__main__":
    main(EXPERIMENT)
