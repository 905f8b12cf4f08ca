"""Tokenformer Fig. 5: training FLOPs per token against sequence length, Transformer vs Tokenformer.

A Transformer grows by widening, so its token-token attention (4 L T d per token) grows with d; a Tokenformer grows
by adding parameter tokens at fixed d = 768, so at long contexts its cost grows more slowly. Values come from the
closed forms of `scaling_axes.modules.flops`, which tests hold equal to counts on the instantiated models.
"""

from __future__ import annotations

from pathlib import Path

from scaling_axes.harness.results import Row, pyplot, save_figure
from scaling_axes.harness.runs import Experiment
from scaling_axes.harness.scales import Scale
from scaling_axes.modules import get_config
from scaling_axes.modules.flops import formula_flops, train_flops_per_token

MODELS = (
    "transformer_354m",
    "transformer_757m",
    "transformer_1_4b",
    "tokenformer_354m",
    "tokenformer_757m",
    "tokenformer_1_4b",
)
LENGTHS = tuple(2**k for k in range(9, 17))  # 512 ... 65,536


def report(scale: Scale, results: dict[str, dict]) -> list[Row]:
    rows = []
    for model in MODELS:
        for length in LENGTHS:
            config = get_config(model)
            attention, total = 3 * formula_flops(config, length)["attention"], train_flops_per_token(config, length)
            rows.append(
                Row(
                    table="fig5",
                    row=model,
                    metric=f"train_flops_per_token@{length}",
                    paper=None,
                    ours=total,
                    unit="FLOPs",
                    note=f"token-token attention {attention / total:.1%} of it",
                )
            )
    return rows


def figure(scale: Scale, results: dict[str, dict], path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for model in MODELS:
        style = "-o" if model.startswith("tokenformer") else "--s"
        ax.plot(
            LENGTHS,
            [train_flops_per_token(get_config(model), n) / 1e9 for n in LENGTHS],
            style,
            label=model,
            markersize=3,
        )
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="sequence length (tokens)",
        ylabel="training GFLOPs per token",
        title="Tokenformer Fig. 5: FLOPs vs sequence length (analytic)",
    )
    save_figure(fig, path)


EXPERIMENT = Experiment(
    name="tokenformer_fig5_flops_vs_length",
    description=__doc__.splitlines()[0],
    runs=lambda scale: [],
    report=report,
    figure=figure,
)
