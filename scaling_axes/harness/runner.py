"""Training an experiment's runs (growing a run from its source first) and rebuilding its results table."""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
from pathlib import Path
from typing import Any

from scaling_axes.datamodules.corpora import corpus_spec, default_data_root, tokenizer_of
from scaling_axes.datamodules.floors import unigram_floor
from scaling_axes.datamodules.tokenizers import load_tokenizer
from scaling_axes.harness.arms import not_learning, tuning_rows, unstable, untuned
from scaling_axes.harness.claims import pooled_spread, seeds_of, settle
from scaling_axes.harness.final import check_tokenizer, final_weights, read_done, read_final_config, write_done
from scaling_axes.harness.finished import load_results, tuning
from scaling_axes.harness.locks import check_writable, run_lock
from scaling_axes.harness.report import write_report
from scaling_axes.harness.results import RESULTS_DIR, Row, write_rows
from scaling_axes.harness.runs import (
    RUNS_DIR,
    SEED_SUFFIX,
    Experiment,
    Growth,
    Run,
    check_fingerprint,
    find_run,
    fingerprint_changes,
    fingerprint_fields,
    identity,
    move_aside,
    read_config,
    resolve_options,
    run_dir,
)
from scaling_axes.harness.scales import Scale
from scaling_axes.harness.stability import unstable_seeds
from scaling_axes.harness.sweeps import tuned
from scaling_axes.harness.training import check_launch, task_of, train_run
from scaling_axes.io import (
    CorruptFileError,
    atomic_save_safetensors,
    atomic_write,
    load_state,
    read_verified_json,
    verify_checksum,
    write_csv,
)


def epoch_limit(experiment: Experiment, scale: Scale) -> float:
    """Passes a run may make: the experiment's own (the paper's repeats where it repeats data), at least the scale's
    `min_epoch_limit` (small: shrunk budgets on whatever corpus is there)."""
    return scale.epoch_limit(experiment.max_epochs)


def data_epochs(experiment: Experiment, scale: Scale, run: Run, allow_repeats: bool = False) -> float | None:
    """Passes `run` makes over its training data, its growth chain's passes over the same data included (a grown
    model has seen what its sources saw). Above `epoch_limit` it stops here with what to do, unless
    `allow_repeats`; a scale that does not check passes (smoke, a pipeline check) is exempt (None)."""
    if not scale.checks_epochs:
        return None
    try:
        epochs, what = chain_epochs(experiment, scale, run)
    except FileNotFoundError as unknown:  # a corpus downloaded on first use: its size is known once prepared
        print(f"run {run.name}: passes over its data not checked before the corpus is prepared ({unknown})")
        return None
    limit = epoch_limit(experiment, scale)
    if epochs > limit and not allow_repeats:
        raise SystemExit(
            f"run {run.name} would pass over {what} {epochs:.1f} times, above {experiment.name}'s limit of "
            f"{limit:g} at {scale} scale: its numbers would measure memorisation. Put the real corpus "
            f"under {default_data_root()}/ (see the README's Data section), shorten the run, or pass --allow-repeats "
            "to train it anyway (its result rows are then marked)"
        )
    return epochs


def chain_epochs(experiment: Experiment, scale: Scale, run: Run) -> tuple[float, str]:
    """(passes, what) of `run` and of every run it grows from that trained on the same data (corpus and
    tokenizer)."""
    epochs, what = task_of(run).epochs(run)
    source, sources = run, []
    while source.grow_from:
        source = find_run(experiment, scale, source.grow_from)
        if (source.corpus, source.tokenizer, source.data) == (run.corpus, run.tokenizer, run.data):
            epochs += task_of(source).epochs(source)[0]
            sources.append(source.name)
    return epochs, what + (f", cumulative over its growth chain ({', '.join(sources)})" if sources else "")


