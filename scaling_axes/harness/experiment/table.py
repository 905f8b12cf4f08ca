"""An experiment's results table rebuilt from its finished runs: `results/<scale>/<experiment>.csv` (its claims
settled against the noise measured over seeds, each run's data caveats, its sweeps' choices, the noise and the
unigram floors), the per-seed CSV beside it, its figure, then REPORT.md."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path

from scaling_axes.datamodules.corpora import corpus_spec, data_digest, tokenizer_of
from scaling_axes.datamodules.floors import unigram_floor
from scaling_axes.harness.claims import paired_noise, seeds_of, settle
from scaling_axes.harness.experiment.arms import not_learning, tuning_rows, unstable, untuned
from scaling_axes.harness.experiment.family import judge_family
from scaling_axes.harness.experiment.finished import FinishedRuns
from scaling_axes.harness.experiment.report import write_report
from scaling_axes.harness.names import parse_seed
from scaling_axes.harness.results import RESULTS_DIR, Row, write_rows
from scaling_axes.harness.runs import RUNS_DIR, Experiment, Run
from scaling_axes.harness.scales import Scale
from scaling_axes.harness.stability import stability_measures, unstable_seeds
from scaling_axes.harness.training.curves import final_train_loss
from scaling_axes.harness.training.rundir import read_done
from scaling_axes.io import CorruptFileError, remove_temporaries, write_csv
from scaling_axes.significance import pooled_spread


def rebuild(experiment: Experiment, scale: Scale, runs_dir: Path = RUNS_DIR, results_dir: Path | None = None) -> Path:
    """Rebuild `results/<scale>/<experiment>.csv` (and its figure) from finished runs, then the scale's REPORT.md and
    results/REPORT.md."""
    results_dir, runs = Path(results_dir or RESULTS_DIR), experiment.runs(scale)
    for directory in (results_dir / scale.name, results_dir / scale.name / "seeds"):
        if directory.is_dir():
            remove_temporaries(directory, unlocked=True)  # what a --report killed mid-write left
    trained = trained_runs(Path(runs_dir) / (experiment.run_group or experiment.name) / scale.name)
    noise, noise_rows = measured_noise(trained)
    rows, judged = judge_claims(experiment, scale, runs, FinishedRuns(experiment, scale, runs_dir), trained, noise)
    rows = data_caveats(rows, judged.results, runs) + tuning_rows(judged.results) + noise_rows + floor_rows(runs)
    path = write_rows(experiment.name, scale, rows, results_dir)
    write_seeds(experiment.name, scale, rows, judged, results_dir)
    judge_family(path.parent)
    if experiment.figure is not None:
        experiment.figure(scale, judged.results, path.with_suffix(".png"))
    write_report(results_dir, scale)  # the scale's, its header kept, and the one over every scale
    write_report(results_dir)
    return path


def judge_claims(experiment: Experiment, scale: Scale, runs: list[Run], finished: FinishedRuns, trained: Trained,
                 noise: dict[str, tuple[float, int]]) -> tuple[list[Row], Judged]:  # fmt: skip
    """`experiment`'s rows with its claims settled on the `finished` runs (of its `runs` at `scale`) against the
    measured `noise` and the spread of its paired margins (`claims.paired_noise`, over the claims whose arms learned
    and trained stably); where an arm's claim seeds fell back below its sweep's choice, each claim judged again with
    every arm at its sweep's choice (`at_choice`: the family decides where the two policies differ)."""

    def judged(results: dict[str, dict], kept: tuple[str, ...] = ()) -> list[Row]:
        rows = experiment.report(scale, results)
        blocked = {id(row): (not_learning(row, results, runs), untuned(row, results), unstable(row, results, kept))
                   for row in rows if row.evidence}  # fmt: skip
        paired = paired_noise([row for row in rows if row.evidence and not any(blocked[id(row)][::2])])
        return [settle(row, scale, noise, *blocked[id(row)], paired) if row.evidence else row for row in rows]

    results = finished.results()
    rows = judged(results)
    if not (moved := tuple(name for name, done in results.items() if done.get("stable_fallback"))):
        return rows, Judged(results, trained)
    at_choice = [row for row in judged(finished.results(at_choice=True), moved) if row.evidence]
    return rows, Judged(results, trained, moved, tuple(at_choice))


# The final metrics whose spread over seeds is measured, each as a finished run's done.json gives it: the claims
# judged on a metric take its noise (`Evidence.noise_metric`), a train-loss claim the smoothed train loss's
NOISE_METRICS: dict[str, Callable[[dict], float | None]] = {
    "val_loss": lambda done: done.get("val_loss"),
    "val_top1": lambda done: done.get("val_top1"),
    "train_loss": final_train_loss,
}


