"""RMT Tables 3-4: the resources the 305M RMT needs to reach the 405M Transformer's best loss, and both at full budget.

Both runs are Fig. 2's (`run_group` "rmt_scaling": trained once). Table 4: parameters, training FLOPs (the paper's
formula and our count), tokens, training time and seconds per step, and the final validation loss of each. Table 3:
the first validation of the RMT at or below the Transformer's final loss, and the parameters, FLOPs, tokens and time
it took, as fractions of the Transformer's. Time is the ThroughputMonitor's training clock on whatever machine ran
the run; the paper's are A100 seconds.
"""

from __future__ import annotations

from experiments import rmt_setup
from experiments.results import Row, compare, published, scale_note
from experiments.rmt_table7_formulas_and_table8_9_configs import train_flops
from experiments.runner import Experiment, Run, main

TRANSFORMER, RMT = "transformer_rmt_405m", "rmt_305m"
TOLERANCE = 0.02


def runs(scale: str) -> list[Run]:
    return [rmt_setup.scaling_run(model, scale) for model in (TRANSFORMER, RMT)]


def _table4(run: Run, done: dict, paper: dict, note: str) -> list[Row]:
    seconds = done.get("train_seconds")
    per_step = seconds / done["steps"] if seconds and done.get("steps") else None
    expected_loss = paper.get(("table4", run.name, "dev_loss")) if not note else None
    values = [
        ("params", done.get("params"), None, "parameters"),
        ("train_flops_paper_formula", train_flops(run.config, run.budget.tokens, True),
         paper.get(("table4", run.name, "train_flops")), "FLOPs"),
        ("train_flops_counted", run.train_flops(), None, "FLOPs"),
        ("tokens", run.budget.tokens, None, "tokens"),
        ("train_seconds", seconds, None, "s"),
        ("seconds_per_step", per_step, paper.get(("table4", run.name, "seconds_per_step")), "s"),
        ("dev_loss", done.get("val_loss"), expected_loss, "nats/token"),
    ]  # fmt: skip
    rows = []
    for metric, ours, expected, unit in values:
        status = compare(expected, ours, TOLERANCE) if done else "not_run"
        hardware = "paper: A100; ours: this run's machine" if metric == "seconds_per_step" else ""
        rows.append(Row("table4", run.name, metric, expected, ours, unit, run.name, status,
                        "; ".join(filter(None, (note, hardware)))))  # fmt: skip
    return rows


def _table3(transformer: Run, rmt: Run, results: dict[str, dict], paper: dict, note: str) -> list[Row]:
    """Where the RMT's validation curve first reaches the Transformer's final loss."""
    row = "rmt_305m_to_transformer_best"
    expected_tokens, expected_flops = paper[("table3", row, "tokens")], paper[("table3", row, "train_flops")]
    if transformer.name not in results or rmt.name not in results:
        return [Row("table3", row, "tokens", expected_tokens, None, "tokens", status="not_run")]
    t_done, r_done = results[transformer.name], results[rmt.name]
    reached = next((step for step, loss in r_done["val_loss_curve"] if loss <= t_done["val_loss"]), None)
    if reached is None:
        return [
            Row(
                "table3",
                row,
                "tokens",
                expected_tokens,
                None,
                "tokens",
                status="differs",
                note=f"the RMT never reached the Transformer's {t_done['val_loss']:.4f}; {note}".strip("; "),
            )
        ]
    fraction = reached / rmt.budget.steps
    tokens = round(rmt.budget.tokens * fraction)
    flops = train_flops(rmt.config, tokens, True)
    measured = {
        "tokens_fraction": tokens / transformer.budget.tokens,
        "flops_fraction": rmt.train_flops() * fraction / transformer.train_flops(),
        "params_fraction": r_done["params"] / t_done["params"],
    }
    if r_done.get("train_seconds") and t_done.get("train_seconds"):
        measured["time_fraction"] = r_done["train_seconds"] * fraction / t_done["train_seconds"]
    return [
        Row("table3", row, "tokens", expected_tokens, tokens, "tokens", rmt.name,
            compare(expected_tokens, tokens, TOLERANCE), note),
        Row("table3", row, "train_flops_paper_formula", expected_flops, flops, "FLOPs", rmt.name,
            compare(expected_flops, flops, TOLERANCE), note),
        *(Row("table3", row, m, None, value, "", rmt.name, "measured", note) for m, value in measured.items()),
    ]  # fmt: skip


def report(scale: str, results: dict[str, dict]) -> list[Row]:
    paper = published("rmt")
    note = scale_note(scale)
    transformer, rmt = runs(scale)
    rows = [row for run in (transformer, rmt) for row in _table4(run, results.get(run.name, {}), paper, note)]
    return rows + _table3(transformer, rmt, results, paper, note)


EXPERIMENT = Experiment(
    name="rmt_table3_4_resources", description=__doc__.splitlines()[0], runs=runs, report=report,
    run_group="rmt_scaling",
)  # fmt: skip

if __name__ == "__main__":
    main(EXPERIMENT)