def train(experiment: Experiment, scale: Scale, run: Run, runs_dir: Path = RUNS_DIR, force_new: bool = False,
          allow_repeats: bool = False, **trainer_options: Any) -> dict:  # fmt: skip
    """Train `run` to its budget (resuming if interrupted) and return its done.json contents. A run above its data
    budget stops first (`data_epochs`); a run directory started with other settings stops this (see
    `check_fingerprint`) unless `force_new` moves it aside, under the run's lock (never while another process
    trains it); a directory whose settings match is kept, so a requeued `--force-new` job resumes."""
    epochs = data_epochs(experiment, scale, run, allow_repeats)
    out = run_dir(experiment, scale, run, runs_dir)
    trainer_options = check_launch(run, resolve_options(trainer_options))  # a refused launch writes nothing
    fields = fingerprint_fields(run, trainer_options)
    same = identity(experiment, scale, run, trainer_options)
    if not force_new and (shared := link_identical(Path(runs_dir), scale, same, out)) is not None:
        print(f"run {run.name}: declared identically by another experiment and trained once, in {shared}; linked")
    check_writable(out)
    with run_lock(out):
        if force_new and (changes := _changes_or_unreadable(out, fields)):
            forget_identity(out)
            move_aside(out, changes)
        check_fingerprint(out, fields)
        if (out / "done.json").exists():
            print(f"run {run.name}: finished earlier ({out / 'done.json'}); skipped")
            done = read_done(out / "done.json")
            record_identity(Path(runs_dir), scale, same, out, done)
            return done
        growth = None
        if run.grow_from is not None:
            source = at_chosen_rate(experiment, scale, find_run(experiment, scale, run.grow_from), runs_dir,
                                    allow_repeats=allow_repeats, **trainer_options)  # fmt: skip
            source_dir = run_dir(experiment, scale, source, runs_dir)
            if not (source_dir / "done.json").exists():
                train(experiment, scale, source, runs_dir, allow_repeats=allow_repeats, **trainer_options)
            run, growth = grown_run(source, source_dir, run, out)
        print(f"== {experiment.name}: training run {run.name} ({scale} scale) in {out}", flush=True)
        try:
            labels = {"experiment": experiment.name, "scale": scale.name}  # for the loggers
            done = train_run(run, out, growth, fingerprinted=fields, labels=labels, **trainer_options)
        except FloatingPointError as error:
            if not run.lr_sweep:
                raise
            return diverged(run, out, error)
        if epochs is not None and epochs > epoch_limit(experiment, scale):  # allowed: in done.json and its rows
            done = {**done, "data_epochs": epochs, "repeats_allowed": True}
            write_done(out, done)
        record_identity(Path(runs_dir), scale, same, out, done)
    return done


IDENTICAL = ".identical"  # runs/.identical/<scale>/<identity>: where the run of that identity finished


def record_identity(runs_dir: Path, scale: Scale, same: str, out: Path, done: dict) -> None:
    """Note that the run of identity `same` finished in `out` (a real directory, not a link to one), with the
    fingerprint of the settings it trained with; a diverged sweep point is no run to share (declared plainly, the
    same settings stop with the error)."""
    index = runs_dir / IDENTICAL / scale.name / same
    if not out.is_symlink() and not index.exists() and not done.get("diverged"):
        entry = {"run": str(out.relative_to(runs_dir)), "fingerprint": read_config(out).get("fingerprint")}
        atomic_write(index, json.dumps(entry))


def link_identical(runs_dir: Path, scale: Scale, same: str, out: Path) -> Path | None:
    """Where another experiment finished the run that `out` would train (the same identity): `out` becomes a link
    to it (one run, one directory). None, and nothing done, where `out` exists or no such run finished; an index
    entry whose run no longer holds the settings it recorded (moved aside, retrained otherwise) is dropped."""
    index = runs_dir / IDENTICAL / scale.name / same
    if os.path.lexists(out) or not index.exists():
        return None
    try:
        entry = json.loads(index.read_text())
        shared = runs_dir / entry["run"]
        current = read_config(shared).get("fingerprint") if (shared / "done.json").exists() else None
    except (ValueError, TypeError, KeyError, OSError, CorruptFileError):  # an older suite's or a damaged entry
        entry, shared, current = {}, None, None
    if current is None or current != entry.get("fingerprint"):
        index.unlink(missing_ok=True)
        return None
    if shared == out:
        return None
    out.parent.mkdir(parents=True, exist_ok=True)
    out.symlink_to(os.path.relpath(shared, out.parent), target_is_directory=True)
    return shared


