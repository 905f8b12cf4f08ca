"""The Mixture of Tokenizers training setup (MoT reference section 4), shared by its experiments.

Paper scale: the modded-nanogpt medium backbone, 8 GPUs x 64 rows of 1024 tokens (524,800 tokens per step with
the shared boundary token), Muon 0.025 + Adam (embeddings 0.3, head 0.1/sqrt(1024), scalars 0.015), constant lr
then linear to 0 over the last 60%, no warmup, no clipping, seed 9090333; trained on FineWeb and FineMath-4plus
together and validated on both every 250 steps. Fixed here: every window is read once per epoch (the original
re-read its first shards, 6.2) and FineMath is read as the int32 it was written in (6.3).

Smoke scale: a 6 x 128 backbone on the embedded news (in FineWeb's place) and Wikipedia XML (in FineMath's), both
GPT-2-tokenized; small: 8 x 512 on FineWeb-10BT and FineMath when they are under the data root, else the embedded
pair. Neither is ever a reproduction.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from datamodules.corpora import default_data_root
from experiments.results import Row, compare, published, scale_note
from experiments.runner import Budget, Run

SEED = 9090333
LM = {"optimizer": "muon", "schedule": "constant_then_linear", "cooldown_fraction": 0.6, "gradient_clip_val": None}
FRACTIONS = (1.0, 0.5, 0.1)  # the article's "last 100% / 50% / 10% of the loss curve"
VAL_SETS = ("fineweb", "finemath")


def corpora(scale: str) -> tuple[str, str]:
    """(FineWeb's, FineMath's) corpus at this scale; the paper's FineWeb is the 100BT llm.c shards."""
    if scale == "paper":
        return "fineweb_100bt", "finemath"
    present = all((default_data_root() / c).exists() for c in ("fineweb", "finemath"))
    return ("fineweb", "finemath") if scale == "small" and present else ("embedded_news", "embedded_wiki")


def budget(scale: str, steps: int) -> Budget:
    """The paper's `steps` (10k or 100k), or the smoke and small budgets."""
    if scale == "paper":
        return Budget(steps=steps, batch_size=512, seq_len=1024, val_every=250 if steps <= 10_000 else 1000,
                      micro_batch=64, checkpoint_every=500)  # fmt: skip
    if scale == "small":
        return Budget(steps=1500, batch_size=32, seq_len=512, val_every=75, val_windows=64, checkpoint_every=250)
    return Budget(steps=30, batch_size=8, seq_len=64, val_every=3, val_windows=8, checkpoint_every=10)


