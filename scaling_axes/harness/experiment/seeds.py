"""`results/<scale>/seeds/<experiment>.csv`, from which every number of a claim can be rebuilt: each run's final
metrics at each seed, every run trained beside them, each claim's margin per seed under both tuning policies and
what its test rests on (`Judged`: what an experiment's rows were judged from)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from scaling_axes.harness.claims.margins import seeds_of
from scaling_axes.harness.experiment.noise import NOISE_METRICS, Trained, metric_values
from scaling_axes.harness.results import RESULTS_DIR, Row
from scaling_axes.harness.scales import Scale
from scaling_axes.harness.stability import stability_measures
from scaling_axes.io import write_csv

SEED_COLUMNS = ("kind", "table", "row", "run", "seed", "metric", "value", "flag")
SEED_METRICS = (
    "val_loss",
    "val_bpb",
    "val_top1",
    "val_ema_top1",
    "test_loss",
    "steps",
    "tokens",
    "val_loss_before_growth",
    "val_loss_after_growth",
)  # the last two: an exact check of growth's
EVIDENCE = ("noise_floor", "runs_per_margin", "noise_scale", "noise_metric", "tolerance", "paired")  # what its test
# rests on; with, for the family (`experiment.family`), its p and verdict where tested, under each tuning policy


@dataclasses.dataclass(frozen=True)
class Judged:
    """What an experiment's rows were judged from, as `write_seeds` commits it: the runs as the claims read them,
    every run trained in their directory (noise), the arms whose claim seeds fell back below their sweep's choice
    (`moved`), and the claims judged with those arms at the choice (`at_choice`, `experiment.family`)."""

    results: dict[str, dict]
    trained: Trained
    moved: tuple[str, ...] = ()
    at_choice: tuple[Row, ...] = ()


def write_seeds(
    experiment: str, scale: Scale, rows: list[Row], judged: Judged, results_dir: Path = RESULTS_DIR
) -> Path:
    """`results/<scale>/seeds/<experiment>.csv`, from which every number of a claim can be rebuilt: each run's final
    metrics at each seed as the claims read it (`run`), every run trained beside them with its noise metrics
    (`trained`; `flag`: `unstable`, left out of the noise, and `abandoned`, claim seeds at a sweep's choice that
    their arm left), each claim's margin at each seed (`claim`; `claim_at_choice` under the other tuning policy) and
    what its noise rests on (`evidence`; `claim_arm`: a metric no run records, each arm's values over its seeds)."""
    unsteady = judged.trained.unsteady
    runs = [
        {"kind": "run", "run": name, "seed": seed, "metric": metric, "value": value}
        for name, done in sorted(judged.results.items())
        for seed, each in seeds_of(done).items()
        for metric, value in {**{m: each.get(m) for m in SEED_METRICS}, **stability_measures(each)}.items()
        if isinstance(value, (int, float))
    ]
    trained = [
        {
            "kind": "trained",
            "run": base,
            "seed": seed,
            "metric": metric,
            "value": f"{value:.9g}",
            "flag": " ".join(
                flag
                for flag, marked in (("unstable", seed in unsteady[base]), ("abandoned", base in judged.moved))
                if marked
            ),
        }
        for metric in NOISE_METRICS
        for base, values in metric_values(judged.trained, metric).items()
        for seed, value in values.items()
    ]
    claims = [
        {
            "kind": kind,
            "table": row.table,
            "row": row.row,
            "run": row.run,
            "seed": seed,
            "metric": row.unit or "margin",
            "value": f"{margin:.9g}",
        }
        for kind, judged_rows in (("claim", rows), ("claim_at_choice", judged.at_choice))
        for row in judged_rows
        if row.evidence
        for seed, margin in zip(row.evidence.seeds, row.evidence.margins, strict=True)
    ]
    evidence = evidence_rows(rows, judged.moved, judged.at_choice)
    own = [
        {
            "kind": "claim_arm",
            "table": row.table,
            "row": row.row,
            "run": row.run,
            "seed": k,
            "metric": f"arm{i}",
            "value": f"{value:.9g}",
        }
        for row in rows
        if row.evidence and row.evidence.own_values
        for i, values in enumerate(row.evidence.own_values, 1)
        for k, value in enumerate(values, 1)
    ]
    path = Path(results_dir) / scale.name / "seeds" / f"{experiment}.csv"
    write_csv(path, SEED_COLUMNS, runs + trained + claims + evidence + own)
    return path


def evidence_rows(rows: Sequence[Row], moved: Sequence[str], at_choice: Sequence[Row]) -> list[dict]:
    """The per-seed file's `evidence` rows of each claim in `rows` (`claim_evidence`)."""
    return [
        {
            "kind": "evidence",
            "table": row.table,
            "row": row.row,
            "run": row.run,
            "metric": field,
            "value": "" if value is None else value,
        }
        for row in rows
        if row.evidence
        for field, value in claim_evidence(row, moved, at_choice).items()
    ]


def claim_evidence(row: Row, moved: Sequence[str], at_choice: Sequence[Row]) -> dict[str, object]:
    """What a claim's per-seed file records of its test: what its noise rests on, its p and verdict where tested,
    and under the other tuning policy (where an arm moved) the same, empty where that is not tested."""
    out = {field: getattr(row.evidence, field) for field in EVIDENCE}
    if row.q is not None:
        tests = ";".join(f"{se:.9g}:{df:g}" for se, df in row.evidence.tests)
        out |= {"p": f"{row.p:.9g}", "verdict": row.status, "tests": tests}
    if set(row.run.split(",")) & set(moved):
        other = next((each for each in at_choice if (each.table, each.row) == (row.table, row.row)), None)
        tested = other is not None and other.q is not None
        out |= {"p_at_choice": f"{other.p:.9g}" if tested else "", "verdict_at_choice": other.status if tested else ""}
    return out