def forget_identity(out: Path) -> None:
    """A run directory moved aside (`--force-new`) is shared no more: the index entries naming it and the other
    experiments' links to it go (each of those runs trains again, or links to the new run once it finished)."""
    runs_dir, scale = out.parents[2], out.parent.name
    for index in (runs_dir / IDENTICAL / scale).glob("*"):
        try:
            named = runs_dir / json.loads(index.read_text())["run"]
        except (ValueError, TypeError, KeyError, OSError):
            named = None
        if named is None or named == out:
            index.unlink(missing_ok=True)
    for link in runs_dir.glob(f"*/{scale}/*"):
        if link.is_symlink() and (link.parent / os.readlink(link)).resolve() == out.resolve():
            link.unlink()


def at_chosen_rate(experiment: Experiment, scale: Scale, run: Run, runs_dir: Path = RUNS_DIR,
                   **train_options: Any) -> Run:  # fmt: skip
    """`run` at the rate its sweep chooses, training the sweep's points (`train`'s options) until it has; a run
    without a sweep as it is."""
    if run.sweep is None:
        return run
    choice = tuning(experiment, scale, run, runs_dir, lambda point: train(experiment, scale, point, runs_dir,
                                                                          **train_options))  # fmt: skip
    return tuned(run, choice.lr)


def _changes_or_unreadable(out: Path, fields: dict[str, Any]) -> list[str]:
    try:
        return fingerprint_changes(out, fields)
    except CorruptFileError as error:  # its settings cannot be compared: --force-new moves it aside
        return [str(error)]


def diverged(run: Run, out: Path, error: FloatingPointError) -> dict:
    """A sweep point whose loss went non-finite is finished: done.json says so (val_loss null) and keeps the error."""
    done = {"run": run.name, "model": run.model, "val_loss": None, "diverged": str(error),
            "train_flops": run.train_flops()}  # fmt: skip
    write_done(out, done)
    print(f"run {run.name} diverged (a learning-rate sweep point; recorded, the experiment goes on): {error}")
    return done


def grown_run(source: Run, source_dir: Path, run: Run, out: Path) -> tuple[Run, Growth]:
    """Grow `source`'s final weights into `run`'s model. Growth may set config fields (tau pins, Net2Net's eps):
    the returned run carries them as overrides, and both are kept in `out` so that a resumed run agrees."""

    from scaling_axes.harness.grow import grow_model
    from scaling_axes.modules.registry import build_from_config, preset_overrides
    from scaling_axes.modules.tasks.lm import load_weights

    weights, overrides = out / "init_grown.safetensors", out / "init_grown_overrides.json"
    read_done(source_dir / "done.json")  # the source's record and final weights, verified
    if not run.classifies_images:  # the grown model reads the ids its source learned
        tokenizer = load_tokenizer(tokenizer_of(run.corpus, run.tokenizer), run.data.get("tokenizer_path"))
        check_tokenizer(read_final_config(source_dir), tokenizer, source_dir)
    if not overrides.exists():
        model = build_from_config(source.config)
        final = final_weights(source_dir)
        load_weights(model, load_state(final, f"delete {source_dir / 'done.json'} and rerun to retrain {source.name}"),
                     str(final))  # fmt: skip
        grown = grow_model(model, run.config, seed=run.seed, **run.grow_options)
        atomic_save_safetensors(grown.state_dict(), weights, checksum=True)
        atomic_write(overrides, json.dumps(preset_overrides(run.model, grown.config)), checksum=True)
    fix = f"delete {out} and rerun to grow {run.name} again"
    verify_checksum(weights, fix)
    grown = dataclasses.replace(run, overrides=read_verified_json(overrides, fix))
    return grown, Growth(weights, source, final_weights(source_dir))