@dataclasses.dataclass(frozen=True)
class Trained:
    """Every run trained in one directory: base run name -> seed -> done.json, and base -> the seeds that trained
    unstably (`stability.unstable_seeds`: left out of the noise, flagged in the per-seed file)."""

    by_run: dict[str, dict[int, dict]]
    unsteady: dict[str, dict[int, str]]


def trained_runs(directory: Path) -> Trained:
    """Every finished run in `directory` (an experiment's runs at one scale, sweep points and seeds its claims left
    included) by its name without the seed, at each seed."""
    by_run: dict[str, dict[int, dict]] = {}
    for done_path in sorted(Path(directory).glob("*/done.json")):
        base, seed = parse_seed(done_path.parent.name)
        try:
            by_run.setdefault(base, {})[seed] = read_done(done_path)
        except (CorruptFileError, FileNotFoundError):
            continue
    return Trained(by_run, {base: unstable_seeds(seeds) for base, seeds in by_run.items()})


def metric_values(trained: Trained, metric: str) -> dict[str, dict[int, float]]:
    """base -> seed -> the final `metric` (a NOISE_METRICS key) of each trained run that has it."""
    value = NOISE_METRICS[metric]
    return {base: {k: float(v) for k, done in seeds.items() if isinstance(v := value(done), (int, float))}
            for base, seeds in trained.by_run.items()}  # fmt: skip


def measured_noise(trained: Trained) -> tuple[dict[str, tuple[float, int]], list[Row]]:
    """metric -> (the pooled spread over seeds of one run's final `metric`, its degrees of freedom), from the
    `trained` runs (`trained_runs`) at two seeds or more, leaving out the seeds that trained unstably (a spike, or an
    outlier among the run's seeds: `harness.stability`), whose spread is not the seeds' noise; and a row for each,
    its note giving the spread over every seed beside it."""
    noise, rows, unsteady = {}, [], trained.unsteady
    for metric in NOISE_METRICS:
        every = metric_values(trained, metric)
        stable = {base: {k: v for k, v in values.items() if k not in unsteady[base]} for base, values in every.items()}
        spread, dof = pooled_spread([list(values.values()) for values in stable.values()])
        if dof:
            noise[metric] = spread, dof
            rows.append(_noise_row(metric, spread, dof, every, stable))
    return noise, rows


def _noise_row(metric: str, spread: float, dof: int, every: dict[str, dict[int, float]],
               stable: dict[str, dict[int, float]]) -> Row:  # fmt: skip
    """The measured noise of `metric`, with what it rests on: the runs and seeds pooled, the unstable seeds left out
    (and the spread with them), and the runs whose seeds spread widest (what keeps the noise up)."""
    left_out = sum(len(every[base]) - len(values) for base, values in stable.items() if len(every[base]) > 1)
    everything = pooled_spread([list(values.values()) for values in every.values()])[0]
    widest = sorted(((statistics.stdev(v.values()), base) for base, v in stable.items() if len(v) > 1), reverse=True)
    return Row(table="noise", row=metric, metric="seed_spread", ours=spread, status="measured",
               unit="fraction" if metric == "val_top1" else "nats/token",
               note=f"pooled over {sum(len(g) >= 2 for g in stable.values())} runs, {dof} degrees of freedom; "
               f"{left_out} unstable seed{'s' * (left_out != 1)} left out (over every seed: {everything:.3g}); "
               f"widest: {', '.join(f'{name} {sd:.3g}' for sd, name in widest[:3])}")  # fmt: skip


def floor_rows(runs: list[Run]) -> list[Row]:
    """The unigram floor of each corpus and tokenizer the language-model runs train on (prepared here)."""
    rows = {}
    for run in runs:
        key = f"{run.corpus}/{tokenizer_of(run.corpus, run.tokenizer)}"
        if run.classifies_images or key in rows:
            continue
        try:
            rows[key] = Row(table="floor", row=key, metric="unigram_cross_entropy", unit="nats/token",
                            ours=unigram_floor(run.corpus, run.tokenizer), status="measured",
                            note=f"counted on the prepared data {data_digest(run.corpus, run.tokenizer)}")  # fmt: skip
        except FileNotFoundError:
            continue
    return list(rows.values())


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


