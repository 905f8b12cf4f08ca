"""Training an experiment's runs (growing a run from its source first) and rebuilding its results table."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from scaling_axes.datamodules.corpora import CORPORA, default_data_root
from scaling_axes.harness.claims import seeds_of
from scaling_axes.harness.results import RESULTS_DIR, Row, write_report, write_rows
from scaling_axes.harness.runs import (
    RUNS_DIR,
    Experiment,
    Growth,
    Run,
    check_fingerprint,
    find_run,
    fingerprint_changes,
    fingerprint_fields,
    load_results,
    move_aside,
    read_done,
    resolve_options,
    run_dir,
)
from scaling_axes.harness.scales import Scale
from scaling_axes.harness.training import check_writable, run_lock, task_of, train_run
from scaling_axes.io import CorruptFileError, atomic_torch_save, atomic_write, load_torch


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
    trainer_options = resolve_options(trainer_options)
    fields = fingerprint_fields(run, trainer_options)
    check_writable(out)
    with run_lock(out):
        if force_new and (changes := _changes_or_unreadable(out, fields)):
            move_aside(out, changes)
        check_fingerprint(out, fields)
        if (out / "done.json").exists():
            print(f"run {run.name}: finished earlier ({out / 'done.json'}); skipped")
            return read_done(out / "done.json")
        growth = None
        if run.grow_from is not None:
            source = find_run(experiment, scale, run.grow_from)
            source_dir = run_dir(experiment, scale, source, runs_dir)
            if not (source_dir / "done.json").exists():
                train(experiment, scale, source, runs_dir, allow_repeats=allow_repeats, **trainer_options)
            run, growth = grown_run(source, source_dir, run, out)
        print(f"== {experiment.name}: training run {run.name} ({scale} scale) in {out}", flush=True)
        try:
            done = train_run(run, out, growth, fingerprinted=fields, **trainer_options)
        except FloatingPointError as error:
            if not run.lr_sweep:
                raise
            return diverged(run, out, error)
        if epochs is not None and epochs > epoch_limit(experiment, scale):  # allowed: in done.json and its rows
            done = {**done, "data_epochs": epochs, "repeats_allowed": True}
            atomic_write(out / "done.json", json.dumps(done, indent=2))
    return done


def _changes_or_unreadable(out: Path, fields: dict[str, Any]) -> list[str]:
    try:
        return fingerprint_changes(out, fields)
    except CorruptFileError as error:  # its settings cannot be compared: --force-new moves it aside
        return [str(error)]


def diverged(run: Run, out: Path, error: FloatingPointError) -> dict:
    """A sweep point whose loss went non-finite is finished: done.json says so (val_loss null) and keeps the error."""
    done = {"run": run.name, "model": run.model, "val_loss": None, "diverged": str(error),
            "train_flops": run.train_flops()}  # fmt: skip
    atomic_write(out / "done.json", json.dumps(done, indent=2))
    print(f"run {run.name} diverged (a learning-rate sweep point; recorded, the experiment goes on): {error}")
    return done


def grown_run(source: Run, source_dir: Path, run: Run, out: Path) -> tuple[Run, Growth]:
    """Grow `source`'s final weights into `run`'s model. Growth may set config fields (tau pins, Net2Net's eps):
    the returned run carries them as overrides, and both are kept in `out` so that a resumed run agrees."""

    from scaling_axes.harness.grow import grow_model
    from scaling_axes.modules.registry import build_from_config, preset_overrides
    from scaling_axes.modules.tasks.lm import load_weights

    weights, overrides = out / "init_grown.pt", out / "init_grown_overrides.json"
    if not overrides.exists():
        model = build_from_config(source.config)
        final = source_dir / "final.pt"
        load_weights(model, load_torch(final, f"delete {source_dir / 'done.json'} and rerun to retrain {source.name}"),
                     str(final))  # fmt: skip
        grown = grow_model(model, run.config, seed=run.seed, **run.grow_options)
        atomic_torch_save(grown.state_dict(), weights)
        atomic_write(overrides, json.dumps(preset_overrides(run.model, grown.config)))
    grown = dataclasses.replace(run, overrides=json.loads(overrides.read_text()))
    return grown, Growth(weights, source, source_dir / "final.pt")


def report(experiment: Experiment, scale: Scale, runs_dir: Path = RUNS_DIR, results_dir: Path | None = None) -> Path:
    """Rebuild `results/<scale>/<experiment>.csv` (and its figure) from finished runs, then REPORT.md."""
    results_dir = Path(results_dir or RESULTS_DIR)
    results = load_results(experiment, scale, runs_dir)
    rows = data_caveats(experiment.report(scale, results), results, experiment.runs(scale))
    path = write_rows(experiment.name, scale, rows, results_dir)
    if experiment.figure is not None:
        experiment.figure(scale, results, path.with_suffix(".png"))
    write_report(results_dir)
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
    corpus = CORPORA[run.corpus]
    tokens = run.tokenizer or corpus.default_tokenizer
    stand_in = " (an embedded stand-in, not the paper's corpus: evidence at this size on this data, not at the paper's)"
    return f"{run.corpus}/{tokens}" + (stand_in if corpus.embedded else "")