def report(experiment: Experiment, scale: Scale, runs_dir: Path = RUNS_DIR, results_dir: Path | None = None) -> Path:
    """Rebuild `results/<scale>/<experiment>.csv` (and its figure) from finished runs, then REPORT.md."""
    results_dir = Path(results_dir or RESULTS_DIR)
    results, runs = load_results(experiment, scale, runs_dir), experiment.runs(scale)
    noise, spread_rows = measured_noise(Path(runs_dir) / (experiment.run_group or experiment.name) / scale.name)
    rows = [settle(row, scale, noise, not_learning(row, results, runs), untuned(row, results),
                   unstable(row, results)) if row.evidence else row
            for row in experiment.report(scale, results)]  # fmt: skip
    rows = data_caveats(rows, results, runs) + tuning_rows(results) + spread_rows + floor_rows(runs)
    path = write_rows(experiment.name, scale, rows, results_dir)
    write_seeds(experiment.name, scale, rows, results, results_dir)
    if experiment.figure is not None:
        experiment.figure(scale, results, path.with_suffix(".png"))
    write_report(results_dir)
    return path


NOISE_METRICS = ("val_loss", "val_top1")  # the final metrics whose spread over seeds is measured


def measured_noise(directory: Path) -> tuple[dict[str, float], list[Row]]:
    """metric -> the pooled spread over seeds of one run's final `metric`, from the finished runs in `directory` (an
    experiment's runs at one scale) that trained at two seeds or more, leaving out the seeds that trained unstably
    (a spike, or an outlier among the run's seeds: `harness.stability`), whose spread is not the seeds' noise; and a
    row for each, its note giving the spread over every seed beside it."""
    by_run: dict[str, dict[int, dict]] = {}
    for done_path in sorted(Path(directory).glob("*/done.json")):
        name = done_path.parent.name
        base, _, k = name.rpartition(SEED_SUFFIX)
        base, seed = (base, int(k)) if k.isdigit() else (name, 1)
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
            noise[metric] = spread
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
SEED_METRICS = ("val_loss", "val_bpb", "val_top1", "val_ema_top1", "test_loss", "steps", "tokens")


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
        if repeated := [f"{d['run']} {d['data_epochs']:.1f}" for d in finished if d.get("repeats_allowed")]:
            status = "memorisation"
            notes.append(f"passes over the data (--allow-repeats): {', '.join(repeated)}; memorisation, not a result")
        if stale := [f"{d['run']} ({d['stale']})" for d in finished if d.get("stale")]:
            status = "stale"
            notes.append(f"stale: trained with other settings than declared now: {'; '.join(stale)}; retrain "
                         "(--force-new) or restore the declaration")  # fmt: skip
        note = "; ".join(filter(None, (row.note, *notes)))
        out.append(dataclasses.replace(row, status=status, note=note) if notes else row)
    return out


def data_of(run: Run) -> str:
    """The data a run trains on, in words: the corpus and tokenizer (or images), and whether it stands in."""
    if task_of(run).accuracy_curves:
        embedded = run.data.get("source", "embedded") == "embedded"
        return ("the embedded MNIST digits, standing in for ImageNet-1k: evidence on digits at this size, not on "
                "ImageNet" if embedded else "ImageNet-1k")  # fmt: skip
    stand_in = " (an embedded stand-in, not the paper's corpus: evidence at this size on this data, not at the paper's)"
    stand_in = stand_in if corpus_spec(run.corpus).embedded else ""
    return f"{run.corpus}/{tokenizer_of(run.corpus, run.tokenizer)}{stand_in}"
