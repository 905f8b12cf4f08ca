"""An experiment's results table rebuilt from its finished runs: `results/<scale>/<experiment>.csv` (its claims, as
the scale's plan decides them; each run's data caveats, its sweeps' choices, the noise measured over seeds and the
unigram floors), the per-seed CSV beside it, its figure, then REPORT.md."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from scaling_axes.datamodules.corpora import data_digest
from scaling_axes.datamodules.floors import unigram_floor
from scaling_axes.datamodules.sources import corpus_spec, tokenizer_of
from scaling_axes.harness.claims.judge import judge_scale
from scaling_axes.harness.claims.margins import seeds_of
from scaling_axes.harness.claims.notes import DATA_NOTE, NOTE_PARTS
from scaling_axes.harness.claims.plan import (
    REGISTERED,
    PlannedExperiment,
    confirming_plan,
    pilot_plan,
    plan_for,
)
from scaling_axes.harness.experiment.arms import settled_lr, tuning_rows, untuned
from scaling_axes.harness.experiment.comparisons import write_recipes
from scaling_axes.harness.experiment.finished import FinishedRuns, fallback_for
from scaling_axes.harness.experiment.noise import measured_noise, trained_runs
from scaling_axes.harness.experiment.report import write_report
from scaling_axes.harness.experiment.report_files import check_ours
from scaling_axes.harness.experiment.seeds import Judged, write_seeds
from scaling_axes.harness.experiment.sweep_figure import sweep_figure
from scaling_axes.harness.results import RESULTS_DIR, Row, write_rows
from scaling_axes.harness.runs import RUNS_DIR, Experiment, Run
from scaling_axes.harness.scales import Scale
from scaling_axes.io import remove_temporaries


def rebuild(
    experiment: Experiment,
    scale: Scale,
    runs_dir: Path = RUNS_DIR,
    results_dir: Path | None = None,
    pilot: bool = False,
) -> Path:
    """Rebuild `results/<scale>/<experiment>.csv` (its per-seed file and figure) from finished runs: with the scale's
    plan, from its confirmatory runs (the plan's arms at its fresh seeds); then every claim of the scale judged by
    the plan (`claims.judge`), the scale's REPORT.md and results/REPORT.md. A second registration still training
    (`confirming_plan`) judges its tables in results/<scale>/registered/ and leaves the REPORT.md to the plan in
    force. `pilot`: the pilot's runs, into the pending registration's pilot folder (else `results/<scale>/pilot/`),
    described and never decided."""
    results_dir, runs = Path(results_dir or RESULTS_DIR), experiment.runs(scale)
    confirming = None if pilot else confirming_plan(scale, root=results_dir.parent)
    plan = confirming or plan_for(scale, root=results_dir.parent)
    staged = confirming is not None  # the scale's REPORT.md stays the plan in force's
    table_dir = pilot_dir(scale, results_dir) if pilot else results_dir / scale.name
    table_dir = table_dir / REGISTERED if staged else table_dir
    if not (pilot or staged):
        check_ours(results_dir / "REPORT.md", results_dir / scale.name / "REPORT.md")  # before a table is written
    for directory in (table_dir, table_dir / "seeds"):
        if directory.is_dir():
            remove_temporaries(directory, unlocked=True)  # what a --report killed mid-write left
    trained = trained_runs(Path(runs_dir) / (experiment.run_group or experiment.name) / scale.name)
    planned = plan.experiments.get(experiment.name) if plan and not pilot else None
    fresh = frozenset(k for each in (plan.experiments.values() if plan else ()) for k in each.seeds)
    rules = pilot_plan(scale) if pilot else plan
    results = FinishedRuns(experiment, scale, runs_dir, fresh=fresh, fall_back=fallback_for(rules)).results(planned)
    noise_rows = measured_noise(trained)[1]  # the scale's caveat; no claim's test rests on it
    rows = [held_untuned(row, results) for row in experiment.report(scale, results)]
    rows = data_caveats(rows, results, runs) + tuning_rows(results) + noise_rows + floor_rows(runs)
    path = write_rows(experiment.name, scale, rows, table_dir=table_dir)
    write_seeds(experiment.name, scale, rows, Judged(results, trained), runs, table_dir=table_dir, planned=planned)
    if experiment.comparisons is not None:
        rates = {run.name: trained_rate(run.name, results, planned) for run in runs}
        by_name, whole = {r.name: r for r in runs}, scale.whole_final_evaluation
        write_recipes(experiment.name, experiment.comparisons(scale), by_name, rates, table_dir, whole)
    judge_scale(table_dir, scale, None if pilot else plan)
    if experiment.figure is not None:
        experiment.figure(scale, results, path.with_suffix(".png"))
    title = f"{experiment.name}: each sweep's draws ({scale} scale{', pilot' if pilot else ''})"
    sweep_figure(results, path.with_name(f"{experiment.name}_sweeps.png"), title)
    if not (pilot or staged):
        write_report(results_dir, scale)  # the scale's, its header kept, and the one over every scale
        write_report(results_dir)
    return path


def pilot_dir(scale: Scale, results_dir: Path) -> Path:
    """Where a pilot's tables go: the pending registration's `pilot:` under the checkout `results_dir` is in."""
    pending = pilot_plan(scale)
    return results_dir.parent / pending.pilot if pending else results_dir / scale.name / "pilot"


def trained_rate(name: str, results: dict[str, dict], planned: PlannedExperiment | None) -> float | None:
    """The rate a run's claim seeds trained at: the plan's, else where its sweep settled, else None (declared)."""
    if planned is not None and planned.arms.get(name) is not None:
        return planned.arms[name]
    return settled_lr(results[name]) if results.get(name, {}).get("tuning") is not None else None


def held_untuned(row: Row, results: dict[str, dict]) -> Row:
    """A claim row whose arms are not at a tuned rate (`arms.untuned`) held `insufficient`, saying why."""
    if row.evidence is None or row.status != "insufficient" or not (why := untuned(row, results)):
        return row
    return dataclasses.replace(row, note=NOTE_PARTS.join((row.note, f"{UNTUNED}{'; '.join(why)}")))


UNTUNED = "an arm's lr is not tuned: "


def floor_rows(runs: list[Run]) -> list[Row]:
    """The unigram floor of each corpus and tokenizer the language-model runs train on (prepared here)."""
    rows = {}
    for run in runs:
        key = f"{run.corpus}/{tokenizer_of(run.corpus, run.tokenizer)}"
        if run.classifies_images or key in rows:
            continue
        try:
            rows[key] = Row(
                table="floor",
                row=key,
                metric="unigram_cross_entropy",
                unit="nats/token",
                ours=unigram_floor(run.corpus, run.tokenizer),
                status="measured",
                note=f"counted on the prepared data {data_digest(run.corpus, run.tokenizer)}",
            )
        except FileNotFoundError:
            continue
    return list(rows.values())


def data_caveats(rows: list[Row], results: dict[str, dict], runs: list[Run]) -> list[Row]:
    """What the data behind each row can support. A row whose runs (a claim's: every run it compares, at every
    seed) passed over their data more often than allowed (--allow-repeats) is `memorisation`; one whose runs on disk
    no longer match their declaration is `stale`; both say why. A claim also names the data it was judged on, and
    says when that is an embedded stand-in for the paper's corpus."""
    by_name = {run.name: run for run in runs}
    out = []
    for row in rows:
        names = [name for name in row.run.split(",") if name]
        finished = [done for name in names for done in seeds_of(results.get(name)).values()]
        notes, status, held = [], row.status, []
        if status in ("match", "differs") and (
            unlike := not_comparable(row, [by_name[n] for n in names if n in by_name])
        ):
            status = "not_comparable"
            notes.append(unlike)
        if repeated := [f"{d['run']} {d['data_epochs']:.1f}" for d in finished if d.get("repeats_allowed")]:
            status = "memorisation"
            held.append(f"passes over the data (--allow-repeats): {', '.join(repeated)}; memorisation, not a result")
        if stale := [f"{d['run']} ({d['stale']})" for d in finished if d.get("stale")]:
            status = "stale"
            held.append(
                f"stale: trained with other settings than declared now: {'; '.join(stale)}; retrain "
                "(--force-new) or restore the declaration"
            )
        note = row.note
        if row.metric == "claim":  # statement | why it is held (its runs alone decide it); data: what it was judged on
            note = NOTE_PARTS.join(filter(None, (note, "; ".join(held))))
            data = ", ".join(dict.fromkeys(data_of(by_name[n]) for n in names if n in by_name))
            note += f"{DATA_NOTE}{data}" if data else ""
        else:
            note = "; ".join(filter(None, (note, *notes, *held)))
        out.append(
            dataclasses.replace(row, status=status, note=note) if note != row.note or status != row.status else row
        )
    return out


TIMED_UNITS = ("s", "ms", "tokens/s")  # a time, or a rate over time: the machine's as much as the model's
TRAINED_METRICS = ("loss", "ppl", "acc", "top1", "bpb")  # what the data a model trained on decides (a count does not)


def not_comparable(row: Row, runs: list[Run]) -> str | None:
    """Why a number beside the paper's is not the same measure (None: it is): a time measured on another machine
    than the paper's, or what a model learned from an embedded stand-in for the paper's corpus and tokenizer."""
    if row.unit in TIMED_UNITS or "seconds" in row.metric:
        return "not comparable: a time on this run's machine beside the paper's on its own hardware"
    stand_ins = [run.name for run in runs if not run.classifies_images and corpus_spec(run.corpus).embedded]
    if stand_ins and any(word in row.metric for word in TRAINED_METRICS):
        return (
            f"not comparable: {', '.join(stand_ins)} trained on an embedded stand-in for the paper's corpus "
            "and tokenizer"
        )
    return None


def data_of(run: Run) -> str:
    """The data a run trains on, in words: the corpus and tokenizer (or images), and whether it stands in."""
    if run.classifies_images:
        embedded = run.data.get("source", "embedded") == "embedded"
        return (
            "the embedded MNIST digits, standing in for ImageNet-1k: evidence on digits at this size, not on ImageNet"
            if embedded
            else "ImageNet-1k"
        )
    stand_in = " (an embedded stand-in, not the paper's corpus: evidence at this size on this data, not at the paper's)"
    stand_in = stand_in if corpus_spec(run.corpus).embedded else ""
    return f"{run.corpus}/{tokenizer_of(run.corpus, run.tokenizer)}{stand_in}"
