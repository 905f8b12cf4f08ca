"""MoT results tables: noop/noop (D_tok 1024) vs concat/noop 512/64 and 256/48 at 10,000 steps, with the errata.

The article's three tables (validation over the last 100%, 50% and 10% of the curve, step 0 included, each tail
starting at index int(n (1 - f)) as `plot_results.py` cuts it), every cell (mean and std, "fw" and "fm") under the
label the script printed, ours computed the same way beside the published number; its "fw" column is FineMath
whenever a fraction is set, and its "fm" column is then FineMath over the whole curve (MoT reference 6.1). Beside
them the correctly labelled statistics, with the original run's own (from its results JSON, in
`results/published/mot_original_curves.json`, which also reproduce every printed cell), the D_model / D_tok /
D_byte columns, the parameter counts (454,496,326 / 430,366,918 / 416,969,510) and the step time in ms (the
article's "[s]" is wrong).
"""

from __future__ import annotations

from pathlib import Path

from scaling_axes.experiments.mot import setup as mot_setup
from scaling_axes.harness.claims.margins import paired_margins
from scaling_axes.harness.claims.outcomes import out_of_reach
from scaling_axes.harness.claims.verdicts import contrast_claim, judge
from scaling_axes.harness.experiment.comparisons import Comparison
from scaling_axes.harness.experiment.figures import draw, margins_panel, marked, seed_curves
from scaling_axes.harness.results import Row, pyplot, save_figure
from scaling_axes.harness.runs import Experiment, Run, fitted
from scaling_axes.harness.scales import Scale

TABLE = "results_10k"
ROWS = (("mot_noop_noop_1024", 1024, 1024), ("mot_concat_noop_512_64", 512, 64), ("mot_concat_noop_256_48", 256, 48))


@fitted
def runs(scale: Scale) -> list[Run]:
    return [mot_setup.mot_run(scale, model, 10_000, d_token, d_byte) for model, d_token, d_byte in ROWS]


def figure(scale: Scale, results: dict[str, dict], path: Path) -> None:
    """Left: each run's FineWeb and FineMath validation curves, every seed beside their mean. Right: each claim's
    paired margin at each seed (noop's final loss minus concat's), which the curves cannot resolve."""
    series = {
        f"{marked(run.name.removeprefix('mot_'), results[run.name])} {name}": seed_curves(
            results[run.name], lambda done, run=run, name=name: mot_setup.val_curves(run, done)[name]
        )
        for run in runs(scale)
        if run.name in results
        for name in mot_setup.VAL_SETS
    }
    if not any(series.values()):
        path.unlink(missing_ok=True)
        return
    fig, (curves, margins) = pyplot().subplots(1, 2, figsize=(12, 4.2), gridspec_kw={"width_ratios": (3, 2)})
    for label, points in series.items():
        draw(curves, points, label, "-")
    curves.set(
        xlabel="step",
        ylabel="validation loss (nats/token)",
        title=f"MoT results tables: FineWeb and FineMath validation ({scale} scale)",
    )
    claims = [row for row in claim_rows(scale, results) if row.unit == "nats/token"]
    margins_panel(margins, claims, "nats/token", lambda row: row.replace("_vs_mot_noop_noop_1024_", " vs noop, "))
    save_figure(fig, path)


def claim_rows(scale: Scale, results: dict[str, dict]) -> list[Row]:
    """The article's claims: a concat mixin beats the noop/noop baseline on FineWeb and on FineMath validation loss
    at equal steps (the end of training; a contrast of each data set's final loss, the two never pooled), at about
    the same time per step (312 / 313 / 310 ms; margin per seed: the share of noop's step time concat saves, within
    the plan's tolerance). Where FineMath's stand-in is not mathematical text (news or Wikipedia below paper scale,
    until FineMath is on disk) its claim is `unmatched`: it would test another claim than the article's."""
    by_name = {run.name: run for run in runs(scale)}
    baseline, rows = ROWS[0][0], []
    math_text = mot_setup.corpora(scale)[1]
    not_math = None if math_text == "finemath" else f"FineMath stands in as {math_text}, which is not mathematical text"

    def final(name: str, done: dict, corpus: str) -> float:
        return mot_setup.val_curves(by_name[name], done)[corpus][-1][1]

    def step_time(noop: dict, concat: dict) -> float | None:
        times = noop.get("step_ms"), concat.get("step_ms")
        return None if None in times else 1 - times[1] / times[0]  # noop's time saved, as a fraction of it

    for concat, _, _ in ROWS[1:]:
        names = (baseline, concat)
        for corpus, label in (("fineweb", "FineWeb"), ("finemath", "FineMath")):
            rows.append(
                contrast_claim(
                    TABLE,
                    f"{concat}_vs_{baseline}_{corpus}",
                    f"concat beats noop on {label} validation loss at equal steps",
                    scale,
                    results,
                    {baseline: 1.0, concat: -1.0},
                    f"val_loss_{corpus}",  # a measure per data set: FineWeb's and FineMath's never pooled
                    lambda name, done, corpus=corpus: final(name, done, corpus),
                    runs=names,
                    unmatched=not_math if corpus == "finemath" else None,
                )
            )
        statement = "concat costs about noop's time per step"
        if not on_gpu(results, names):
            rows.append(
                out_of_reach(
                    TABLE,
                    f"{concat}_vs_{baseline}_step_time",
                    statement,
                    "fraction",
                    "the article's step times are an H100's; these runs' are not on a GPU and say nothing of them",
                    names,
                )
            )
            continue
        rows.append(
            judge(
                TABLE,
                f"{concat}_vs_{baseline}_step_time",
                statement,
                scale,
                paired_margins(results, names, step_time),
                "fraction",
                runs=names,
            )
        )
    return rows


def on_gpu(results: dict[str, dict], names: tuple[str, ...]) -> bool:
    """Whether the runs `names` trained on a CUDA GPU (done.json names it; a CPU run says "cpu"; unfinished: not)."""
    return all((results.get(name) or {}).get("device", "cpu") not in ("cpu", "mps") for name in names)


_REPORT = mot_setup.report(TABLE, runs, "nats/token")

EXPERIMENT = Experiment(
    name="mot_results_tables",
    description=__doc__.splitlines()[0],
    runs=runs,
    report=lambda scale, results: [*_REPORT(scale, results), *claim_rows(scale, results)],
    figure=figure,
    plan_note=mot_setup.plan_note,
    comparisons=lambda scale: [
        Comparison(f"{concat}_vs_{ROWS[0][0]}", (concat, ROWS[0][0])) for concat, _, _ in ROWS[1:]
    ],
)
