"""The Mixture of Tokenizers training setup (MoT reference section 4), shared by its experiments.

Paper scale: the modded-nanogpt medium backbone, 8 GPUs x 64 rows of 1024 tokens (524,800 tokens per step with
the shared boundary token), Muon 0.025 + Adam (embeddings 0.3, head 0.1/sqrt(1024), scalars 0.015), constant lr
then linear to 0 over the last 60%, no warmup, no clipping, seed 9090333 (773322 for the 100k runs); trained on
FineWeb and FineMath-4plus together and validated on both at step 0 and every 250 steps (1000 at 100k), so the
statistics over the whole curve include the loss at initialisation, as the original's do. The data go through the
original's loader as it ran (`data_path="as_run"`, `datamodules.as_run`: its file shuffle with the run's seed, its
re-reading of the first shards, 6.2, and FineMath's int32 files read as uint16, 6.3), since every published number
came from that stream; `data_path="fixed"` reads each window once per epoch and FineMath as int32.

Smoke scale: a 6 x 128 backbone on the embedded news (in FineWeb's place) and Wikipedia XML (in FineMath's), both
GPT-2-tokenized; small: 8 x 512 on FineWeb-10BT and FineMath when they are under the data root, else the embedded
pair; both with `data_path="fixed"` (the stand-ins are text, not shard files). Neither is ever a reproduction.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable

import numpy as np

from scaling_axes.experiments.mot.recipes import FINEMATH, FINEWEB, LM, SEEDS, SHORT_RUN_LM, paper_budget, shrunk_at
from scaling_axes.harness.results import Row, compare, published, published_file
from scaling_axes.harness.runs import Budget, Run
from scaling_axes.harness.scales import Scale
from scaling_axes.harness.sweeps import Sweep

TOLERANCE = 0.02
ORIGINAL_CURVES = published_file("mot_original_curves.json")
FRACTIONS = (1.0, 0.5, 0.1)  # the article's "last 100% / 50% / 10% of the loss curve"
VAL_SETS = ("fineweb", "finemath")


def corpora(scale: Scale) -> tuple[str, str]:
    """(FineWeb's, FineMath's) corpus at this scale; the paper's FineWeb is the 100BT llm.c shards."""
    if scale.paper_configs:
        return "fineweb_100bt", "finemath"
    return FINEWEB.at(scale), FINEMATH.at(scale)


def budget(scale: Scale, steps: int) -> Budget:
    """The paper's `steps` (10k or 100k), or the scale's shrunk budget (`recipes`)."""
    return paper_budget(steps) if scale.paper_configs else shrunk_at(scale).budget


