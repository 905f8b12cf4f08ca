"""`results/<scale>/seeds/<experiment>.csv`, from which every claim of the table is judged again (`claims.judge`,
reading it through `claims.observed`): each run's final metrics and stability measures at each seed with its data's
unigram floor (a classifier: its chance top-1), the plan digest each run recorded, every run trained beside them
(the measured noise), each claim's margin at each seed, its arms' values of its measure, and what its runs alone hold
it to."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from scaling_axes.datamodules.floors import unigram_floor
from scaling_axes.harness.claims.margins import seeds_of
from scaling_axes.harness.claims.notes import DATA_NOTE, NOTE_PARTS
from scaling_axes.harness.claims.observed import SEED_COLUMNS
from scaling_axes.harness.claims.plan import PlannedExperiment
from scaling_axes.harness.experiment.noise import NOISE_METRICS, Trained, metric_values
from scaling_axes.harness.results import RESULTS_DIR, Row
from scaling_axes.harness.runs import Run
from scaling_axes.harness.scales import Scale
from scaling_axes.harness.stability import stability_measures
from scaling_axes.harness.training.curves import final_train_loss
from scaling_axes.io import write_csv

SEED_METRICS = (
    "val_loss",
    "val_bpb",
    "val_top1",
    "val_ema_top1",
    "test_loss",
    "steps",
    "tokens",
    "val_loss_before_growth",
    "val_loss_after_growth",  # these two: an exact check of growth's
    "started_at",  # when the run was first launched and when it ended, seconds since the epoch (nine digits: to ten
    "ended_at",  # seconds): a run trained before its plan's registration shows as such
)


@dataclasses.dataclass(frozen=True)
class Judged:
    """What an experiment's rows were built from, as `write_seeds` commits it: the runs as the claims read them
    (name -> done.json at each seed) and every run trained in their directory (noise)."""

    results: dict[str, dict]
    trained: Trained


def run_rows(results: dict[str, dict], runs: Sequence[Run], planned: PlannedExperiment | None = None) -> list[dict]:
    """Each run's final metrics, stability measures and data floor at each seed (`run`), its curve and test windows
    (`series_rows`), the plan each recorded when it trained (`plan`) and its sweep's points (`sweep_rows`); with
    `planned`, a `plan` row for each of its arms at each of its seeds, `unfinished` where that run has not finished,
    so that a reader knows the file whole."""
    floors = {run.name: _floor(run) for run in runs}
    chance = {run.name: 100.0 / run.config.num_classes for run in runs if run.classifies_images}
    out = []
    for name, done in sorted(results.items()):
        for seed, each in seeds_of(done).items():
            measures = {m: each.get(m) for m in SEED_METRICS} | stability_measures(each)
            measures |= {
                "train_loss": final_train_loss(each),
                "unigram_floor": floors.get(name),
                "chance_top1": chance.get(name),
            }
            out += [
                {"kind": "run", "run": name, "seed": seed, "metric": metric, "value": f"{value:.9g}"}
                for metric, value in measures.items()
                if isinstance(value, (int, float))
            ]
            out += series_rows(name, seed, each)
            plans = each.get("plans") or [each.get("plan", "")]  # every plan it trained under (a resume's too)
            out.append({"kind": "plan", "run": name, "seed": seed, "value": PLANS_JOINED.join(plans)})
        out += sweep_rows(name, done or {})  # the run's, not a seed's: the sweep its seeds' rate came from
    for arm in planned.arms if planned else ():
        finished = seeds_of(results.get(arm))
        out += [
            {"kind": "plan", "run": arm, "seed": k, "value": UNFINISHED} for k in planned.seeds if k not in finished
        ]
    return out


def series_rows(name: str, seed: int, done: dict) -> list[dict]:
    """A run's validation curve (`curve`: step:loss pairs) and its whole test split's loss window by window
    (`windows`), each one row at its seed, where it recorded them."""
    out = []
    if curve := done.get("val_loss_curve"):
        value = " ".join(f"{step}:{loss:.9g}" for step, loss in curve)
        out.append({"kind": "curve", "run": name, "seed": seed, "metric": "val_loss", "value": value})
    if windows := done.get("test_window_losses"):
        value = " ".join(f"{loss:.7g}" for loss in windows)
        out.append({"kind": "windows", "run": name, "seed": seed, "metric": "test_loss", "value": value})
    return out


def sweep_rows(name: str, done: dict) -> list[dict]:
    """Each point its learning-rate sweep trained (`sweep`: the rate as the metric, the draw as the seed, its final
    validation loss; flagged `unstable`, or `diverged` with no loss), where `name` chose its rate by one."""
    tuning = done.get("tuning")
    out = []
    for lr, draws in sorted(getattr(tuning, "points", {}).items()):
        for draw, point in sorted(draws.items()):
            flag = "diverged" if point.loss is None else "unstable" if point.unstable else ""
            value = "" if point.loss is None else f"{point.loss:.9g}"
            out.append(
                {"kind": "sweep", "run": name, "seed": draw, "metric": f"{lr:.6g}", "value": value, "flag": flag}
            )
    return out


PLANS_JOINED = ";"  # a run resumed under another plan (--allow-other-plan): both digests, in the order it trained
UNFINISHED = "unfinished"  # a planned arm's seed that has not finished: its `plan` row says so


def _floor(run: Run) -> float | None:
    if run.classifies_images:
        return None
    try:
        return unigram_floor(run.corpus, run.tokenizer)
    except FileNotFoundError:
        return None


def claim_rows(rows: Sequence[Row]) -> list[dict]:
    """Each claim's margin at each seed (`claim`), its arms' values (`arm`) and its evidence: the contrast, the
    measure, and the status its runs alone hold it to (`held`, `held_why`: unmatched, never reached, ...)."""
    out = []
    for row in (r for r in rows if r.metric == "claim"):
        where = {"table": row.table, "row": row.row}
        e = row.evidence
        if e is not None:
            out += [
                {
                    "kind": "claim",
                    **where,
                    "run": row.run,
                    "seed": k,
                    "metric": row.unit or "margin",
                    "value": f"{m:.9g}",
                }
                for k, m in zip(e.seeds, e.margins, strict=True)
            ]
            out += [
                {"kind": "arm", **where, "run": arm, "seed": k, "metric": e.measure, "value": f"{v:.9g}"}
                for arm, values in e.arm_values.items()
                for k, v in sorted(values.items())
            ]
        held, why = held_by(row)
        fields = {
            "contrast": ";".join(f"{arm}:{c:g}" for arm, c in e.contrast.items()) if e else "",
            "measure": e.measure if e else "",
            "before_training": bool(e and e.before_training),
            "held": held,
            "held_why": why,
        }
        out += [{"kind": "evidence", **where, "run": row.run, "metric": k, "value": v} for k, v in fields.items()]
    return out


def held_by(row: Row) -> tuple[str, str]:
    """(status, why) that `row`'s runs alone decide, before any plan (never reached, out of reach, unmatched, a part
    it fails, untuned, memorisation, stale: the row's status and the last part of its note), else nothing."""
    note = row.note.partition(DATA_NOTE)[0]
    if row.status == "insufficient" and NOTE_PARTS not in note:
        return "", ""
    return row.status, note.split(NOTE_PARTS)[-1].strip()


def write_seeds(
    experiment: str,
    scale: Scale,
    rows: list[Row],
    judged: Judged,
    runs: Sequence[Run] = (),
    results_dir: Path = RESULTS_DIR,
    table_dir: Path | None = None,
    planned: PlannedExperiment | None = None,
) -> Path:
    """`results/<scale>/seeds/<experiment>.csv` (see the module; under `table_dir` where given), with its digest
    beside it (`<name>.blake2b`): evidence that a report verifies before it reads a row."""
    unsteady = judged.trained.unsteady
    trained = [
        {
            "kind": "trained",
            "run": base,
            "seed": seed,
            "metric": metric,
            "value": f"{value:.9g}",
            "flag": "unstable" if seed in unsteady[base] else "",
        }
        for metric in NOISE_METRICS
        for base, values in metric_values(judged.trained, metric).items()
        for seed, value in values.items()
    ]
    path = Path(table_dir or Path(results_dir) / scale.name) / "seeds" / f"{experiment}.csv"
    write_csv(path, SEED_COLUMNS, run_rows(judged.results, runs, planned) + trained + claim_rows(rows), checksum=True)
    return path