def shrunk(scale: str, d_token: int, d_byte: int) -> dict:
    """Overrides for the smoke (6 x 128, heads of 64) and small (8 x 512) backbones; byte and token widths scale with
    d_model, bytes per token stay 16."""
    if scale == "paper":
        return {}
    d_model, layers = (128, 6) if scale == "smoke" else (512, 8)
    ratio = d_model / 1024
    return {"n_layer": layers, "d_model": d_model, "n_head": d_model // 64, "head_dim": 64, "byte_head_dim": 64,
            "attention_free_layers": (layers // 2 - 1,), "max_seq_len": budget(scale, 0).seq_len,
            "d_token": round(d_token * ratio), "d_byte": max(1, round(d_byte * ratio))}  # fmt: skip


def mot_run(scale: str, model: str, steps: int, d_token: int, d_byte: int) -> Run:
    fineweb, finemath = corpora(scale)
    return Run(model, model, budget(scale, steps), shrunk(scale, d_token, d_byte), corpus=fineweb, tokenizer="gpt2",
               lm=LM, seed=SEED, data={"extra_corpora": (finemath,), "order": "epoch"})  # fmt: skip


def val_curves(run: Run, done: dict) -> dict[str, list[tuple[int, float]]]:
    """ "fineweb" and "finemath" validation curves of a finished run (whatever corpora stood in for them)."""
    return dict(zip(VAL_SETS, (done["val_loss_curves"][c] for c in (run.corpus, *run.data["extra_corpora"])),
                    strict=True))  # fmt: skip


def tail_stats(curve: list[tuple[int, float]], fraction: float) -> tuple[float, float]:
    """Mean and standard deviation of the last `fraction` of a validation curve's points."""
    values = np.array([loss for _, loss in curve])
    tail = values[len(values) - max(1, round(len(values) * fraction)) :]
    return float(tail.mean()), float(tail.std())


def as_published(fineweb: list, finemath: list, fraction: float) -> dict[str, tuple[float, float]]:
    """What the original `plot_results.py` prints under "mean fw" and "mean fm": with a fraction below 1 it slices
    FineMath into the fw column and leaves fm unsliced (lines 104-109; MoT reference 6.1)."""
    if fraction >= 1:
        return {"fw": tail_stats(fineweb, 1.0), "fm": tail_stats(finemath, 1.0)}
    return {"fw": tail_stats(finemath, fraction), "fm": tail_stats(finemath, 1.0)}


def loss_rows(table: str, scale: str, run: Run, done: dict | None, unit: str) -> list[Row]:
    """Per validation set and fraction, our mean and std under the correct label beside the published corrected
    value; then the two columns as the original script labels them beside the published (mislabelled) numbers."""
    paper = published("mot")
    note = scale_note(scale)
    if done is None:
        return [Row(table, run.name, "val_loss", None, None, unit, run.name, "not_run", note)]

    def status(expected: float | None, ours: float) -> str:
        return compare(expected, ours, 0.02) if scale == "paper" else "measured"

    curves, rows = val_curves(run, done), []
    for name, curve in curves.items():
        final = curve[-1][1]
        rows.append(Row(table, run.name, f"{name}_final", paper.get((table, run.name, f"{name}_final")), final, unit,
                        run.name, status(paper.get((table, run.name, f"{name}_final")), final), note))  # fmt: skip
        for fraction in FRACTIONS:
            mean, std = tail_stats(curve, fraction)
            for stat, value in (("mean", mean), ("std", std)):
                metric = f"{name}_{stat}_last_{round(fraction * 100)}"
                expected = paper.get((table, run.name, metric))
                rows.append(Row(table, run.name, metric, expected, value, unit, run.name, status(expected, value),
                                note))  # fmt: skip
    for fraction in FRACTIONS:
        for column, (mean, _) in as_published(curves["fineweb"], curves["finemath"], fraction).items():
            metric = f"published_mean_{column}_last_{round(fraction * 100)}"
            truly = "FineMath" if column == "fm" or fraction < 1 else "FineWeb"
            span = "whole curve" if column == "fm" and fraction < 1 else f"last {round(fraction * 100)}%"
            rows.append(Row(table, run.name, metric, paper.get((table, run.name, metric)), mean, unit, run.name,
                            "measured", f"the original script's '{column}' column: really {truly}, {span}; {note}"
                            .strip("; ")))  # fmt: skip
    return rows


def plan_note(scale: str) -> str:
    """The paper setup or the smoke/small one, from this module's docstring (printed by --list and --dry-run)."""
    return __doc__.split("\n\n")[1 if scale == "paper" else 2].replace("\n", " ")


def report(table: str, runs: Callable[[str], list[Run]], unit: str) -> Callable[[str, dict], list[Row]]:
    """An experiment's report: per run, its size rows and its loss rows."""

    def rows(scale: str, results: dict[str, dict]) -> list[Row]:
        out = []
        for run in runs(scale):
            done = results.get(run.name)
            out += size_rows(table, scale, run, done) + loss_rows(table, scale, run, done, unit)
        return out

    return rows


def size_rows(table: str, scale: str, run: Run, done: dict | None) -> list[Row]:
    """Parameters (the preset's, exact at every scale's preset) and the measured step time."""
    from modules.flops import formula_params

    paper, note = published("mot"), scale_note(scale)
    params = sum(formula_params(run.config).values())
    expected = paper.get((table, run.name, "params"))
    count_note = "" if scale == "paper" else f"of the {scale} model; the preset {run.model} has the published count"
    rows = [Row(table, run.name, "params", expected if scale == "paper" else None, params, "parameters", run.name,
                compare(expected, params, 0.0) if scale == "paper" else "analytic", count_note)]  # fmt: skip
    step_ms = done and done.get("step_ms")
    expected = paper.get((table, run.name, "step_ms"))
    status = "not_run" if step_ms is None else compare(expected, step_ms, 0.1) if scale == "paper" else "measured"
    hardware = "8 x H100 in the paper; ours on the hardware it ran on"
    rows.append(Row(table, run.name, "step_ms", expected, step_ms, "ms", run.name, status,
                    f"{hardware}; {note}".strip("; ")))  # fmt: skip
    return rows