def shrunk(scale: Scale, d_token: int, d_byte: int) -> dict:
    """Overrides for the shrunk backbones (`recipes`)."""
    if scale.paper_configs:
        return {}
    s = shrunk_at(scale)
    ratio = s.d_model / 1024
    return {
        "n_layer": s.n_layer,
        "d_model": s.d_model,
        "n_head": s.d_model // 64,
        "head_dim": 64,
        "byte_head_dim": 64,
        "attention_free_layers": (s.n_layer // 2 - 1,),
        "max_seq_len": s.budget.seq_len,
        "value_embeddings": min(3, s.n_layer // 2),
        "d_token": round(d_token * ratio),
        "d_byte": max(1, round(d_byte * ratio)),
        **scale.vocabulary(),
        **scale.byte_table(),
    }


def mot_run(scale: Scale, model: str, steps: int, d_token: int, d_byte: int) -> Run:
    fineweb, finemath = corpora(scale)
    data = {
        "extra_corpora": (finemath,),
        "order": "epoch",
        "data_path": "as_run" if scale.paper_configs else "fixed",
        "seed": SEEDS[steps],
    }  # the original shuffled its files with the run's seed
    return Run(
        model,
        model,
        budget(scale, steps),
        shrunk(scale, d_token, d_byte),
        corpus=fineweb,
        tokenizer=scale.tokenizer_for("gpt2"),
        lm=LM if scale.paper_configs else SHORT_RUN_LM,
        trainer={"gradient_clip_val": None},
        seed=SEEDS[steps],
        data=data,
        sweep=rate_sweep(scale),
    )


# Below paper scale the speedrun's fixed rates (Muon 0.025, embeddings 0.3, ...) are swept together, by one factor,
# where claims are judged (not at smoke, a pipeline check): they were tuned for the 16 x 1024 backbone on 10k steps,
# not for these
RATE_SWEEP = Sweep((1 / 3, 1.0, 3.0), rule="the speedrun's rates x a factor", rate_option="group_lr_scale")


def rate_sweep(scale: Scale) -> Sweep | None:
    """RATE_SWEEP where claims are judged below paper scale, inside the stable region where the recipe says so."""
    if not scale.judges_claims or scale.paper_configs:
        return None
    region = shrunk_at(scale).sweep_region
    return region.applied(RATE_SWEEP) if region else RATE_SWEEP


def val_curves(run: Run, done: dict) -> dict[str, list[tuple[int, float]]]:
    """ "fineweb" and "finemath" validation curves of a finished run (whatever corpora stood in for them)."""
    return dict(
        zip(VAL_SETS, (done["val_loss_curves"][c] for c in (run.corpus, *run.data["extra_corpora"])), strict=True)
    )


@functools.cache
def _original_tables() -> dict:
    return json.loads(ORIGINAL_CURVES.read_text())["tables"]


def original_curves(table: str, model: str) -> dict[str, list[float]] | None:
    """The original run's validation losses (step 0, then every `val_every` steps), from its results JSON."""
    runs = _original_tables().get(table, {})
    return {name: runs[model][name] for name in VAL_SETS} if model in runs else None


def window(values: list[float], fraction: float) -> list[float]:
    """The last `fraction` of a curve as `plot_results.py` cuts it: from index int(n (1 - fraction))."""
    return values[int(len(values) * (1 - fraction)) :]


def _mean_std(values: list[float]) -> dict[str, float]:
    array = np.array(values)
    return {"mean": float(array.mean()), "std": float(array.std())}


def as_printed(fineweb: list[float], finemath: list[float], fraction: float) -> dict[str, float]:
    """The cells `plot_results.py` prints as "mean/std fw" and "mean/std fm" (lines 104-109, MoT reference 6.1): with a
    fraction below 1 its fw column is FineMath's tail and its fm column FineMath's whole curve."""
    fw = window(finemath if fraction < 1 else fineweb, fraction)
    return {
        f"{stat}_{column}": value
        for column, values in (("fw", fw), ("fm", finemath))
        for stat, value in _mean_std(values).items()
    }


def correctly_labelled(fineweb: list[float], finemath: list[float], fraction: float) -> dict[str, float]:
    """Each validation set's own tail statistics, windowed as the original script windows them."""
    return {
        f"{name}_{stat}": value
        for name, values in (("fineweb", fineweb), ("finemath", finemath))
        for stat, value in _mean_std(window(values, fraction)).items()
    }


def _printed_label(column: str, fraction: float) -> str:
    truly = "FineWeb" if column == "fw" and fraction >= 1 else "FineMath"
    span = "whole curve" if column == "fm" or fraction >= 1 else f"last {round(fraction * 100)}%"
    return f"the original script's '{column}' column: really {truly}, {span}"


def loss_rows(table: str, scale: Scale, run: Run, done: dict | None, unit: str) -> list[Row]:
    """Per fraction: every cell as the original script printed it (published vs ours under the same mislabelling),
    then correctly labelled (the original run's own curves vs ours); then the final values."""
    note = scale.note
    if done is None:
        return [
            Row(
                table=table,
                row=run.name,
                metric="val_loss",
                paper=None,
                ours=None,
                unit=unit,
                run=run.name,
                status="not_run",
                note=note,
            )
        ]
    paper, original = published("mot"), original_curves(table, run.model)
    ours = {name: [loss for _, loss in curve] for name, curve in val_curves(run, done).items()}

    def row(metric: str, expected: float | None, value: float, what: str) -> Row:
        status = compare(expected, value, TOLERANCE) if scale.paper_configs else "measured"
        return Row(
            table=table,
            row=run.name,
            metric=metric,
            paper=expected,
            ours=value,
            unit=unit,
            run=run.name,
            status=status,
            note=f"{what}; {note}".strip("; "),
        )

    rows = []
    for fraction in FRACTIONS:
        pct = round(fraction * 100)
        for key, value in as_printed(ours["fineweb"], ours["finemath"], fraction).items():
            metric = f"published_{key}_last_{pct}"
            rows.append(
                row(metric, paper.get((table, run.name, metric)), value, _printed_label(key.split("_")[1], fraction))
            )
        truth = correctly_labelled(original["fineweb"], original["finemath"], fraction) if original else {}
        for key, value in correctly_labelled(ours["fineweb"], ours["finemath"], fraction).items():
            rows.append(
                row(
                    f"{key}_last_{pct}",
                    truth.get(key),
                    value,
                    "correctly labelled; paper column: the "
                    "original run's curves (results JSON) windowed as its script did",
                )
            )
    for name in VAL_SETS:
        rows.append(
            row(
                f"{name}_final",
                original[name][-1] if original else None,
                ours[name][-1],
                "the last validation; paper column: the original run's",
            )
        )
    return rows


def original_rows(table: str, model: str) -> list[Row]:
    """Errata check: the original run's own curves, through the original script's windowing and labels, give every
    published cell (to its two printed decimals); none for a run the original did not make."""
    paper, original = published("mot"), original_curves(table, model)
    if original is None:
        return []
    rows = []
    for fraction in FRACTIONS:
        pct = round(fraction * 100)
        for key, value in as_printed(original["fineweb"], original["finemath"], fraction).items():
            expected = paper.get((table, model, f"published_{key}_last_{pct}"))
            if expected is not None:
                status = "match" if abs(value - expected) <= 0.005 + 1e-9 else "differs"
                rows.append(
                    Row(
                        table=table,
                        row=model,
                        metric=f"published_{key}_last_{pct}_from_original_curves",
                        paper=expected,
                        ours=value,
                        status=status,
                        note=_printed_label(key.split("_")[1], fraction),
                    )
                )
    return rows


def plan_note(scale: Scale) -> str:
    """The paper setup or the smoke/small one, from this module's docstring (printed by --list and --dry-run)."""
    return __doc__.split("\n\n")[1 if scale.paper_configs else 2].replace("\n", " ")


def report(table: str, runs: Callable[[str], list[Run]], unit: str) -> Callable[[str, dict], list[Row]]:
    """An experiment's report: per run, its size rows and its loss rows."""

    def rows(scale: Scale, results: dict[str, dict]) -> list[Row]:
        out = []
        for run in runs(scale):
            done = results.get(run.name)
            out += size_rows(table, scale, run, done) + loss_rows(table, scale, run, done, unit)
            out += original_rows(table, run.model)
        return out

    return rows


def size_rows(table: str, scale: Scale, run: Run, done: dict | None) -> list[Row]:
    """Parameters (the preset's, exact at every scale's preset) and the measured step time."""
    from scaling_axes.modules import get_config
    from scaling_axes.modules.flops import formula_params

    paper, note = published("mot"), scale.note
    params = sum(formula_params(run.config).values())
    expected = paper.get((table, run.name, "params"))
    at_paper = scale.paper_configs
    count_note = "" if at_paper else f"of the {scale} model; the preset {run.model} has the published count"
    rows = [
        Row(
            table=table,
            row=run.name,
            metric="params",
            paper=expected if at_paper else None,
            ours=params,
            unit="parameters",
            run=run.name,
            status=compare(expected, params, 0.0) if at_paper else "analytic",
            note=count_note,
        )
    ]
    preset = get_config(run.model)  # the published columns describe the preset; smaller scales shrink it
    settings = {
        "d_model": preset.d_model,
        "d_token": preset.d_token,
        "d_byte": preset.d_byte,
        "n_layer_out": preset.byte_layers_out,
        "seed": run.seed,
    }
    for metric, value in settings.items():
        if (expected := paper.get((table, run.name, metric))) is not None:
            rows.append(
                Row(
                    table=table,
                    row=run.name,
                    metric=metric,
                    paper=expected,
                    ours=value,
                    run=run.name,
                    status=compare(expected, value, 0.0),
                    note=f"the preset {run.model}'s",
                )
            )
    step_ms = done and done.get("step_ms")
    expected = paper.get((table, run.name, "step_ms"))
    status = "not_run" if step_ms is None else compare(expected, step_ms, 0.1) if scale.paper_configs else "measured"
    hardware = "8 x H100 in the paper; ours on the hardware it ran on"
    rows.append(
        Row(
            table=table,
            row=run.name,
            metric="step_ms",
            paper=expected,
            ours=step_ms,
            unit="ms",
            run=run.name,
            status=status,
            note=f"{hardware}; {note}".strip("; "),
        )
    )
    return rows
