"""REPORT.md's "Validation against test": each final-loss contrast of a planned experiment, its mean margin at the
plan's seeds on the validation split and on the test split, and the shift between them (`claims.test_split`). A
margin that moves as much as the effects of interest between two held-out splits of one corpus says how far one
split's verdict reaches."""

from __future__ import annotations

from scaling_axes.harness.claims.observed import Experiment
from scaling_axes.harness.claims.plan import AnalysisPlan
from scaling_axes.harness.claims.test_split import shifts


def shift_lines(experiments: dict[str, Experiment], plan: AnalysisPlan) -> list[str]:
    """The section: one table row per contrast row with both splits at every arm and seed (`experiments`: the
    scale's files as `judge.read_scale` read them)."""
    found = [
        s
        for name, planned in sorted(plan.experiments.items())
        if name in experiments
        for s in shifts(experiments[name], list(planned.seeds))
    ]
    if not found:
        return []
    split = "test" if plan.rules.verdict_split == "test" else "validation"
    out = [
        "## Validation against test",
        "",
        f"Each final-loss contrast's mean margin over the plan's seeds (positive: the paper's direction) on the "
        f"validation split and on the test split, as each run's final evaluation read them; verdicts are judged on "
        f"the {split} split."
        + (
            " The per-seed files' `claim` and `arm` rows hold each run's validation margin, as the run wrote it; on "
            "the test split the judge forms each margin again from the runs' `test_loss` rows by the row's "
            "`contrast` (its `evidence`), as the test column here does."
            if split == "test"
            else ""
        ),
        "",
        "| experiment | row | seeds | validation | test | test - validation |",
        "|---|---|---|---|---|---|",
    ]
    out += [
        f"| {s.experiment} | {s.where} | {s.seeds} | {s.validation:+.4f} | {s.test:+.4f} | {s.shift:+.4f} |"
        for s in found
    ]
    largest = max(abs(s.shift) for s in found)
    return [*out, "", f"The largest shift is {largest:.3f} nats/token.", ""]
