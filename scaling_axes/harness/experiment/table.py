"""An experiment's results table rebuilt from its finished runs: `results/<scale>/<experiment>.csv` (its claims
settled against the noise measured over seeds, each run's data caveats, its sweeps' choices, the noise and the
unigram floors), the per-seed CSV beside it, its figure, then REPORT.md."""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path

from scaling_axes.datamodules.corpora import corpus_spec, tokenizer_of
from scaling_axes.datamodules.floors import unigram_floor
from scaling_axes.harness.claims import seeds_of, settle, with_multiplicity
from scaling_axes.harness.experiment.arms import not_learning, tuning_rows, unstable, untuned
from scaling_axes.harness.experiment.finished import FinishedRuns
from scaling_axes.harness.experiment.report import claim_key, read_tables, write_report
from scaling_axes.harness.names import parse_seed
from scaling_axes.harness.results import COLUMNS, RESULTS_DIR, Row, write_rows
from scaling_axes.harness.runs import RUNS_DIR, Experiment, Run
from scaling_axes.harness.scales import Scale
from scaling_axes.harness.stability import unstable_seeds
from scaling_axes.harness.training.rundir import read_done
from scaling_axes.io import CorruptFileError, write_csv
from scaling_axes.significance import false_discovery_q, pooled_spread


def rebuild(experiment: Experiment, scale: Scale, runs_dir: Path = RUNS_DIR, results_dir: Path | None = None) -> Path:
    """Rebuild `results/<scale>/<experiment>.csv` (and its figure) from finished runs, then REPORT.md."""
    results_dir = Path(results_dir or RESULTS_DIR)
    results, runs = FinishedRuns(experiment, scale, runs_dir).results(), experiment.runs(scale)
    noise, spread_rows = measured_noise(Path(runs_dir) / (experiment.run_group or experiment.name) / scale.name)
    rows = [settle(row, scale, noise, not_learning(row, results, runs), untuned(row, results),
                   unstable(row, results)) if row.evidence else row
            for row in experiment.report(scale, results)]  # fmt: skip
    rows = data_caveats(rows, results, runs) + tuning_rows(results) + spread_rows + floor_rows(runs)
    path = write_rows(experiment.name, scale, rows, results_dir)
    control_false_discoveries(path.parent)
    write_seeds(experiment.name, scale, rows, results, results_dir)
    if experiment.figure is not None:
        experiment.figure(scale, results, path.with_suffix(".png"))
    write_report(results_dir)
    return path


def control_false_discoveries(scale_dir: Path) -> None:
    """Each results CSV of one scale rewritten with the q of each tested claim (a row with a q: `claims.settle`) over
    the family of them all, a comparison that several tables state of the same runs counted once
    (`claims.with_multiplicity`)."""
    tables, family = read_tables(scale_dir), {}
    for rows in tables.values():
        family |= {claim_key(r): float(r["p"]) for r in rows if r.get("q") and claim_key(r) not in family}
    q = dict(zip(family, false_discovery_q(list(family.values())), strict=True))
    for name, rows in tables.items():
        adjusted = [with_multiplicity(r, q[claim_key(r)], len(q)) if r.get("q") else r for r in rows]
        if adjusted != rows:
            write_csv(scale_dir / f"{name}.csv", COLUMNS, adjusted)


NOISE_METRICS = ("val_loss", "val_top1")  # the final metrics whose spread over seeds is measured


def measured_noise(directory: Path) -> tuple[dict[str, tuple[float, int]], list[Row]]:
    """metric -> (the pooled spread over seeds of one run's final `metric`, its degrees of freedom), from the finished
    runs in `directory` (an experiment's runs at one scale) that trained at two seeds or more, leaving out the seeds
    that trained unstably (a spike, or an outlier among the run's seeds: `harness.stability`), whose spread is not
    the seeds' noise; and a row for each, its note giving the spread over every seed beside it."""
    by_run: dict[str, dict[int, dict]] = {}
    for done_path in sorted(Path(directory).glob("*/done.json")):
        name = done_path.parent.name
        base, seed = parse_seed(name)
        try:
            by_run.setdefault(base, {})[seed] = read_done(done_path)
        except (CorruptFileError, FileNotFoundError):
            continue
    noise, rows, unsteady = {}, [], {base: unstable_seeds(seeds) for base, seeds in by_run.items()}
    for metric in NOISE_METRICS:
        every = {base: {k: float(d[metric]) for k, d in seeds.items() if isinstance(d.get(metric), (int, float))}
                 for base, seeds in by_run.items()}  # fmt: skip
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
               unit="nats/token" if metric == "val_loss" else "fraction",
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
                            ours=unigram_floor(run.corpus, run.tokenizer), status="measured")  # fmt: skip
        except FileNotFoundError:
            continue
    return list(rows.values())


SEED_COLUMNS = ("kind", "table", "row", "run", "seed", "metric", "value")
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


def write_seeds(experiment: str, scale: Scale, rows: list[Row], results: dict[str, dict],
                results_dir: Path = RESULTS_DIR) -> Path:  # fmt: skip
    """`results/<scale>/seeds/<experiment>.csv`: every finished run's final metrics at each seed, and every claim's
    margin at each seed, so that a verdict can be recomputed by hand."""
    runs = [{"kind": "run", "table": "", "row": "", "run": name, "seed": seed, "metric": metric, "value": each[metric]}
            for name, done in sorted(results.items()) for seed, each in seeds_of(done).items()
            for metric in SEED_METRICS if isinstance(each.get(metric), (int, float))]  # fmt: skip
    claims = [{"kind": "claim", "table": row.table, "row": row.row, "run": row.run, "seed": seed,
               "metric": row.unit or "margin", "value": f"{margin:.6g}"}
              for row in rows if row.evidence
              for seed, margin in zip(row.evidence.seeds, row.evidence.margins, strict=True)]  # fmt: skip
    path = Path(results_dir) / scale.name / "seeds" / f"{experiment}.csv"
    write_csv(path, SEED_COLUMNS, runs + claims)
    return path


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