def write_seeds(experiment: str, scale: Scale, rows: list[Row], judged: Judged,
                results_dir: Path = RESULTS_DIR) -> Path:  # fmt: skip
    """`results/<scale>/seeds/<experiment>.csv`, from which every number of a claim can be rebuilt: each run's final
    metrics at each seed as the claims read it (`run`), every run trained beside them with its noise metrics
    (`trained`; `flag`: `unstable`, left out of the noise, and `abandoned`, claim seeds at a sweep's choice that
    their arm left), each claim's margin at each seed (`claim`; `claim_at_choice` under the other tuning policy) and
    what its noise rests on (`evidence`; `claim_arm`: a metric no run records, each arm's values over its seeds)."""
    unsteady = judged.trained.unsteady
    runs = [{"kind": "run", "run": name, "seed": seed, "metric": metric, "value": value}
            for name, done in sorted(judged.results.items()) for seed, each in seeds_of(done).items()
            for metric, value in {**{m: each.get(m) for m in SEED_METRICS}, **stability_measures(each)}.items()
            if isinstance(value, (int, float))]  # fmt: skip
    trained = [{"kind": "trained", "run": base, "seed": seed, "metric": metric, "value": f"{value:.9g}",
                "flag": " ".join(flag for flag, marked in (("unstable", seed in unsteady[base]),
                                                           ("abandoned", base in judged.moved)) if marked)}
               for metric in NOISE_METRICS for base, values in metric_values(judged.trained, metric).items()
               for seed, value in values.items()]  # fmt: skip
    claims = [{"kind": kind, "table": row.table, "row": row.row, "run": row.run, "seed": seed,
               "metric": row.unit or "margin", "value": f"{margin:.9g}"}
              for kind, judged_rows in (("claim", rows), ("claim_at_choice", judged.at_choice))
              for row in judged_rows if row.evidence
              for seed, margin in zip(row.evidence.seeds, row.evidence.margins, strict=True)]  # fmt: skip
    evidence = evidence_rows(rows, judged.moved, judged.at_choice)
    own = [{"kind": "claim_arm", "table": row.table, "row": row.row, "run": row.run, "seed": k, "metric": f"arm{i}",
            "value": f"{value:.9g}"}
           for row in rows if row.evidence and row.evidence.own_values
           for i, values in enumerate(row.evidence.own_values, 1) for k, value in enumerate(values, 1)]  # fmt: skip
    path = Path(results_dir) / scale.name / "seeds" / f"{experiment}.csv"
    write_csv(path, SEED_COLUMNS, runs + trained + claims + evidence + own)
    return path


def evidence_rows(rows: Sequence[Row], moved: Sequence[str], at_choice: Sequence[Row]) -> list[dict]:
    """The per-seed file's `evidence` rows of each claim in `rows` (`claim_evidence`)."""
    return [{"kind": "evidence", "table": row.table, "row": row.row, "run": row.run, "metric": field,
             "value": "" if value is None else value}
            for row in rows if row.evidence
            for field, value in claim_evidence(row, moved, at_choice).items()]  # fmt: skip


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
        notes, status = [], row.status
        if row.metric == "claim" and names:
            notes.append(f"data: {', '.join(dict.fromkeys(data_of(by_name[n]) for n in names if n in by_name))}")
        if status in ("match", "differs") and (unlike := not_comparable(row, [by_name[n] for n in names
                                                                              if n in by_name])):  # fmt: skip
            status = "not_comparable"
            notes.append(unlike)
        if repeated := [f"{d['run']} {d['data_epochs']:.1f}" for d in finished if d.get("repeats_allowed")]:
            status = "memorisation"
            notes.append(f"passes over the data (--allow-repeats): {', '.join(repeated)}; memorisation, not a result")
        if stale := [f"{d['run']} ({d['stale']})" for d in finished if d.get("stale")]:
            status = "stale"
            notes.append(f"stale: trained with other settings than declared now: {'; '.join(stale)}; retrain "
                         "(--force-new) or restore the declaration")  # fmt: skip
        note = "; ".join(filter(None, (row.note, *notes)))
        q = row.q if status == row.status else None  # memorisation or stale: not a tested claim
        out.append(dataclasses.replace(row, status=status, note=note, q=q) if notes else row)
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
        return (f"not comparable: {', '.join(stand_ins)} trained on an embedded stand-in for the paper's corpus "
                "and tokenizer")  # fmt: skip
    return None


def data_of(run: Run) -> str:
    """The data a run trains on, in words: the corpus and tokenizer (or images), and whether it stands in."""
    if run.classifies_images:
        embedded = run.data.get("source", "embedded") == "embedded"
        return ("the embedded MNIST digits, standing in for ImageNet-1k: evidence on digits at this size, not on "
                "ImageNet" if embedded else "ImageNet-1k")  # fmt: skip
    stand_in = " (an embedded stand-in, not the paper's corpus: evidence at this size on this data, not at the paper's)"
    stand_in = stand_in if corpus_spec(run.corpus).embedded else ""
    return f"{run.corpus}/{tokenizer_of(run.corpus, run.tokenizer)}{stand_in}"
