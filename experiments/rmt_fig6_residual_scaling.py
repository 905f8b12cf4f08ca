"""RMT Fig. 6: a GPT2-small-sized RMT (D_v 64, R 12) with its residual stream grown through D_k = 6 ... 64.

Paper scale (App. C.3): 50K steps of batch 64 x 512 (1.64B tokens), max lr 1e-2, the RMT setup of
`experiments.rmt_setup`. The parameter count barely moves (134.2M to 134.5M); the loss should fall as the residual
grows. Reported: final validation loss, parameters and training FLOPs per D_k.
"""

from __future__ import annotations

from pathlib import Path

from experiments import rmt_setup
from experiments.results import Row, line_figure, scale_note
from experiments.runner import Experiment, Run, main

D_KEYS = (6, 12, 24, 32, 48, 64)
SMOKE_D_KEYS = (2, 4, 6, 8, 12, 16)


def runs(scale: str) -> list[Run]:
    result = []
    for d_key, small_key in zip(D_KEYS, SMOKE_D_KEYS, strict=True):
        name = f"rmt_residual_dk{d_key}"
        if scale == "paper":
            budget, overrides = rmt_setup.schedule(50_000, 64, rmt_setup.SEQ, 1e-2), {}
        else:
            size = 1 if scale == "smoke" else 2  # the GPT2-small-like member of the shrunk family
            overrides = {**rmt_setup.shrunk("rmt_134m", scale, size), "d_key": small_key if scale == "smoke" else d_key}
            budget = rmt_setup.short_schedule(scale, 1e-2)
        result.append(Run(name, name, budget, overrides, corpus=rmt_setup.corpus(scale), tokenizer="gpt2",
                          lm=rmt_setup.lm_options(budget.lr)))  # fmt: skip
    return result


def report(scale: str, results: dict[str, dict]) -> list[Row]:
    note = scale_note(scale)
    rows = []
    for run in runs(scale):
        done = results.get(run.name)
        residual = run.config.d_key * run.config.d_value
        status = "measured" if done else "not_run"
        rows.append(Row("fig6", run.name, "val_loss", None, done and done["val_loss"], "nats/token", run.name, status,
                        f"residual {residual}; {note}".strip("; ")))  # fmt: skip
        rows.append(Row("fig6", run.name, "params", None, done and done["params"], "parameters", run.name, status))
        rows.append(Row("fig6", run.name, "train_flops", None, run.train_flops(), "FLOPs", run.name))
    return rows


def figure(scale: str, results: dict[str, dict], path: Path) -> None:
    points = [
        (r.config.d_key * r.config.d_value, results[r.name]["val_loss"]) for r in runs(scale) if r.name in results
    ]
    title = f"RMT Fig. 6: residual scaling ({scale} scale)"
    line_figure(path, {"RMT": points}, xscale="log", xlabel="residual stream size D_k x D_v",
                ylabel="validation loss (nats/token)", title=title)  # fmt: skip


EXPERIMENT = Experiment(
    name="rmt_fig6_residual_scaling", description=__doc__.splitlines()[0], runs=runs, report=report, figure=figure
)

if __name__ == "__main__":
    main(EXPERIMENT)
