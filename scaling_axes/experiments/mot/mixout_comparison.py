"""MoT mixout comparison: concat 256/48 with a `split` vs a `copy` byte mixout, at 100,000 steps.

Both predict the 16 right-pulled bytes of the next tokens (458 classes padded to 512, pads and end-of-text
included), so their losses are byte-level cross-entropies: compared with each other, never with a token-level loss.
`copy` runs as the original did (its byte attention layer never wired in, so every slot predicts the same
distribution: MoT reference 6.4) and as intended (`copy_wired`, one causal 128-byte sliding-window layer). The
table is not in the write-up the 10k tables come from: it was added in a later version of the article (402bd73,
2025-05-12), from 100k-step runs with seed 773322 (258.13 / 262.88 ms per step). Its numbers are FineMath under a
FineWeb label (6.1); the true FineWeb ones, from the original runs' curves, sit beside them.
"""

from __future__ import annotations

from pathlib import Path

from scaling_axes.experiments.mot import setup as mot_setup
from scaling_axes.experiments.mot.recipes import shrunk_at
from scaling_axes.harness.experiment.figures import line_figure, marked, seed_curves
from scaling_axes.harness.runs import Experiment, Run, fitted
from scaling_axes.harness.scales import Scale

TABLE = "mixout_100k"
MODELS = ("mot_concat_split_256_48", "mot_concat_copy_256_48", "mot_concat_copy_256_48_wired")


@fitted
def runs(scale: Scale) -> list[Run]:
    if not (scale.paper_configs or shrunk_at(scale).mixout_runs):
        return []  # no claim to judge: byte-level losses of two mixouts, never set against token-level ones
    return [mot_setup.mot_run(scale, model, 100_000, 256, 48) for model in MODELS]


def figure(scale: Scale, results: dict[str, dict], path: Path) -> None:
    series = {
        marked(run.name.removeprefix("mot_concat_"), results[run.name]): seed_curves(
            results[run.name], lambda done, run=run: mot_setup.val_curves(run, done)["fineweb"]
        )
        for run in runs(scale)
        if run.name in results
    }
    line_figure(
        path,
        series,
        markers=False,
        xlabel="step",
        ylabel="byte-level validation loss (nats/byte slot)",
        title=f"MoT mixouts, FineWeb validation ({scale} scale)",
    )


EXPERIMENT = Experiment(
    name="mot_mixout_comparison",
    description=__doc__.splitlines()[0],
    runs=runs,
    report=mot_setup.report(TABLE, runs, "nats/byte slot"),
    figure=figure,
    plan_note=mot_setup.plan_note,
)
