"""Tokenformer Table 2: ImageNet-1k top-1 of ViT-B/16 and ViT-L/16 (timm) against ViT-Tokenformers at 109M / 407M
and parameter-matched (dagger) at 86M / 307M, all supervised from scratch with MAE's recipe (`vit_setup`).

The Dosovitskiy (384 px) and DeiT rows of the paper's table are cited numbers; they stay in
`results/published/tokenformer.csv` and are not trained here.
"""

from __future__ import annotations

from pathlib import Path

from scaling_axes.experiments.tokenformer import vit_setup
from scaling_axes.harness.claims.outcomes import out_of_reach
from scaling_axes.harness.claims.verdicts import as_good_as
from scaling_axes.harness.experiment.arms import parameter_match
from scaling_axes.harness.experiment.figures import line_figure, marked, over_seeds
from scaling_axes.harness.results import Row, published
from scaling_axes.harness.runs import Experiment, Run, fitted
from scaling_axes.harness.scales import Scale

MODELS = (
    "vit_b16",
    "vit_tokenformer_b16_matched",
    "vit_tokenformer_b16",
    "vit_l16",
    "vit_tokenformer_l16_matched",
    "vit_tokenformer_l16",
)


MATCHED = {"vit_tokenformer_b16_matched": "vit_b16", "vit_tokenformer_l16_matched": "vit_l16"}  # dagger -> ViT
LARGER = {"vit_tokenformer_b16": "vit_b16", "vit_tokenformer_l16": "vit_l16"}  # 109M / 407M -> ViT
AS_GOOD_AS = 0.5  # points of top-1: the paper's daggered rows sit 0.2 below (B) and 0.4 above (L) their ViTs


def paper_margins() -> dict[tuple[str, str], float]:
    """(ours, ViT) -> the paper's margin of each claim in points: the difference (plus the tolerance, as good as)."""
    top1 = {
        run: value
        for (table, run, metric), value in published("tokenformer").items()
        if table == "table2" and metric == "top1"
    }
    return {
        **{pair: top1[pair[0]] - top1[pair[1]] + AS_GOOD_AS for pair in MATCHED.items()},
        **{pair: top1[pair[0]] - top1[pair[1]] for pair in LARGER.items()},
    }


@fitted
def runs(scale: Scale) -> list[Run]:
    """The models of the claims in reach at `scale` (every model at paper scale)."""
    needed = {name for pair, margin in paper_margins().items() if not vit_setup.reach(scale, margin) for name in pair}
    return [vit_setup.vit_run(scale, model, model) for model in MODELS if model in needed]


def report(scale: Scale, results: dict[str, dict]) -> list[Row]:
    rows = [row for run in runs(scale) for row in vit_setup.accuracy_rows("table2", scale, run, results.get(run.name))]
    return rows + claim_rows(scale, results)


def claim_rows(scale: Scale, results: dict[str, dict]) -> list[Row]:
    """Table 2's claims: a ViT-Tokenformer with the ViT's parameters (dagger) is as good as the ViT in top-1, and
    the larger ViT-Tokenformers (109M, 407M) are above their ViTs (the paper: 82.5 vs 82.3, 83.1 vs 82.6)."""
    matched = "ViT-Tokenformer at the ViT's parameters is as good as the ViT in top-1"
    above = "the larger ViT-Tokenformer beats the ViT in top-1"
    rows = []
    for (ours, vit), margin in paper_margins().items():
        statement = matched if ours in MATCHED else above
        if why := vit_setup.reach(scale, margin):
            rows.append(out_of_reach("table2", f"{ours}_vs_{vit}", statement, "points", why, (ours, vit)))
        else:
            arms = {name: vit_setup.vit_run(scale, name, name).config for name in (ours, vit)}
            unmatched = parameter_match("table2", arms, "total")[1] if ours in MATCHED else None
            rows.append(as_good_as("table2", statement, scale, ours, vit, results, unmatched=unmatched))
    return rows


def figure(scale: Scale, results: dict[str, dict], path: Path) -> None:
    """Top-1 against parameters, one point per trained model: its seeds' mean and spread, and each seed. Nothing
    trained (the claims out of reach at this scale): no figure."""
    series = {}
    for run in runs(scale):
        if top1 := over_seeds(done := results.get(run.name), lambda d: d.get("val_top1")):
            mean, spread, seeds = (100 * top1[0], 100 * top1[1], tuple(100 * v for v in top1[2]))
            series[marked(run.name, done)] = [(done["params"], mean, spread, seeds)]
    line_figure(
        path, series, xlabel="parameters", ylabel="top-1 (%)", title=f"Tokenformer Table 2: ImageNet ({scale} scale)"
    )


EXPERIMENT = Experiment(
    name="tokenformer_table2_imagenet",
    description=__doc__.splitlines()[0],
    runs=runs,
    report=report,
    figure=figure,
    plan_note=vit_setup.plan_note,
    run_group=vit_setup.GROUP,
    max_epochs=vit_setup.MAX_EPOCHS,
)
